"""Real MCP servers for tests, built with the official SDK (``mcp`` 2.x ``MCPServer``).

Needs only aworld-core's own dependencies (``mcp``, ``starlette``, ``uvicorn``); uvicorn is
imported when a server starts.

* ``McpHttpServer``: streamable HTTP (``/mcp``) or SSE (``/sse``) on 127.0.0.1, served by uvicorn
  in a background thread; optional bearer-token auth answering 401 on a missing or wrong token;
  ``stop()`` / ``start()`` again on the same port (to take a server down mid-episode and back).
* ``McpServerProcess``: the same server as a separate process (``kill()`` it like a crashed host).
* ``stdio_server_config()``: an ``mcpServers`` entry that launches this module as a stdio server.

Tools (pick a subset with ``tools=``): ``add``, ``echo``, ``upper``, ``fail`` (raises an
unexpected exception), ``refuse`` (raises the SDK's ``ToolError`` with a message), ``sleep``
(for timeouts), ``count`` (per-server call counter), ``region`` (an argument mirrored into the
``Mcp-Param-Region`` header, ``x-mcp-header``), ``resume`` (answers ``input_required`` with a
``requestState`` first, then the result when the client retries with it; a 2026 protocol feature,
so it is listed only to 2026 clients).

It answers as the MCP spec says (``protocol_rules``, checked by the official conformance suite in
``tests/core/test_mcp_conformance.py``): an unknown tool or prompt is the JSON-RPC error ``-32602``
(a tool's own failure, and arguments that fail its schema, stay ``isError`` results the model
reads), ``serverInfo.version`` is aworld-core's version.

This module is also a program: ``python -m aworld_core.testing.mcp_server --stdio`` or
``--http --port N [--token T] [--tools add,echo] [--transport sse]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import InputRequiredResult
from pydantic import Field

__all__ = [
    "ALL_TOOLS",
    "McpHttpServer",
    "McpServerProcess",
    "build_app",
    "build_mcp_server",
    "server_command",
    "stdio_server_config",
    "wait_for_port",
]

ALL_TOOLS = ("add", "echo", "upper", "fail", "refuse", "sleep", "count", "region", "resume")
# tools whose answers only a 2026 (stateless) protocol client can take: ``input_required`` results
MODERN_ONLY_TOOLS = frozenset({"resume"})
MODULE = "aworld_core.testing.mcp_server"


def server_command(*args: str) -> list[str]:
    """The command that runs this module as a server program with ``args`` (see ``main``)."""
    return [sys.executable, "-m", MODULE, *args]


def build_mcp_server(
    name: str = "test-tools", tools: Iterable[str] | None = None, *, tools_ttl_ms: int | None = None,
    **server_options: Any,
) -> Any:
    """An ``MCPServer`` with the chosen test tools (all when ``tools`` is None).

    ``tools_ttl_ms``: the ``ttlMs`` caching hint its ``tools/list`` answers carry (the SDK's
    default is 0, "immediately stale"). ``server_options`` go to ``MCPServer`` as they are (e.g.
    ``auth=`` and ``auth_server_provider=``: the SDK's OAuth in front of the tools).
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    chosen = set(ALL_TOOLS if tools is None else tools)
    unknown = chosen - set(ALL_TOOLS)
    if unknown:
        raise ValueError(f"unknown test tools {sorted(unknown)}; choose from {ALL_TOOLS}")
    extra: dict[str, Any] = {}
    if tools_ttl_ms is not None:
        from mcp.server.caching import CacheHint

        extra["cache_hints"] = {"tools/list": CacheHint(ttl_ms=tools_ttl_ms)}
    from aworld_core import __version__

    server = MCPServer(name, version=__version__, log_level="WARNING", **extra, **server_options)
    server.middleware.append(protocol_rules(chosen))
    calls = {"count": 0}

    if "add" in chosen:

        @server.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

    if "echo" in chosen:

        @server.tool()
        def echo(text: str) -> str:
            """Return the text unchanged."""
            return f"{name}:{text}"

    if "upper" in chosen:

        @server.tool()
        def upper(text: str) -> str:
            """Upper-case the text."""
            return text.upper()

    if "fail" in chosen:

        @server.tool()
        def fail(reason: str = "requested") -> str:
            """Always raises (an unexpected crash inside the tool)."""
            raise RuntimeError(f"tool failure: {reason}")

    if "refuse" in chosen:

        @server.tool()
        def refuse(reason: str = "not allowed") -> str:
            """Always fails with a message meant for the model."""
            raise ToolError(f"refused: {reason}")

    if "sleep" in chosen:

        @server.tool()
        async def sleep(seconds: float) -> str:
            """Sleep, then answer."""
            await asyncio.sleep(seconds)
            return f"slept {seconds}"

    if "region" in chosen:
        @server.tool()
        def region(where: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
            """Name the region (the argument also travels in the Mcp-Param-Region header)."""
            return f"region {where}"

    if "resume" in chosen:
        @server.tool()
        def resume(ctx: Context) -> str | InputRequiredResult:
            """Asks the client to come back (input_required with only a state), then answers."""
            if ctx.request_state == "round-1":
                return "resumed"
            return InputRequiredResult(request_state="round-1")

    if "count" in chosen:

        @server.tool()
        def count() -> int:
            """How many times this tool was called on this server."""
            calls["count"] += 1
            return calls["count"]

    return server


def protocol_rules(tools: Iterable[str]) -> Any:
    """Server middleware: what the SDK's ``MCPServer`` leaves to its user, done as the spec says.

    * ``tools/call`` of a tool the server does not have (or one this client's protocol version
      cannot take an answer from) is the protocol error ``-32602``, not an ``isError`` result;
    * ``prompts/get`` of an unknown prompt is ``-32602`` too (the SDK's ``ValueError`` became ``0``);
    * ``tools/list`` leaves out the tools a handshake-era client cannot call (``MODERN_ONLY_TOOLS``).
    """
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    names = frozenset(tools)

    def callable_by(version: str) -> frozenset[str]:
        return names if version in MODERN_PROTOCOL_VERSIONS else names - MODERN_ONLY_TOOLS

    async def middleware(ctx: Any, call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        if ctx.request_id is not None and ctx.method == "tools/call":
            name = params.get("name")
            if isinstance(name, str) and name not in callable_by(ctx.protocol_version):
                if name in names:
                    raise MCPError(
                        INVALID_PARAMS,
                        f"Tool {name} needs MCP protocol {MODERN_PROTOCOL_VERSIONS[-1]}; this connection "
                        f"speaks {ctx.protocol_version}",
                    )
                raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")
        if ctx.request_id is not None and ctx.method == "prompts/get":
            # the test servers define no prompts: every name is unknown
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.get('name')}")
        result = await call_next(ctx)
        if ctx.method == "tools/list" and ctx.request_id is not None:
            allowed = callable_by(ctx.protocol_version)
            if allowed != names:
                result = _without_tools(result, names - allowed)
        return result

    return middleware


def _without_tools(result: Any, hidden: frozenset[str]) -> Any:
    if isinstance(result, dict):
        return {**result, "tools": [t for t in result.get("tools", []) if t.get("name") not in hidden]}
    return result.model_copy(update={"tools": [t for t in result.tools if t.name not in hidden]})


class _BearerAuth:
    """ASGI wrapper: 401 unless ``Authorization: Bearer <token>``; records request headers."""

    def __init__(self, app: Any, token: str | None, seen: list[dict[str, str]], bodies: list[bytes] | None = None):
        self.app = app
        self.token = token
        self.seen = seen
        self.bodies = bodies if bodies is not None else []  # request bodies, index-aligned with ``seen``

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            self.seen.append(headers)
            self.bodies.append(b"")
            index, inner = len(self.bodies) - 1, receive

            async def receive() -> dict[str, Any]:
                message = await inner()
                if message.get("type") == "http.request":
                    self.bodies[index] += message.get("body", b"")
                return message

            if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
                body = json.dumps({"error": "unauthorized", "detail": "missing or wrong bearer token"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class _HandshakeOnly:
    """ASGI wrapper: refuse the 2026 ``server/discover`` probe the way an mcp 1.x server does
    (400, "Missing session ID"), so clients fall back to the ``initialize`` handshake and get an
    ``Mcp-Session-Id``: a stateful, handshake-era server built from the 2.x SDK."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if headers.get("mcp-method") == "server/discover" and "mcp-session-id" not in headers:
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": "server-error",
                     "error": {"code": -32600, "message": "Bad Request: Missing session ID"}}
                ).encode()  # fmt: skip
                while True:  # drain the request body first
                    message = await receive()
                    if not message.get("more_body"):
                        break
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _bound_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def build_app(
    transport: str = "streamable-http",
    *,
    name: str = "test-tools",
    tools: Iterable[str] | None = None,
    token: str | None = None,
    seen: list[dict[str, str]] | None = None,
    bodies: list[bytes] | None = None,
    tools_ttl_ms: int | None = None,
    handshake_only: bool = False,
) -> Any:
    """The ASGI app of a test server: ``build_mcp_server`` over ``transport`` behind the bearer
    check (``token``) that records request headers into ``seen`` and bodies into ``bodies``."""
    server = build_mcp_server(name, tools, tools_ttl_ms=tools_ttl_ms)
    if transport == "sse":
        app = server.sse_app()
    elif transport == "streamable-http":
        app = server.streamable_http_app()
        if handshake_only:
            app = _HandshakeOnly(app)
    else:
        raise ValueError(f"transport must be 'streamable-http' or 'sse', got {transport!r}")
    return _BearerAuth(app, token, seen if seen is not None else [], bodies)


class McpHttpServer:
    """A test MCP server over HTTP in a background thread.

    ``url`` is the endpoint (``.../mcp`` or ``.../sse``); ``config()`` gives its ``mcpServers``
    entry; ``headers_seen`` lists the headers of every HTTP request it received (``bodies_seen``
    their bodies),
    ``methods_seen()`` their ``Mcp-Method`` headers. ``handshake_only=True``: a server that
    refuses the 2026 protocol's ``server/discover`` (clients fall back to ``initialize`` and
    get an ``Mcp-Session-Id``).
    """

    def __init__(
        self,
        *,
        name: str = "test-tools",
        tools: Iterable[str] | None = None,
        token: str | None = None,
        transport: str = "streamable-http",
        host: str = "127.0.0.1",
        port: int = 0,
        tools_ttl_ms: int | None = None,
        handshake_only: bool = False,
        tls: tuple[str, str] | None = None,
    ):
        self.name = name
        self.tls = tls  # (certfile, keyfile): serve https
        self.tools = list(tools) if tools is not None else None
        self.token = token
        self.transport = transport
        self.host = host
        self.port = port
        self.tools_ttl_ms = tools_ttl_ms
        self.handshake_only = handshake_only
        self.headers_seen: list[dict[str, str]] = []
        self.bodies_seen: list[bytes] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        path = "/sse" if self.transport == "sse" else "/mcp"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}{path}"

    def config(self, token: str | None = ..., **extra: Any) -> dict[str, Any]:  # type: ignore[assignment]
        """This server as an ``mcpServers`` entry; ``token=`` overrides the token sent."""
        token = self.token if token is ... else token
        entry: dict[str, Any] = {"type": self.transport, "url": self.url, "timeout": 30, "sse_read_timeout": 30}
        if token is not None:
            entry["headers"] = {"Authorization": f"Bearer {token}"}
        entry.update(extra)
        return entry

    def start(self) -> McpHttpServer:
        import uvicorn

        if self._thread is not None:
            return self
        sock = _bound_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        app = build_app(
            self.transport,
            name=self.name,
            tools=self.tools,
            token=self.token,
            seen=self.headers_seen,
            bodies=self.bodies_seen,
            tools_ttl_ms=self.tools_ttl_ms,
            handshake_only=self.handshake_only,
        )
        tls = {"ssl_certfile": self.tls[0], "ssl_keyfile": self.tls[1]} if self.tls else {}
        config = uvicorn.Config(app, log_level="critical", timeout_graceful_shutdown=1, lifespan="on", **tls)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"mcp-{self.name}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"test MCP server '{self.name}' did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def methods_seen(self) -> list[str | None]:
        """The ``Mcp-Method`` header of each request (2026 protocol: every request carries it)."""
        return [headers.get("mcp-method") for headers in self.headers_seen]

    def stop(self) -> None:
        """Stop serving (open sessions are cut). ``start()`` again serves on the same port."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(5)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        self._server = None
        self._thread = None

    def __enter__(self) -> McpHttpServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> McpHttpServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.to_thread(self.stop)


def wait_for_port(host: str, port: int, timeout_s: float = 20.0) -> None:
    """Return once something accepts TCP connections on ``host:port``; ``RuntimeError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout_s} s")


class McpServerProcess:
    """The test MCP server in its own process (``kill()`` simulates a crashed host)."""

    def __init__(
        self,
        *,
        name: str = "test-tools",
        tools: Iterable[str] | None = None,
        token: str | None = None,
        transport: str = "streamable-http",
        port: int = 0,
    ):
        self.name = name
        self.tools = list(tools) if tools is not None else None
        self.token = token
        self.transport = transport
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{'/sse' if self.transport == 'sse' else '/mcp'}"

    def config(self, token: str | None = ...) -> dict[str, Any]:  # type: ignore[assignment]
        token = self.token if token is ... else token
        entry: dict[str, Any] = {"type": self.transport, "url": self.url, "timeout": 30}
        if token is not None:
            entry["headers"] = {"Authorization": f"Bearer {token}"}
        return entry

    def start(self) -> McpServerProcess:
        if not self.port:
            from aworld_core.vllm_server import free_port

            self.port = free_port()
        cmd = server_command("--http", "--port", str(self.port), "--name", self.name)
        cmd += ["--transport", self.transport]
        if self.token is not None:
            cmd += ["--token", self.token]
        if self.tools is not None:
            cmd += ["--tools", ",".join(self.tools)]
        import tempfile

        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._stderr)
        try:
            wait_for_port("127.0.0.1", self.port)
        except RuntimeError as exc:
            self.kill()
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; server stderr:\n{tail}") from None
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> McpServerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def stdio_server_config(tools: Iterable[str] | None = None, name: str = "stdio-tools") -> dict[str, Any]:
    """An ``mcpServers`` entry that runs this module as a stdio MCP server."""
    command, *args = server_command("--stdio", "--name", name)
    if tools is not None:
        args += ["--tools", ",".join(tools)]
    return {"type": "stdio", "command": command, "args": args, "env": {"PYTHONUNBUFFERED": "1"}, "timeout": 20}


def main(argv: list[str] | None = None) -> None:
    """Serve a test MCP server over stdio or HTTP until killed (the module's program)."""
    parser = argparse.ArgumentParser(description="A test MCP server.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true")
    mode.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--name", default="test-tools")
    parser.add_argument("--tools", default=None, help="comma list; default: all")
    parser.add_argument("--transport", default="streamable-http", choices=["streamable-http", "sse"])
    args = parser.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t] if args.tools else None
    if args.stdio:
        asyncio.run(build_mcp_server(args.name, tools).run_stdio_async())
        return
    import uvicorn

    app = build_app(args.transport, name=args.name, tools=tools, token=args.token)
    sock = _bound_socket("127.0.0.1", args.port)  # bound last: a listening port means ready
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
