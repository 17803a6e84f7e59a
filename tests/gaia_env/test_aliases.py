"""The upstream seed's server names: '-server' suffixes, parxiv, googlesearch, browseruse, and the seed's
exact MCP_SERVERS value through aworld-core's get_agent_tool_env_and_servers."""

from __future__ import annotations

import aiohttp
import pytest
from gaia_env.conftest import connect, in_process_env
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers
from aworld_gaia_env.server import ConfigurationError, GaiaEnvironment
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools import SEED_SERVERS, SERVER_NAMES, canonical_server


@pytest.mark.parametrize(
    "given, ours",
    [
        ("readweb-server", "readweb"),
        ("parxiv-server", "arxiv"),
        ("googlesearch-server", "search"),
        ("browseruse-server", "browser"),
        ("browseruse", "browser"),
        ("browser-server", "browser"),
        ("media-video-server", "media-video"),
        (" Terminal-Server ", "terminal"),
        ("wiki", "wiki"),
    ],
)
def test_canonical_names(given, ours):
    assert canonical_server(given) == ours


async def test_suffixed_and_upstream_names_select_our_servers():
    with in_process_env(servers="terminal-server,parxiv,googlesearch-server,wiki") as env:
        async with connect(env, servers="terminal-server, parxiv-server,googlesearch-server") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            with pytest.raises(MCPError) as refused:
                await client.call_tool("wiki__search", {"query": "x"})
    assert {name.split("__")[0] for name in names} == {"terminal", "arxiv", "search"}
    assert refused.value.code == INVALID_PARAMS and "did not select" in refused.value.message


def test_settings_accept_upstream_names_and_refuse_unknown_ones(tmp_path):
    env = GaiaEnvironment(GaiaEnvSettings(servers="parxiv-server,wiki-server", workspace_root=tmp_path), "t")
    assert set(env.servers) == {"arxiv", "wiki"}
    with pytest.raises(ConfigurationError, match="wikipedia-server"):
        GaiaEnvironment(GaiaEnvSettings(servers="wikipedia-server", workspace_root=tmp_path), "t")


async def test_a_server_this_deployment_does_not_serve_is_a_400():
    with in_process_env(servers="wiki") as env:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                env.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={"Authorization": f"Bearer {env.token}", "MCP_SERVERS": "wiki-server,parxiv-server"},
            ) as response:
                assert response.status == 400
                body = await response.json()
    error = body["error"]  # a JSON-RPC error: clients show its message whole
    assert error["code"] == -32602 and error["data"]["unknown_servers"] == ["parxiv-server"]
    assert "parxiv-server" in error["message"] and "wiki-server" not in error["message"]


async def test_a_mistyped_server_is_named_whole_with_a_guess_through_aworld_core():
    """The seed-style agent's connection error shows the list of servers entirely (it was cut
    mid-word at 300 characters) and guesses what was meant."""
    from aworld_core.errors import MCPConnectionError
    from aworld_core.tools.mcp_client import MCPToolset
    from aworld_core.tools.mcp_config import parse_mcp_config

    with in_process_env() as env:
        config = parse_mcp_config({"mcpServers": {"gaia": {
            "type": "streamable-http", "url": env.url, "headers": {"Authorization": f"Bearer {env.token}",
                                                                   "MCP_SERVERS": "serach,wiki"}}}})
        toolset = MCPToolset(config.mcp_servers)
        with pytest.raises(MCPConnectionError) as failed:
            await toolset.open()
        await toolset.aclose()
    text = str(failed.value)
    assert "unknown server(s): serach (did you mean search?)" in text
    assert "documents-xlsx, download," in text and "wayback, wiki (each also as '<name>-server'" in text


def test_every_seed_name_is_a_server_we_serve():
    assert {canonical_server(name) for name in SEED_SERVERS.split(",")} <= set(SERVER_NAMES)


async def test_the_seeds_header_value_works_through_get_agent_tool_env_and_servers(env_server):
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    config, names = get_agent_tool_env_and_servers(env_server.url, env_server.token, SEED_SERVERS)
    entry = config["mcpServers"][names[0]]
    assert entry["type"] == "streamable-http" and entry["url"] == env_server.url
    assert entry["headers"] == {"Authorization": f"Bearer {env_server.token}", "MCP_SERVERS": SEED_SERVERS}
    async with httpx2.AsyncClient(headers={**entry["headers"], "X-Episode-Id": "ep-seed"}, timeout=60) as http:
        async with Client(streamable_http_client(entry["url"], http_client=http)) as client:
            tools = (await client.list_tools()).tools
            listed = await client.call_tool("documents-txt__list_files", {})
            with pytest.raises(MCPError) as refused:  # xlsx is not in the seed's list
                await client.call_tool("documents-xlsx__read_excel", {"path": "x.xlsx"})
    servers = {t.name.split("__")[0] for t in tools}
    assert servers == {canonical_server(name) for name in SEED_SERVERS.split(",")}
    assert {"browser", "media-video", "arxiv", "search", "terminal"} <= servers
    assert not listed.is_error
    assert refused.value.code == INVALID_PARAMS and "did not select" in refused.value.message
