"""``tools/call`` sent directly (``mcp_direct``) on a shared stateless session, against the SDK.

Every test runs real SDK servers on 127.0.0.1. The claim under test: a direct call puts the
same request on the wire as the SDK (headers and body), and every answer comes back as the
same outcome the SDK path gives; what only the SDK handles (``input_required``,
``HEADER_MISMATCH``) is handed to it.
"""

from __future__ import annotations

import json

import pytest

from aworld_core.testing import McpHttpServer
from aworld_core.tools import mcp_direct
from aworld_core.tools.mcp_client import TOOL_LIST_CACHE, MCPToolset, close_shared_sessions
from aworld_core.tools.mcp_config import MCPServerConfig
from aworld_core.tools.mcp_shared import SHARED_SESSIONS

TOKEN = "direct-token"
HEADERS = {"X-Episode-Id": "ep-7", "X-Task-Id": "task-7"}


@pytest.fixture(autouse=True)
async def fresh_state():
    TOOL_LIST_CACHE.clear()
    SHARED_SESSIONS.forget()
    yield
    await close_shared_sessions()
    TOOL_LIST_CACHE.clear()
    SHARED_SESSIONS.forget()


@pytest.fixture
def direct_calls(monkeypatch):
    """How many calls ``DirectCaller.call`` made, and how many it handed to the SDK."""
    counts = {"calls": 0, "handed_off": 0, "sse": 0}
    real_call, real_sse = mcp_direct.DirectCaller.call, mcp_direct._sse_messages

    async def call(self, *args, **kwargs):
        counts["calls"] += 1
        try:
            return await real_call(self, *args, **kwargs)
        except mcp_direct.HandOff:
            counts["handed_off"] += 1
            raise

    def sse(response):
        counts["sse"] += 1
        return real_sse(response)

    monkeypatch.setattr(mcp_direct.DirectCaller, "call", call)
    monkeypatch.setattr(mcp_direct, "_sse_messages", sse)
    return counts


@pytest.fixture
async def server():
    async with McpHttpServer(token=TOKEN) as running:
        yield running


async def open_toolset(server: McpHttpServer, direct: bool) -> MCPToolset:
    toolset = MCPToolset({"calc": MCPServerConfig(**server.config(direct_calls=direct))}, call_timeout_s=5,
                         connect_retries=0, headers=HEADERS)  # fmt: skip
    await toolset.open()
    return toolset


async def call_both_ways(server: McpHttpServer, tool: str, arguments: dict) -> tuple:
    """The outcome of one call made directly and through the SDK (each on a fresh shared session)."""
    outcomes = []
    for direct in (True, False):
        toolset = await open_toolset(server, direct)
        conn = toolset.connections["calc"]
        assert conn.shared and (conn.session.direct is not None) == direct
        try:
            outcomes.append(await conn.call(tool, arguments))
        finally:
            await toolset.aclose()
        await close_shared_sessions()
    return tuple(outcomes)


def tools_calls(server: McpHttpServer, start: int = 0) -> list[tuple[dict, dict]]:
    """(headers, body) of each ``tools/call`` the server received since request ``start``."""
    return [
        (headers, json.loads(body))
        for headers, body in zip(server.headers_seen[start:], server.bodies_seen[start:], strict=True)
        if headers.get("mcp-method") == "tools/call"
    ]


async def test_a_direct_call_puts_the_sdks_request_on_the_wire(server, direct_calls):
    seen = []
    for direct in (True, False):
        start = len(server.headers_seen)
        toolset = await open_toolset(server, direct)
        out = await toolset.connections["calc"].call("add", {"a": 2, "b": 40})
        await toolset.aclose()
        await close_shared_sessions()
        assert out.content == "42" and not out.is_error
        [(headers, body)] = tools_calls(server, start)
        headers.pop("content-length")
        body.pop("id")  # each client numbers its own requests
        seen.append((headers, body))
    assert direct_calls["calls"] == 1  # the SDK-path run made none
    direct, sdk = seen
    assert direct == sdk
    assert direct[0]["x-episode-id"] == "ep-7" and direct[0]["authorization"] == f"Bearer {TOKEN}"
    assert direct[0]["mcp-name"] == "add" and direct[0]["mcp-protocol-version"] == direct[1]["params"]["_meta"][
        "io.modelcontextprotocol/protocolVersion"
    ]


