"""The browser's relayed WebSockets resolve a name once and check the very addresses they connect
to (issue 32, DNS rebinding): a name that answers a public address to the policy's lookup and a
loopback one to the connection's is refused. The name's lookups are answered by a stub on the
event loop's getaddrinfo (no DNS query leaves the machine); the WebSocket server is real, on
127.0.0.1; no Chromium is needed (the relay's fake page side records what the pool does)."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from aworld_gaia_env.browser import BrowserPool, _PolicyResolver
from aworld_gaia_env.services import Services
from aworld_gaia_env.settings import GaiaEnvSettings

NAME = "rebind.example"
PUBLIC = "93.184.215.14"  # a global address: answered, checked, never connected to


def _stub_lookups(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> list[str]:
    """Answer NAME's lookups with ``answers`` in turn (the last one from then on); other names
    as the loop would. Returns the list of addresses answered, one per lookup."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    given: list[str] = []

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host != NAME:
            return await real(host, port, *args, **kwargs)
        address = answers[min(len(given), len(answers) - 1)]
        given.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 0)))]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return given


def _pool(**settings: Any) -> BrowserPool:
    config = GaiaEnvSettings(**settings)
    return BrowserPool(config, Services(config))


class _PageSocket:
    """The page's side of a routed WebSocket (Playwright's WebSocketRoute), recording calls."""

    def __init__(self, url: str):
        self.url, self.protocols = url, []
        self.closed: tuple[int | None, str | None] | None = None
        self.sent: list[Any] = []

    def on_message(self, handler: Any) -> None:
        self.to_server = handler

    def on_close(self, handler: Any) -> None:
        pass

    def send(self, message: Any) -> None:
        self.sent.append(message)

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        self.closed = (code, reason)


async def _loopback_ws_server() -> tuple[web.AppRunner, int, list[str]]:
    reached: list[str] = []

    async def handler(request: web.Request) -> web.WebSocketResponse:
        reached.append(request.path)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str("private data")
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, reached


async def test_a_name_rebinding_to_loopback_after_the_check_is_refused(monkeypatch):
    runner, port, reached = await _loopback_ws_server()
    pool = _pool(allow_private_urls=False)
    answered = _stub_lookups(monkeypatch, [PUBLIC, "127.0.0.1"])
    state = SimpleNamespace(refused=[], relays=set())
    page = _PageSocket(f"ws://{NAME}:{port}/")
    try:
        await pool._route_ws(state, page)
        await asyncio.sleep(0.2)
    finally:
        if pool._ws_session is not None:
            await pool._ws_session.close()
        await runner.cleanup()
    assert reached == [] and page.sent == []  # the loopback server was never reached
    assert answered[-1] == "127.0.0.1"  # the connection's lookup is the one that was checked
    assert len(state.refused) == 1 and "non-public address 127.0.0.1" in state.refused[0], state.refused
    assert page.closed is not None and page.closed[0] == 1008


async def test_the_resolver_looks_up_once_and_returns_what_it_checked(monkeypatch):
    answered = _stub_lookups(monkeypatch, [PUBLIC, "127.0.0.1"])
    resolver = _PolicyResolver(_pool(allow_private_urls=False))
    try:
        results = await resolver.resolve(NAME, 443)
    finally:
        await resolver.close()
    assert answered == [PUBLIC] and [r["host"] for r in results] == [PUBLIC]


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "169.254.169.254"])
async def test_the_resolver_refuses_a_private_answer(monkeypatch, address):
    _stub_lookups(monkeypatch, [address])
    resolver = _PolicyResolver(_pool(allow_private_urls=False))
    try:
        with pytest.raises(OSError, match=f"refused: {NAME} resolves to the non-public address {address}"):
            await resolver.resolve(NAME, 443)
    finally:
        await resolver.close()


@pytest.mark.parametrize("settings", [{"allow_private_urls": True},
                                      {"allow_private_urls": False, "allowed_hosts": NAME},
                                      {"allow_private_urls": False, "allowed_hosts": f"other, {NAME}:8080"}])
async def test_the_resolver_honours_allowed_hosts_and_allow_private(monkeypatch, settings):
    answered = _stub_lookups(monkeypatch, ["10.1.2.3"])
    resolver = _PolicyResolver(_pool(**settings))
    try:
        results = await resolver.resolve(NAME, 8080)
    finally:
        await resolver.close()
    assert answered == ["10.1.2.3"] and [r["host"] for r in results] == ["10.1.2.3"]


async def test_the_relay_still_connects_where_the_policy_allows(monkeypatch):
    """The same path with the name allowed: the relay reaches the server (the test above fails
    for the policy's reason, not because relaying is broken)."""
    runner, port, reached = await _loopback_ws_server()
    pool = _pool(allow_private_urls=False, allowed_hosts=NAME)
    _stub_lookups(monkeypatch, ["127.0.0.1"])
    state = SimpleNamespace(refused=[], relays=set())
    page = _PageSocket(f"ws://{NAME}:{port}/")
    try:
        await pool._route_ws(state, page)
        for _ in range(50):
            if page.sent:
                break
            await asyncio.sleep(0.05)
    finally:
        for task in list(state.relays):
            task.cancel()
        if pool._ws_session is not None:
            await pool._ws_session.close()
        await runner.cleanup()
    assert state.refused == [] and reached == ["/"] and page.sent == ["private data"]

