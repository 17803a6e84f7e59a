"""Tool lists across episodes: aworld-core's ``ToolListCache`` against the SDK's response cache.

    .venv/bin/python benchmarks/mcp_tool_cache.py [--episodes 150] [--tools 30] [--rounds 3]

Each episode opens its own MCP session to a real server (official SDK ``MCPServer`` over
streamable HTTP, its own process on 127.0.0.1), gets the tool list, makes one ``tools/call``
whose structured result the client validates against the tool's output schema, and closes
(what an episode on its own session does). Arms, run in alternation each round:

* ``no cache``: ``Client(cache=None)``, ``list_tools()`` every episode (the baseline);
* ``ours``: ``Client(cache=None)`` + ``aworld_core.tools.mcp_tool_cache`` (``install`` a fresh
  listing into the new session, keep the output-schema validators it compiled);
* ``sdk``: ``Client(cache=CacheConfig(store=<one shared InMemoryResponseCacheStore>,
  partition=..., default_ttl_ms=...))`` -- ``mcp.client.caching`` shared across sessions.

Against two servers: one that sets no cache hint (``ttlMs: 0`` on the wire, what MCPServer sends
by default and what the GAIA environment sends) and one with ``cache_hints={"tools/list":
CacheHint(ttl_ms=...)}``. Printed per arm: wall ms and client CPU ms per episode, and how many
``tools/list`` requests reached the server per episode. Writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

from pydantic import BaseModel

TTL_MS = 300_000


class Finding(BaseModel):
    """A tool's structured result: the client validates it against the output schema."""

    query: str
    answer: str
    score: float
    sources: list[str]


# ---------------------------------------------------------------------------------------------
# the server (this file run with --serve)
# ---------------------------------------------------------------------------------------------


def build_server(n_tools: int, ttl_ms: int) -> Any:
    from mcp.server.caching import CacheHint
    from mcp.server.mcpserver import MCPServer
    hints = {"tools/list": CacheHint(ttl_ms=ttl_ms)} if ttl_ms else None
    server = MCPServer("bench-cache", log_level="WARNING", cache_hints=hints)

    def make(i: int) -> Any:
        async def tool(query: str, limit: int = 5, lang: str = "en") -> Finding:
            return Finding(query=query, answer=f"{query} -> {i}", score=0.5, sources=[f"s{i}"])

        return tool

    for i in range(n_tools):
        server.add_tool(make(i), name=f"tool_{i:02d}", description=f"Look a fact up in source {i} (GAIA-sized list).")
    return server


