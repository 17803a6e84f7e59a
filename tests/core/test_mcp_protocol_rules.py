"""The MCP parts as the spec says: the test kit's server errors and listing, the client's identity.

Found by the official conformance suite and the TypeScript SDK client (../shared/external-clients.md);
tests/core/test_mcp_conformance.py runs that suite itself, these pin each defect down on its own.
"""

from __future__ import annotations

import json

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from aworld_core import __version__
from aworld_core.testing.mcp_server import McpHttpServer
from aworld_core.tools.mcp_client import MCPToolset
from aworld_core.tools.mcp_config import MCPServerConfig
from aworld_core.tools.mcp_session import client_identity


@pytest.fixture(scope="module")
def server():
    with McpHttpServer(name="rules") as running:
        yield running


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_server_version_is_set(server, mode):
    async with Client(server.url, mode=mode) as client:
        info = client.session.server_info if mode == "legacy" else client.server_info
    assert info is not None and info.version == __version__


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_unknown_tool_is_the_protocol_error_and_a_tool_failure_stays_a_result(server, mode):
    async with Client(server.url, mode=mode) as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        refused = await client.call_tool("refuse", {"reason": "nope"})
        bad_arguments = await client.call_tool("add", {"a": "two", "b": 1})
    assert unknown.value.code == INVALID_PARAMS and "Unknown tool: no_such_tool" in unknown.value.message
    assert refused.is_error and "refused: nope" in refused.content[0].text
    assert bad_arguments.is_error  # SEP-1303: the model reads it and can correct the call


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_unknown_prompt_is_invalid_params_not_code_0(server, mode):
    async with Client(server.url, mode=mode) as client:
        with pytest.raises(MCPError) as unknown:
            await client.get_prompt("no_such_prompt")
    assert unknown.value.code == INVALID_PARAMS and "no_such_prompt" in unknown.value.message


async def test_a_tool_a_handshake_era_client_cannot_call_is_not_listed_to_it(server):
    async with Client(server.url, mode="legacy") as client:
        legacy = {t.name for t in (await client.list_tools()).tools}
        with pytest.raises(MCPError) as refused:
            await client.call_tool("resume", {})
    async with Client(server.url, mode="auto") as client:
        modern = {t.name for t in (await client.list_tools()).tools}
        resumed = await client.call_tool("resume", {})
    assert "resume" not in legacy and "add" in legacy
    assert "resume" in modern and resumed.content[0].text == "resumed"
    assert refused.value.code == INVALID_PARAMS and "needs MCP protocol" in refused.value.message


@pytest.mark.parametrize("handshake_only", [False, True])
async def test_the_client_introduces_itself_as_aworld_core(handshake_only):
    with McpHttpServer(name="who", handshake_only=handshake_only) as srv:
        toolset = MCPToolset({"who": MCPServerConfig.model_validate(srv.config(session="episode"))})
        await toolset.open()
        await toolset.aclose()
        sent = [json.loads(body) for body in srv.bodies_seen if body]
    assert client_identity().name == "aworld-core" and client_identity().version == __version__
    infos = [
        (msg.get("params") or {}).get("clientInfo")
        or ((msg.get("params") or {}).get("_meta") or {}).get("io.modelcontextprotocol/clientInfo")
        for msg in sent
    ]
    infos = [info for info in infos if info]
    assert infos and all(info == {"name": "aworld-core", "version": __version__} for info in infos), sent
