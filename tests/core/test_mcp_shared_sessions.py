"""Episodes sharing one MCP session per server (real MCP servers on 127.0.0.1).

A 2026-protocol server keeps no session state, so the episodes of one event loop share one
session to it (``session: auto``); every request still carries its own episode's headers.
Handshake-era servers (an ``Mcp-Session-Id``) get one session per episode. Requests are
counted on the server side, from the headers it received.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from aworld_core.errors import MCPConnectionError
from aworld_core.testing import McpHttpServer
from aworld_core.tools.mcp_client import TOOL_LIST_CACHE, MCPToolset, close_shared_sessions
from aworld_core.tools.mcp_config import MCPServerConfig, parse_mcp_config
from aworld_core.tools.mcp_shared import SHARED_SESSIONS
from support.clock import FakeClock
from support.fault_proxy import FaultProxy
from support.openai_stub import free_port

TOKEN = "shared-token"


@pytest.fixture(autouse=True)
async def fresh_state(monkeypatch):
    clock = FakeClock()
    TOOL_LIST_CACHE.clear()
    SHARED_SESSIONS.forget()
    monkeypatch.setattr(TOOL_LIST_CACHE, "clock", clock)
    yield clock
    await close_shared_sessions()
    TOOL_LIST_CACHE.clear()
    SHARED_SESSIONS.forget()


async def episode(entry: dict, episode_id: str, tool: str = "add", arguments: dict | None = None, timeout_s: float = 5):
    """One episode with one server: open, one call, close. Returns (connection, outcome)."""
    toolset = MCPToolset(
        {"calc": MCPServerConfig(**entry)},
        call_timeout_s=timeout_s,
        connect_retries=0,
        headers={"X-Episode-Id": episode_id, "X-Task-Id": f"task-{episode_id}"},
    )
    await toolset.open()
    conn = toolset.connections["calc"]
    try:
        out = await conn.call(tool, arguments if arguments is not None else {"a": 2, "b": 40}, timeout_s=timeout_s)
    finally:
        await toolset.aclose()
    return conn, out


def count(server: McpHttpServer, method: str) -> int:
    return server.methods_seen().count(method)


def session_ids(server: McpHttpServer) -> set[str]:
    return {h["mcp-session-id"] for h in server.headers_seen if "mcp-session-id" in h}


async def test_episodes_share_one_session_and_keep_their_own_headers():
    async with McpHttpServer(name="calc", token=TOKEN) as server:
        for i in range(3):
            conn, out = await episode(server.config(), f"ep-{i}")
            assert conn.shared and out.content == "42"
        results = await asyncio.gather(*(episode(server.config(), f"c-{i}") for i in range(8)))
    assert all(conn.shared and out.content == "42" for conn, out in results)
    assert SHARED_SESSIONS.opened == 1
    assert count(server, "server/discover") == 1  # one connection check, by the first episode
    assert count(server, "tools/list") == 1
    assert count(server, "tools/call") == 11
    assert session_ids(server) == set()  # the 2026 protocol: no server-side session
    calls = [h for h in server.headers_seen if h.get("mcp-method") == "tools/call"]
    expected = [f"ep-{i}" for i in range(3)] + [f"c-{i}" for i in range(8)]
    assert sorted(h["x-episode-id"] for h in calls) == sorted(expected)
    assert all(h["x-task-id"] == f"task-{h['x-episode-id']}" for h in calls)
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in server.headers_seen)


async def test_concurrent_first_episodes_open_one_session():
    async with McpHttpServer(name="calc") as server:
        results = await asyncio.gather(*(episode(server.config(), f"e-{i}") for i in range(16)))
    assert all(out.content == "42" for _, out in results)
    assert SHARED_SESSIONS.opened == 1
    assert count(server, "server/discover") == 1 and count(server, "tools/list") == 1


async def test_a_handshake_era_server_gets_one_session_per_episode():
    async with McpHttpServer(name="calc", handshake_only=True) as server:
        first, out = await episode(server.config(), "ep-0")
        assert not first.shared and out.content == "42"
        results = await asyncio.gather(*(episode(server.config(), f"ep-{i}") for i in range(1, 5)))
    assert all(not conn.shared and out.content == "42" for conn, out in results)
    assert SHARED_SESSIONS.opened == 0
    assert len(session_ids(server)) == 5  # each episode its own Mcp-Session-Id
    for i in range(5):  # and its own headers on every request of its session
        mine = {h["mcp-session-id"] for h in server.headers_seen if h.get("x-episode-id") == f"ep-{i}" and "mcp-session-id" in h}
        assert len(mine) == 1


async def test_session_shared_forces_one_session_even_on_a_handshake_server():
    async with McpHttpServer(name="calc", handshake_only=True) as server:
        for i in range(3):
            conn, out = await episode(server.config(session="shared"), f"ep-{i}")
            assert conn.shared and out.content == "42"
        await close_shared_sessions()  # ends the server-side session (DELETE) while it is up
    assert len(session_ids(server)) == 1
    # the handshake era has no Mcp-Method header; each episode's call still carries its ids
    stamped = [h["x-episode-id"] for h in server.headers_seen if "x-episode-id" in h]
    assert stamped == ["ep-0", "ep-1", "ep-2"]


async def test_session_episode_opts_out():
    async with McpHttpServer(name="calc") as server:
        for i in range(3):
            conn, out = await episode(server.config(session="episode"), f"ep-{i}")
            assert not conn.shared and out.content == "42"
    assert SHARED_SESSIONS.opened == 0
    assert count(server, "server/discover") == 3


async def test_a_call_that_times_out_does_not_disturb_the_other_episodes():
    async with McpHttpServer(name="calc") as server:
        slow = episode(server.config(), "slow", "sleep", {"seconds": 30}, timeout_s=0.5)
        fast = [episode(server.config(), f"fast-{i}") for i in range(5)]
        (slow_conn, slow_out), *rest = await asyncio.gather(slow, *fast)
        assert slow_out.is_error and "did not answer within 0.5 s" in slow_out.content
        assert all(out.content == "42" for _, out in rest)
        _, after = await episode(server.config(), "after")
    assert after.content == "42"
    assert SHARED_SESSIONS.opened == 1


async def test_a_connection_cut_on_one_call_does_not_cut_the_others_in_flight():
    """The SDK runs every POST in its session's task group: an exception there would end the
    shared session and every episode's call on it. The network error stays with its call."""
    async with McpHttpServer(name="calc") as server, FaultProxy(server.port, drop=b"x-episode-id: drop") as proxy:
        entry = {"type": "streamable-http", "url": proxy.url, "timeout": 5}
        assert (await episode(entry, "first"))[1].content == "42"  # opens the shared session
        sleepers = [episode(entry, f"sleep-{i}", "sleep", {"seconds": 1.0}) for i in range(4)]

        async def dropped():
            await asyncio.sleep(0.3)  # while the sleepers' calls are in flight
            return await episode(entry, "drop-1")

        *slept, (drop_conn, drop_out) = await asyncio.gather(*sleepers, dropped())
        assert proxy.dropped == 1
        assert [out.content for _, out in slept] == ["slept 1.0"] * 4
        assert drop_out.is_error and "'calc'" in drop_out.content
        # the cause is named, not an HTTP status no server sent
        assert "went away" in drop_out.content and ("ReadError" in drop_out.content or "RemoteProtocolError" in drop_out.content)
        assert "HTTP 502" not in drop_out.content
        # the cut call marked the session lost: the next episode opens a new one, and the old
        # one closes once nothing runs on it
        assert (await episode(entry, "after"))[1].content == "42"
        assert SHARED_SESSIONS.opened == 2
        def shared() -> list[asyncio.Task]:
            return [t for t in asyncio.all_tasks() if t.get_name().startswith("mcp-shared:") and not t.done()]

        for _ in range(100):  # the old session's task ends soon after (a loaded machine: up to 10 s)
            if len(shared()) <= 1:
                break
            await asyncio.sleep(0.1)
        assert len(shared()) == 1