async def test_arguments_marked_x_mcp_header_travel_in_headers(server, direct_calls):
    start = len(server.headers_seen)
    direct, sdk = await call_both_ways(server, "region", {"where": "eu-west"})
    assert direct == sdk and direct.content == "region eu-west"
    assert [h.get("mcp-param-region") for h, _ in tools_calls(server, start)] == ["eu-west", "eu-west"]
    assert direct_calls == {"calls": 1, "handed_off": 0, "sse": 0}


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("add", {"a": 2, "b": 40}),
        ("echo", {"text": "ünïcode ✓"}),
        ("refuse", {"reason": "no"}),  # the tool's own error, meant for the model
        ("fail", {}),  # an unexpected crash inside the tool
        ("add", {"a": "two", "b": 40}),  # arguments that break the input schema
        ("missing", {}),  # a tool the server does not have
    ],
)
async def test_every_answer_gives_the_outcome_the_sdk_gives(server, direct_calls, tool, arguments):
    direct, sdk = await call_both_ways(server, tool, arguments)
    assert direct == sdk
    assert direct_calls["calls"] == 1 and direct_calls["handed_off"] == 0


async def test_input_required_is_handed_to_the_sdk(server, direct_calls):
    start = len(server.headers_seen)
    direct, sdk = await call_both_ways(server, "resume", {})
    assert direct == sdk and direct.content == "resumed"
    assert direct_calls == {"calls": 1, "handed_off": 1, "sse": 0}
    # direct: input_required; the SDK: the same first round, then the retry with the (signed) state
    states = [body["params"].get("requestState") for _, body in tools_calls(server, start)]
    assert [state is not None for state in states] == [False, False, True, False, True]


async def test_a_header_mismatch_is_handed_to_the_sdk_which_relists(server, direct_calls):
    toolset = await open_toolset(server, True)
    conn = toolset.connections["calc"]
    # a stale listing: the client no longer knows the argument goes in a header
    conn.session.client.session._x_mcp_header_maps.pop("region")
    start = len(server.headers_seen)
    out = await conn.call("region", {"where": "eu"})
    await toolset.aclose()
    assert out.content == "region eu" and not out.is_error
    assert direct_calls == {"calls": 1, "handed_off": 1, "sse": 0}
    methods = [h.get("mcp-method") for h in server.headers_seen[start:]]
    assert methods == ["tools/call", "tools/call", "tools/list", "tools/call"]  # ours, the SDK's, re-list, resend


async def test_a_result_that_breaks_the_output_schema_fails_as_on_the_sdk_path(server, direct_calls):
    outcomes = []
    for direct in (True, False):
        toolset = await open_toolset(server, direct)
        conn = toolset.connections["calc"]
        sdk_session = conn.session.client.session
        # the listing says 'add' returns a string: its integer result must be refused
        sdk_session._tool_output_schemas["add"] = {
            "type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]
        }  # fmt: skip
        sdk_session._tool_output_validators.pop("add", None)
        outcomes.append(await conn.call("add", {"a": 1, "b": 2}))
        await toolset.aclose()
        await close_shared_sessions()
    direct, sdk = outcomes
    assert direct == sdk and direct.is_error
    assert "Invalid structured content returned by tool add" in direct.content


async def test_an_answer_streamed_as_sse_is_read(server, direct_calls, monkeypatch):
    # the server commits to an SSE stream once a call runs past its ping interval (15 s)
    import mcp.server._streamable_http_modern as modern

    monkeypatch.setattr(modern, "_SSE_PING_INTERVAL", 0.05)
    direct, sdk = await call_both_ways(server, "sleep", {"seconds": 0.3})
    assert direct == sdk and direct.content == "slept 0.3"
    assert direct_calls["sse"] == 1


async def test_direct_calls_false_sends_every_call_through_the_sdk(server, direct_calls):
    toolset = await open_toolset(server, False)
    outs = [await toolset.connections["calc"].call("add", {"a": i, "b": 1}) for i in range(3)]
    await toolset.aclose()
    assert [o.content for o in outs] == ["1", "2", "3"]
    assert direct_calls["calls"] == 0


async def test_a_handshake_era_server_never_gets_direct_calls(direct_calls):
    async with McpHttpServer(handshake_only=True) as handshake:
        toolset = MCPToolset({"calc": MCPServerConfig(**handshake.config(session="shared"))}, connect_retries=0)
        await toolset.open()
        out = await toolset.connections["calc"].call("add", {"a": 2, "b": 40})
        assert toolset.connections["calc"].shared and toolset.connections["calc"].session.direct is None
        await toolset.aclose()
    assert out.content == "42" and direct_calls["calls"] == 0
