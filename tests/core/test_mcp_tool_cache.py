"""MCP tool lists reused across episodes on per-episode sessions (real MCP servers on 127.0.0.1).

These episodes open their own sessions (``session: "episode"``); episodes sharing one session
are tested in test_mcp_shared_sessions.py.

Requests are counted on the server side: with the 2026 protocol every request carries its
``Mcp-Method`` header, which the test server records.
"""

from __future__ import annotations

import asyncio

import pytest

from aworld_core.errors import ConfigError, MCPConnectionError
from aworld_core.testing import McpHttpServer, stdio_server_config
from aworld_core.tools import mcp_client
from aworld_core.tools.mcp_client import TOOL_LIST_CACHE, MCPToolset, ToolListCache, tool_list_key
from aworld_core.tools.mcp_config import MCPServerConfig, parse_mcp_config
from support.clock import FakeClock

TOKEN = "cache-token"


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    clock = FakeClock()
    TOOL_LIST_CACHE.clear()
    monkeypatch.setattr(TOOL_LIST_CACHE, "clock", clock)
    yield clock
    TOOL_LIST_CACHE.clear()


async def episode(entry: dict, episode_id: str, tool: str = "add", arguments: dict | None = None):
    """What one episode does with one server: open (connect + tools), one call, close."""
    toolset = MCPToolset(
        {"calc": MCPServerConfig(**{"session": "episode", **entry})},
        call_timeout_s=5,
        connect_retries=0,
        headers={"X-Episode-Id": episode_id, "X-Task-Id": f"task-{episode_id}"},
    )
    specs = await toolset.open()
    conn = toolset.connections["calc"]
    try:
        out = await conn.call(tool, arguments if arguments is not None else {"a": 2, "b": 40})
    finally:
        await toolset.aclose()
    return specs, conn.tools_from_cache, out


def count(server: McpHttpServer, method: str) -> int:
    return server.methods_seen().count(method)


async def test_later_episodes_reuse_the_tool_list_but_open_their_own_sessions():
    async with McpHttpServer(name="calc", token=TOKEN) as server:
        specs1, cached1, out1 = await episode(server.config(), "ep-1")
        specs2, cached2, out2 = await episode(server.config(), "ep-2")
        specs3, cached3, out3 = await episode(server.config(), "ep-3")
    assert (cached1, cached2, cached3) == (False, True, True)
    assert specs2 == specs1 == specs3
    # structured results are still validated against the tool's output schema (the SDK would
    # re-list to validate a tool it had not seen listed)
    assert out1.content == out2.content == out3.content == "42"
    assert count(server, "tools/list") == 1
    assert count(server, "server/discover") == 3  # every episode still connects and is checked
    assert count(server, "tools/call") == 3
    # each episode's requests carry its own episode/task ids (per-episode workspaces)
    calls = [h for h in server.headers_seen if h.get("mcp-method") == "tools/call"]
    assert [h.get("x-episode-id") for h in calls] == ["ep-1", "ep-2", "ep-3"]
    assert [h.get("x-task-id") for h in calls] == ["task-ep-1", "task-ep-2", "task-ep-3"]
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in server.headers_seen)
    assert TOOL_LIST_CACHE.hits == 2
    # the output-schema validator compiled in episode 1 is handed to later sessions
    listing = TOOL_LIST_CACHE.get(tool_list_key(MCPServerConfig(**server.config())), "2026-07-28")
    assert listing is not None and "add" in listing.validators


async def test_an_episode_that_edits_its_tool_schemas_does_not_change_the_next_ones():
    async with McpHttpServer(name="calc", tools=["add"]) as server:
        first, _, _ = await episode(server.config(), "ep-1")
        second, cached, _ = await episode(server.config(), "ep-2")
        assert cached
        second[0].parameters["properties"]["a"]["type"] = "string"  # e.g. a chat template's rewrite
        third, _, _ = await episode(server.config(), "ep-3")
    assert third[0].parameters["properties"]["a"]["type"] == "integer" == first[0].parameters["properties"]["a"]["type"]