class _Counting:
    """ASGI wrapper: counts ``tools/list`` requests; ``GET /stats`` answers the count."""

    def __init__(self, app: Any):
        self.app = app
        self.lists = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stats":
            body = json.dumps({"tools_list": self.lists}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return

        async def counting_receive() -> Any:
            message = await receive()
            if message.get("type") == "http.request" and b'"tools/list"' in message.get("body", b""):
                self.lists += 1
            return message

        await self.app(scope, counting_receive, send)


def serve(port: int, n_tools: int, ttl_ms: int) -> None:
    import uvicorn

    app = _Counting(build_server(n_tools, ttl_ms).streamable_http_app(host="127.0.0.1"))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---------------------------------------------------------------------------------------------
# the client arms
# ---------------------------------------------------------------------------------------------


async def episode_no_cache(url: str, _state: Any) -> None:
    from mcp import Client

    async with Client(url, cache=None) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool(tools[0].name, {"query": "q"})
        assert result.structured_content is not None


async def episode_ours(url: str, cache: Any) -> None:
    from mcp import Client

    from aworld_core.tools.mcp_tool_cache import tool_list_key

    key = tool_list_key(_http_config(url))
    async with Client(url, cache=None) as client:
        version = client.session.protocol_version
        listing = cache.get(key, version)
        if listing is not None and listing.install(client.session):
            tools = listing.tools
        else:
            tools = (await client.list_tools()).tools
            listing = cache.put(key, version, tools, TTL_MS / 1000)
        result = await client.call_tool(tools[0].name, {"query": "q"})
        assert result.structured_content is not None
        listing.learn_validators(client.session)


async def episode_sdk(url: str, store: Any) -> None:
    from mcp import Client
    from mcp.client.caching import CacheConfig

    config = CacheConfig(store=store, partition="bench-token", default_ttl_ms=TTL_MS)
    async with Client(url, cache=config) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool(tools[0].name, {"query": "q"})
        assert result.structured_content is not None


def _http_config(url: str) -> Any:
    from aworld_core.tools.mcp_config import MCPServerConfig

    return MCPServerConfig(type="streamable-http", url=url)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def _start_server(n_tools: int, ttl_ms: int) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--port", str(port), "--tools", str(n_tools), "--ttl-ms", str(ttl_ms)]
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            _stats(port)
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start") from None
            time.sleep(0.1)


async def measure(args: argparse.Namespace, ttl_ms: int) -> dict[str, dict[str, float]]:
    from mcp.client.caching import InMemoryResponseCacheStore

    from aworld_core.tools.mcp_tool_cache import ToolListCache

    proc, port = _start_server(args.tools, ttl_ms)
    url = f"http://127.0.0.1:{port}/mcp"
    arms = {
        "no cache": (episode_no_cache, None),
        "ours (ToolListCache)": (episode_ours, ToolListCache()),
        "sdk (mcp.client.caching)": (episode_sdk, InMemoryResponseCacheStore()),
    }
    walls: dict[str, list[float]] = {name: [] for name in arms}
    cpus: dict[str, list[float]] = {name: [] for name in arms}
    lists: dict[str, int] = dict.fromkeys(arms, 0)
    try:
        for fn, state in arms.values():  # warm-up: imports, first listing into each cache
            for _ in range(3):
                await fn(url, state)
        for _ in range(args.rounds):
            for name, (fn, state) in arms.items():
                before = _stats(port)["tools_list"]
                wall0, cpu0 = time.perf_counter(), time.process_time()
                for _ in range(args.episodes):
                    await fn(url, state)
                walls[name].append((time.perf_counter() - wall0) / args.episodes * 1000)
                cpus[name].append((time.process_time() - cpu0) / args.episodes * 1000)
                lists[name] += _stats(port)["tools_list"] - before
    finally:
        proc.terminate()
        proc.wait(10)
    total = args.rounds * args.episodes
    return {
        name: {"wall_ms": statistics.median(walls[name]), "cpu_ms": statistics.median(cpus[name]),
               "lists": lists[name] / total}
        for name in arms
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=150, help="episodes per arm per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tools", type=int, default=30, help="tools the server lists")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--ttl-ms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.port, args.tools, args.ttl_ms)
        return
    import logging

    logging.getLogger("mcp").setLevel(logging.WARNING)
    print(f"{args.tools} tools with output schemas, {args.episodes} episodes x {args.rounds} rounds per arm, "
          f"{os.cpu_count()} CPUs; median of the rounds' per-episode means")
    for label, ttl_ms in (("server sets no cache hint (ttlMs 0)", 0), (f"server hints ttlMs {TTL_MS}", TTL_MS)):
        results = asyncio.run(measure(args, ttl_ms))
        base = results["no cache"]
        print(f"\n{label}")
        print(f"  {'arm':<26} {'wall ms/ep':>10} {'CPU ms/ep':>10} {'vs none':>8} {'tools/list per ep':>18}")
        for name, r in results.items():
            ratio = r["cpu_ms"] / base["cpu_ms"]
            print(f"  {name:<26} {r['wall_ms']:>10.2f} {r['cpu_ms']:>10.2f} {ratio:>7.2f}x {r['lists']:>18.2f}")


if __name__ == "__main__":
    main()