async def test_a_server_that_restarts_costs_one_call_and_the_next_episode_reconnects():
    server = McpHttpServer(name="flaky", token=TOKEN)
    await asyncio.to_thread(server.start)
    try:
        _, out = await episode(server.config(), "ep-1")
        assert out.content == "42"
        await asyncio.to_thread(server.stop)
        conn, out = await episode(server.config(), "ep-2")  # the session looked alive at start
        assert conn.shared and out.is_error and "'calc'" in out.content
        await asyncio.to_thread(server.start)  # same port
        _, out = await episode(server.config(), "ep-3")
        assert out.content == "42"
    finally:
        await asyncio.to_thread(server.stop)
    assert SHARED_SESSIONS.opened == 2


async def test_a_rotated_token_fails_one_call_then_every_start_loudly():
    server = McpHttpServer(name="calc", token=TOKEN)
    await asyncio.to_thread(server.start)
    try:
        assert (await episode(server.config(), "ep-1"))[1].content == "42"
        await asyncio.to_thread(server.stop)
        server.token = "rotated"
        await asyncio.to_thread(server.start)
        _, out = await episode(server.config(token=TOKEN), "ep-2")
        assert out.is_error and "HTTP 401" in out.content and "token" in out.content
        with pytest.raises(MCPConnectionError) as info:
            await episode(server.config(token=TOKEN), "ep-3")
        assert "HTTP 401" in str(info.value) and "'calc'" in str(info.value)
    finally:
        await asyncio.to_thread(server.stop)


