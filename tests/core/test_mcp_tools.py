"""MCP tools through the official SDK against real MCP servers on 127.0.0.1 (HTTP, SSE, stdio)."""

from __future__ import annotations

import json
import sys

import pytest

from aworld_core.errors import MCPConnectionError
from aworld_core.schemas import ToolCall
from aworld_core.testing import McpHttpServer, stdio_server_config
from aworld_core.tools.mcp_client import MCPServerConnection, MCPToolset
from aworld_core.tools.mcp_config import MCPServerConfig, parse_mcp_config, select_servers
from aworld_core.tools.toolbox import build_toolbox
from support.openai_stub import free_port

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def http_server():
    with McpHttpServer(name="calc", token=TOKEN) as server:
        yield server


def connection(entry: dict, name: str = "calc", **kw) -> MCPServerConnection:
    kw.setdefault("connect_retries", 0)
    return MCPServerConnection(name, MCPServerConfig(**entry), **kw)


async def test_streamable_http_lists_and_calls_tools(http_server):
    conn = connection(http_server.config(), call_timeout_s=5)
    tools = await conn.start()
    try:
        names = {t.name for t in tools}
        assert {"add", "echo", "fail", "refuse", "sleep"} <= names
        add = next(t for t in tools if t.name == "add")
        assert add.input_schema["properties"]["a"]["type"] == "integer"
        assert add.description == "Add two integers."
        out = await conn.call("add", {"a": 2, "b": 40})
        assert (out.content, out.is_error, out.error) == ("42", False, None)
        # a crash inside the tool: an error the model sees, the server keeps working
        out = await conn.call("fail", {"reason": "boom"})
        assert out.is_error and out.content.startswith("Error:") and "fail" in out.content
        out = await conn.call("refuse", {"reason": "quota"})
        assert out.is_error and "refused: quota" in out.content
        # a tool that hangs past its timeout
        out = await conn.call("sleep", {"seconds": 30}, timeout_s=0.5)
        assert out.is_error and "did not answer within 0.5 s" in out.content
        out = await conn.call("add", {"a": 1, "b": 1})
        assert out.content == "2"  # the session survived the timeout
    finally:
        await conn.aclose()
    assert any(h.get("authorization") == f"Bearer {TOKEN}" for h in http_server.headers_seen)


async def test_wrong_or_missing_token_is_loud_and_not_retried(http_server):
    before = len(http_server.headers_seen)
    conn = connection(http_server.config(token="wrong"), connect_retries=3)
    with pytest.raises(MCPConnectionError) as info:
        await conn.start()
    text = str(info.value)
    assert "'calc'" in text and http_server.url in text and "HTTP 401" in text and "token" in text
    assert "not run without its tools" in text
    # 401 is not retried: one refused request (the SDK's probe), not four rounds of them
    assert len(http_server.headers_seen) - before <= 2
    with pytest.raises(MCPConnectionError, match="HTTP 401"):
        await connection(http_server.config(token=None)).start()


async def test_unreachable_server_at_start_is_loud():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    conn = connection({"type": "streamable-http", "url": url, "timeout": 2}, name="ghost", connect_retries=1)
    with pytest.raises(MCPConnectionError) as info:
        await conn.start()
    text = str(info.value)
    assert "'ghost'" in text and url in text and "ConnectError" in text and "after 2 attempts" in text


async def test_sse_transport():
    with McpHttpServer(name="sse-calc", token=TOKEN, transport="sse") as server:
        conn = connection(server.config(), name="sse-calc")
        await conn.start()
        try:
            assert (await conn.call("add", {"a": 3, "b": 4})).content == "7"
        finally:
            await conn.aclose()
        with pytest.raises(MCPConnectionError, match="401"):
            await connection(server.config(token="bad"), name="sse-calc").start()


async def test_stdio_server():
    conn = connection(stdio_server_config(["add", "echo"]), name="local")
    tools = await conn.start()
    try:
        assert sorted(t.name for t in tools) == ["add", "echo"]
        assert (await conn.call("echo", {"text": "hi"})).content == "stdio-tools:hi"
    finally:
        await conn.aclose()


async def test_stdio_server_that_cannot_start_is_loud():
    entry = {"type": "stdio", "command": sys.executable, "args": ["-c", "import sys; sys.stderr.write('no way\\n'); sys.exit(3)"]}
    with pytest.raises(MCPConnectionError) as info:
        await connection(entry, name="broken").start()
    assert "'broken'" in str(info.value) and sys.executable in str(info.value)
    with pytest.raises(MCPConnectionError, match="nonexistent-binary"):
        await connection({"type": "stdio", "command": "nonexistent-binary-xyz"}, name="missing").start()


async def test_server_down_mid_session_then_back():
    server = McpHttpServer(name="flaky", token=TOKEN).start()
    conn = connection(server.config(), name="flaky")
    await conn.start()
    try:
        assert (await conn.call("add", {"a": 1, "b": 2})).content == "3"
        server.stop()
        out = await conn.call("add", {"a": 1, "b": 2})
        assert out.is_error and "flaky" in out.error
        assert out.content.startswith("Error:")
        server.start()  # same port: the next call reconnects
        out = await conn.call("add", {"a": 5, "b": 5})
        assert (out.content, out.is_error) == ("10", False)
    finally:
        await conn.aclose()
        server.stop()


async def test_toolset_disambiguates_clashing_names_and_records_the_real_one():
    with McpHttpServer(name="alpha", tools=["add", "echo"]) as alpha, McpHttpServer(name="beta", tools=["echo", "upper"]) as beta:
        config = parse_mcp_config({"mcpServers": {"alpha": alpha.config(), "beta": beta.config()}})
        toolset = MCPToolset(select_servers(config, None), call_timeout_s=5)
        specs = await toolset.open()
        try:
            box = build_toolbox([], [], specs, toolset.executor, timeout_s=5)
            names = sorted(s["function"]["name"] for s in box.schemas())
            assert names == ["add", "alpha__echo", "beta__echo", "upper"]
            result = await box.call(ToolCall(id="1", name="beta__echo", arguments=json.dumps({"text": "x"})))
            assert (result.content, result.tool_name, result.server) == ("beta:x", "echo", "beta")
            result = await box.call(ToolCall(id="2", name="add", arguments='{"a": 1, "b": 2}'))
            assert (result.content, result.tool_name, result.server) == ("3", "add", "alpha")
        finally:
            await toolset.aclose()


async def test_toolset_open_fails_whole_when_one_server_refuses(http_server):
    config = parse_mcp_config(
        {"mcpServers": {"good": http_server.config(), "bad": http_server.config(token="nope")}}
    )
    toolset = MCPToolset(select_servers(config, None), connect_retries=0)
    with pytest.raises(MCPConnectionError, match="'bad'"):
        await toolset.open()
    assert all(c.session is None for c in toolset.connections.values())  # nothing left open


async def test_proxy_settings_from_the_environment_are_honoured(http_server, monkeypatch):
    """HTTP_PROXY / NO_PROXY apply to MCP requests, as they did when httpx2 sent them."""
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, dead_proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    entry = http_server.config(session="episode")
    with pytest.raises(MCPConnectionError) as info:
        await connection(entry).start()
    assert dead_proxy.rsplit(":", 1)[1] in str(info.value)  # it went to the proxy, which is not there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1")
    conn = connection(entry)
    await conn.start()
    try:
        assert (await conn.call("add", {"a": 1, "b": 2})).content == "3"
    finally:
        await conn.aclose()