async def test_per_episode_headers_do_not_split_the_cache_but_static_headers_do():
    async with McpHttpServer(name="calc") as server:
        await episode(server.config(), "a")
        await episode(server.config(), "b")  # other X-Episode-Id: same entry
        assert count(server, "tools/list") == 1
        other = server.config(headers={"MCP_SERVERS": "wiki"})
        _, cached, _ = await episode(other, "c")  # other static headers: its own entry
        assert not cached
        assert count(server, "tools/list") == 2
        _, cached, _ = await episode(other, "d")
        assert cached
        assert count(server, "tools/list") == 2
    assert tool_list_key(MCPServerConfig(**server.config())) != tool_list_key(MCPServerConfig(**other))


async def test_a_refused_token_is_loud_even_with_a_cached_tool_list():
    server = McpHttpServer(name="calc", token=TOKEN)
    await asyncio.to_thread(server.start)
    try:
        await episode(server.config(), "ep-1")
        assert len(TOOL_LIST_CACHE) == 1
        # the server comes back with another token: the cached list must not hide the refusal
        await asyncio.to_thread(server.stop)
        server.token = "rotated"
        await asyncio.to_thread(server.start)
        with pytest.raises(MCPConnectionError) as info:
            await episode(server.config(token=TOKEN), "ep-2")
        assert "HTTP 401" in str(info.value) and "'calc'" in str(info.value)
        # a wrong token never had a tool list to reuse
        with pytest.raises(MCPConnectionError, match="HTTP 401"):
            await episode(server.config(token="wrong"), "ep-3")
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_call_to_a_tool_the_server_no_longer_has_drops_the_cached_list():
    server = McpHttpServer(name="calc", tools=["add", "echo"])
    await asyncio.to_thread(server.start)
    try:
        specs, _, _ = await episode(server.config(), "ep-1")
        assert {s.name for s in specs} == {"add", "echo"}
        # redeployed without 'echo' on the same URL
        await asyncio.to_thread(server.stop)
        server.tools = ["add"]
        await asyncio.to_thread(server.start)
        specs, cached, out = await episode(server.config(), "ep-2", "echo", {"text": "hi"})
        assert cached and {s.name for s in specs} == {"add", "echo"}  # stale until the server says so
        assert out.is_error and "Unknown tool" in out.content
        assert len(TOOL_LIST_CACHE) == 0
        specs, cached, out = await episode(server.config(), "ep-3")
        assert not cached and {s.name for s in specs} == {"add"}
        assert out.content == "42"
        listed_by = [h.get("x-episode-id") for h in server.headers_seen if h.get("mcp-method") == "tools/list"]
        assert listed_by == ["ep-1", "ep-3"]
    finally:
        await asyncio.to_thread(server.stop)


async def test_tool_errors_that_are_not_unknown_tools_keep_the_cache():
    async with McpHttpServer(name="calc") as server:
        await episode(server.config(), "ep-1", "fail", {"reason": "boom"})
        _, cached, out = await episode(server.config(), "ep-2", "refuse", {"reason": "quota"})
        assert cached and out.is_error and "refused: quota" in out.content
        _, cached, _ = await episode(server.config(), "ep-3")
        assert cached
        assert count(server, "tools/list") == 1


async def test_opt_out_lists_in_every_episode():
    async with McpHttpServer(name="calc") as server:
        entry = server.config(tools_cache_ttl=0)
        results = [await episode(entry, f"ep-{i}") for i in range(3)]
    assert [cached for _, cached, _ in results] == [False, False, False]
    assert all(out.content == "42" for _, _, out in results)
    assert count(server, "tools/list") == 3
    assert len(TOOL_LIST_CACHE) == 0


async def test_the_list_expires_after_the_configured_ttl(fresh_cache):
    async with McpHttpServer(name="calc") as server:
        entry = server.config(tools_cache_ttl=60)
        await episode(entry, "ep-1")
        fresh_cache.now += 59
        assert (await episode(entry, "ep-2"))[1]
        fresh_cache.now += 2  # 61 s after the listing
        assert not (await episode(entry, "ep-3"))[1]
        assert (await episode(entry, "ep-4"))[1]
        assert count(server, "tools/list") == 2


async def test_a_shorter_server_ttl_hint_wins(fresh_cache):
    async with McpHttpServer(name="calc", tools_ttl_ms=5000) as server:
        entry = server.config()  # tools_cache_ttl 300 s by default
        await episode(entry, "ep-1")
        fresh_cache.now += 4
        assert (await episode(entry, "ep-2"))[1]
        fresh_cache.now += 2  # 6 s: past the server's 5 s
        assert not (await episode(entry, "ep-3"))[1]
        assert count(server, "tools/list") == 2