async def test_an_unreachable_server_is_loud_for_every_waiting_episode():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    entry = {"type": "streamable-http", "url": url, "timeout": 2}
    results = await asyncio.gather(*(episode(entry, f"e-{i}") for i in range(4)), return_exceptions=True)
    assert all(isinstance(r, MCPConnectionError) for r in results), results
    assert all(url in str(r) and "ConnectError" in str(r) for r in results)
    assert SHARED_SESSIONS.opened == 0


async def test_an_expired_tool_list_is_listed_again_once(fresh_state):
    async with McpHttpServer(name="calc") as server:
        entry = server.config(tools_cache_ttl=60)
        await episode(entry, "ep-1")
        fresh_state.now += 61
        results = await asyncio.gather(*(episode(entry, f"c-{i}") for i in range(6)))
        assert all(out.content == "42" for _, out in results)
    assert count(server, "tools/list") == 2
    assert SHARED_SESSIONS.opened == 1


async def test_a_list_changed_tool_call_drops_the_list_on_the_shared_session_too():
    server = McpHttpServer(name="calc", tools=["add", "echo"])
    await asyncio.to_thread(server.start)
    try:
        await episode(server.config(), "ep-1")
        await asyncio.to_thread(server.stop)
        server.tools = ["add"]  # redeployed without 'echo'
        await asyncio.to_thread(server.start)
        _, out = await episode(server.config(), "ep-2", "echo", {"text": "hi"})
        assert out.is_error and "Unknown tool" in out.content
        assert len(TOOL_LIST_CACHE) == 0
        toolset = MCPToolset({"calc": MCPServerConfig(**server.config())}, connect_retries=0)
        specs = await toolset.open()
        await toolset.aclose()
        assert {s.name for s in specs} == {"add"}
    finally:
        await asyncio.to_thread(server.stop)


def test_each_event_loop_has_its_own_shared_session():
    """Sessions belong to a loop (trainers run episodes on their own loop threads)."""
    with McpHttpServer(name="calc") as server:
        outcomes: list[str] = []

        def in_thread(i: int) -> None:
            async def main() -> None:
                _, out = await episode(server.config(), f"t-{i}")
                outcomes.append(out.content)
                await close_shared_sessions()

            asyncio.run(main())

        threads = [threading.Thread(target=in_thread, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert outcomes == ["42", "42"]
    assert SHARED_SESSIONS.opened == 2


def test_session_field_is_validated():
    parsed = parse_mcp_config({"mcpServers": {"s": {"url": "http://h/mcp", "session": "episode"}}})
    assert parsed.mcp_servers["s"].session == "episode"
    assert MCPServerConfig(url="http://h/mcp").session == "auto"
    from aworld_core.errors import ConfigError

    with pytest.raises(ConfigError, match="session"):
        parse_mcp_config({"mcpServers": {"s": {"url": "http://h/mcp", "session": "pooled"}}})


async def test_a_cancelled_first_episode_leaves_the_opening_to_the_next():
    async with McpHttpServer(name="calc") as server:
        first = asyncio.ensure_future(episode(server.config(), "cancelled"))
        await asyncio.sleep(0)  # the first episode starts opening the shared session
        others = [asyncio.ensure_future(episode(server.config(), f"w-{i}")) for i in range(3)]
        await asyncio.sleep(0)
        first.cancel()
        results = await asyncio.gather(*others)
        with pytest.raises(asyncio.CancelledError):
            await first
    assert all(out.content == "42" for _, out in results)
