"""The demo's tool environment: a calculator served by a real MCP server on loopback.

    python -m aworld_cpu_grpo_demo.calculator [--host 127.0.0.1] [--port 0] [--token TOKEN]
                                              [--latency-ms MS] [--latency-dist fixed|gaia]

Prints one JSON line ``{"ip", "port", "token"}`` once it accepts connections (the form the
core's job environments expect), then serves MCP streamable HTTP at ``/mcp`` behind a bearer
token until it is stopped. Expressions are parsed with a strict pattern and ``int()``, never
``eval``: sampled text can hold anything (leading zeros, stray characters).

``--latency-ms`` makes every call take time, as GAIA's tools do (search, page reads, a browser,
sandboxed code: 50 ms to seconds per call); the benchmarks use it (:class:`ToolLatency`).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import re
import secrets
import socket
import sys
from typing import Any

SERVER_NAME = "calculator"
TOOL_NAME = "calc"
_EXPR_RE = re.compile(r"^\s*(\d{1,12})\s*([*+-])\s*(\d{1,12})\s*$")


def calculate(expr: str) -> str:
    """Evaluate ``A op B`` for non-negative integers A, B and op one of ``* + -``.

    Raises ValueError with what was wrong, which the MCP server returns as a tool error.
    """
    match = _EXPR_RE.match(expr)
    if match is None:
        raise ValueError(
            f"cannot evaluate {expr!r}: write two whole numbers and one of * + -, e.g. '1234*5678'"
        )
    left, op, right = int(match.group(1)), match.group(2), int(match.group(3))
    value = left * right if op == "*" else left + right if op == "+" else left - right
    return str(value)


class ToolLatency:
    """How long a tool call takes: ``fixed`` (always ``ms``) or ``gaia`` (log-normal with median ``ms``
    and sigma 1: half the calls under ``ms``, one in ten over 3.6 x ``ms``, one in a hundred over
    10 x, capped at 20 x; the long tail of web search, page loads and sandboxed code). Draws come
    from a seeded generator, so a run's sequence of delays repeats."""

    KINDS = ("fixed", "gaia")

    def __init__(self, ms: float = 0.0, kind: str = "fixed", seed: int = 0):
        import random

        if ms < 0:
            raise ValueError(f"latency must be >= 0 ms, got {ms}")
        if kind not in self.KINDS:
            raise ValueError(f"latency distribution must be one of {', '.join(self.KINDS)}, got {kind!r}")
        self.ms, self.kind = float(ms), kind
        self._rng = random.Random(seed)

    def __bool__(self) -> bool:
        return self.ms > 0

    def draw_s(self) -> float:
        """The next call's delay in seconds."""
        if self.kind == "fixed" or self.ms == 0:
            return self.ms / 1000
        return min(self._rng.lognormvariate(0.0, 1.0), 20.0) * self.ms / 1000

    async def wait(self) -> None:
        """Take one call's time (the server awaits this before answering)."""
        await asyncio.sleep(self.draw_s())

    def describe(self) -> str:
        return "no latency" if not self else f"{self.ms:g} ms {self.kind}"


def build_server(latency: ToolLatency | None = None) -> Any:
    """The MCP server holding the ``calc`` tool (each call first awaits ``latency.wait()``)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(SERVER_NAME, instructions="A calculator for whole numbers.")

    def evaluate(expr: str) -> str:
        try:
            return calculate(expr)
        except ValueError as exc:
            raise ToolError(str(exc)) from None

    if not latency:

        @server.tool(name=TOOL_NAME, structured_output=False)
        def calc(expr: str) -> str:
            """Evaluate an arithmetic expression of two whole numbers, such as 1234*5678.

            Args:
                expr: two whole numbers joined by one of * + -
            """
            return evaluate(expr)

        return server

    @server.tool(name=TOOL_NAME, structured_output=False)
    async def calc_slow(expr: str) -> str:
        """Evaluate an arithmetic expression of two whole numbers, such as 1234*5678.

        Args:
            expr: two whole numbers joined by one of * + -
        """
        await latency.wait()
        return evaluate(expr)

    return server


class BearerAuth:
    """Pure-ASGI check of ``Authorization: Bearer <token>`` (401 with the reason otherwise)."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        reason = "missing bearer token" if not given else "wrong bearer token"
        body = json.dumps({
            "error": "unauthorized",
            "detail": f"{reason}: send 'Authorization: Bearer <token>' with the token the calculator printed",
        }).encode()
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="calculator"')],
        })
        await send({"type": "http.response.body", "body": body})


def build_app(token: str, host: str = "127.0.0.1", latency: ToolLatency | None = None) -> Any:
    """The ASGI app: MCP streamable HTTP at ``/mcp`` behind the bearer check."""
    if not token:
        raise ValueError("an empty token would let anyone in; pass a token (or none for a random one)")
    inner = build_server(latency).streamable_http_app(
        streamable_http_path="/mcp", json_response=True, stateless_http=True, host=host
    )
    return BearerAuth(inner, token)


async def serve(host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                latency: ToolLatency | None = None) -> None:
    """Bind, announce ``{"ip", "port", "token"}`` on stdout once serving, serve until stopped."""
    import logging

    import uvicorn

    # one INFO line per request from the SDK would flood the pipe the core reads our address from
    logging.getLogger("mcp").setLevel(logging.WARNING)
    token = token or secrets.token_urlsafe(24)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(token, host, latency), log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.01)
        print(json.dumps({"ip": host, "port": bound_port, "token": token}), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aworld_cpu_grpo_demo.calculator", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port (default: 0 = any free port)")
    parser.add_argument("--token", default=None, help="bearer token (default: a random one, printed)")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="delay every call by this much (median with --latency-dist gaia); default 0")
    parser.add_argument("--latency-dist", choices=ToolLatency.KINDS, default="fixed",
                        help="fixed: every call --latency-ms; gaia: log-normal, median --latency-ms, sigma 1")
    args = parser.parse_args(argv)
    if args.latency_ms < 0:
        parser.error(f"--latency-ms must be >= 0, got {args.latency_ms:g}")
    try:
        asyncio.run(serve(args.host, args.port, args.token, ToolLatency(args.latency_ms, args.latency_dist)))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