async def test_the_sdk_relisting_mid_session_drops_the_cached_list():
    """A session that lists again (the SDK's answer to a changed tool schema) invalidates."""
    async with McpHttpServer(name="calc") as server:
        await episode(server.config(), "ep-1")
        toolset = MCPToolset({"calc": MCPServerConfig(**server.config(session="episode"))}, connect_retries=0)
        await toolset.open()
        conn = toolset.connections["calc"]
        try:
            assert conn.tools_from_cache
            await conn.session.client.list_tools()
        finally:
            await toolset.aclose()
        assert len(TOOL_LIST_CACHE) == 0
        assert not (await episode(server.config(), "ep-2"))[1]


async def test_concurrent_episodes_on_a_cached_list_keep_their_own_headers():
    async with McpHttpServer(name="calc") as server:
        await episode(server.config(), "first")
        outs = await asyncio.gather(*(episode(server.config(), f"c-{i}") for i in range(4)))
    assert all(cached and out.content == "42" for _, cached, out in outs)
    assert count(server, "tools/list") == 1
    for i in range(4):
        mine = [h for h in server.headers_seen if h.get("x-episode-id") == f"c-{i}"]
        assert [h.get("mcp-method") for h in mine] == ["server/discover", "tools/call"]
    assert all(h.get("x-episode-id") for h in server.headers_seen)


async def test_sse_and_stdio_servers_are_cached_too():
    async with McpHttpServer(name="calc", transport="sse") as server:
        assert [(await episode(server.config(), f"ep-{i}"))[1] for i in range(2)] == [False, True]
    stdio = stdio_server_config(tools=["add"])
    results = [await episode(stdio, f"ep-{i}") for i in range(2)]
    assert [cached for _, cached, _ in results] == [False, True]
    assert all(out.content == "42" for _, _, out in results)


def test_cache_entries_are_per_protocol_version_and_bounded():
    cache = ToolListCache(max_entries=2, clock=lambda: 0.0)
    cache.put(("a",), "2026-07-28", ["t"], 10)
    assert cache.get(("a",), "2025-11-25") is None  # another protocol era lists afresh
    assert cache.get(("a",), "2026-07-28").tools == ["t"]
    first = cache.get(("a",), "2026-07-28")
    cache.put(("b",), "v", [], 10)
    cache.put(("c",), "v", [], 10)
    assert len(cache) == 2 and cache.get(("a",), "2026-07-28") is None
    assert not first.valid


def test_config_field_is_validated():
    parsed = parse_mcp_config({"mcpServers": {"s": {"url": "http://h/mcp", "tools_cache_ttl": 30}}})
    assert parsed.mcp_servers["s"].tools_cache_ttl == 30
    assert MCPServerConfig(url="http://h/mcp").tools_cache_ttl == 300
    with pytest.raises(ConfigError, match="tools_cache_ttl"):
        parse_mcp_config({"mcpServers": {"s": {"url": "http://h/mcp", "tools_cache_ttl": -1}}})
    with pytest.raises(ConfigError, match="tools_cache_ttl"):
        parse_mcp_config({"mcpServers": {"s": {"url": "http://h/mcp", "cache_tools": False}}})


@pytest.mark.parametrize(
    ("code", "text", "tool", "unknown"),
    [
        (None, "Unknown tool: echo", "echo", True),  # the SDK's servers
        (None, "unknown tool 'x__y'. Available tools: a, b", "x__y", True),  # the GAIA environment
        (None, "Tool 'echo' not found", "echo", True),
        (-32602, "Unknown tool: add", "add", True),  # the spec's protocol error
        (None, "read_text: file not found: a.txt", "read_text", False),  # the tool's own failure
        (None, "Error executing tool read_text: file not found", "read_text", False),
        (-32602, "Invalid params: 'a' is required", "add", False),  # bad arguments from the model
        (None, "refused: quota", "refuse", False),
    ],
)
def test_only_unknown_tool_answers_invalidate(code, text, tool, unknown):
    assert mcp_client._names_unknown_tool(code, text, tool) is unknown
