"""The endpoint itself: what serve prints, bearer auth, MCP_SERVERS routing, missing keys, workspaces."""

from __future__ import annotations

import json

import aiohttp
import pytest
from gaia_env.conftest import call, connect, in_process_env, text_of, upload
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from aworld_gaia_env.server import ConfigurationError, GaiaEnvironment
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools import SERVER_NAMES


def test_serve_prints_the_seed_json_and_env_lines(env_server):
    info = json.loads(env_server.printed[0])
    assert set(info) == {"ip", "port", "token"}
    assert info["ip"] == "127.0.0.1" and isinstance(info["port"], int) and info["port"] > 0
    assert len(info["token"]) >= 32  # random per start: no --token and no MCP_SERVER_TOKEN given
    assert env_server.printed[1] == f"MCP_SERVER_URL=http://127.0.0.1:{info['port']}/mcp"
    assert env_server.printed[2] == f"MCP_SERVER_TOKEN={info['token']}"
    assert env_server.printed[3] == "MCP_SERVER_RELEASE='DELETE {base}/workspaces/{episode_id}'"


async def test_health_needs_no_token(env_server):
    async with aiohttp.ClientSession() as session:
        async with session.get(env_server.base + "/health") as response:
            assert response.status == 200
            body = await response.json()
    assert body["status"] == "ok"
    assert body["servers"] == sorted(SERVER_NAMES)
    assert body["sandbox"] == "bwrap"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "wrong"}])
async def test_requests_without_the_right_token_get_401(env_server, headers):
    payload = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with aiohttp.ClientSession() as session:
        for method, path in (("POST", "/mcp"), ("GET", "/mcp"), ("PUT", "/workspaces/ep/files/x.txt")):
            async with session.request(method, env_server.base + path, json=payload, headers=headers) as response:
                assert response.status == 401, (method, path)
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
                body = await response.json()
                assert "MCP_SERVER_TOKEN" in body["detail"]


async def test_official_client_with_a_wrong_token_fails_loudly(env_server):
    # the SDK surfaces the 401 as an error response; the raw 401 is checked above
    with pytest.raises(Exception):  # noqa: B017
        async with connect(env_server, token="not-the-token") as client:
            await client.list_tools()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_all_servers_listed_with_prefixed_names(env_server, mode):
    async with connect(env_server, mode=mode) as client:
        tools = (await client.list_tools()).tools
    names = {t.name for t in tools}
    servers = {name.split("__")[0] for name in names}
    assert servers == set(SERVER_NAMES)
    assert "documents-pdf__read_pdf" in names and "wiki__search" in names and "terminal__run_command" in names
    assert all(t.input_schema["type"] == "object" for t in tools)


async def test_mcp_servers_header_selects_servers(env_server):
    async with connect(env_server, servers="wiki, arxiv") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"wiki__search", "wiki__summary", "wiki__page", "wiki__revision_at",
                         "arxiv__search", "arxiv__paper", "arxiv__pdf_text"}
        with pytest.raises(MCPError) as refused:
            await client.call_tool("documents-txt__list_files", {})
    # a tool the connection was not offered is the spec's protocol error for unknown tools
    assert refused.value.code == INVALID_PARAMS
    assert "did not select" in refused.value.message and "documents-txt" in refused.value.message


async def test_unknown_server_in_header_is_a_400_naming_it(env_server):
    async with aiohttp.ClientSession() as session:
        async with session.post(
            env_server.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Authorization": f"Bearer {env_server.token}", "MCP_SERVERS": "wiki,wikipedia-server"},
        ) as response:
            assert response.status == 400
            error = (await response.json())["error"]  # a JSON-RPC error, its message whole
            assert error["code"] == -32602 and "wikipedia-server (did you mean wiki?)" in error["message"]


async def test_unknown_tool_and_bad_arguments_are_clear_errors(env_server):
    # an unknown tool: the JSON-RPC error -32602 the spec lists; bad arguments: an isError result
    # the model reads and can correct (SEP-1303, MCP 2025-11-25)
    async with connect(env_server, episode="ep-unknown") as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("search", {"query": "x"})
    assert unknown.value.code == INVALID_PARAMS
    assert "Unknown tool: search" in unknown.value.message and "search__web" in unknown.value.message
    text, is_error = await call(env_server, "wiki__search", {"q": "x"})
    assert is_error and "bad arguments for wiki__search" in text and "query" in text


async def test_missing_keys_are_listed_and_explained_and_the_server_survives():
    with in_process_env(servers="search,intelligence-think,media-audio,documents-txt") as env:
        async with connect(env) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "search__web" in tools and "not configured" in tools["search__web"].description
            result = await client.call_tool("search__web", {"query": "penguins"})
            assert result.is_error
            assert "TAVILY_API_KEY" in text_of(result) and "GOOGLE_API_KEY" in text_of(result)
            result = await client.call_tool("intelligence-think__think", {"question": "why?"})
            assert result.is_error and "MCP_LLM_BASE_URL" in text_of(result) and "THINK_LLM_BASE_URL" in text_of(result)
            result = await client.call_tool("documents-txt__list_files", {})
            assert not result.is_error


def test_bad_configuration_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ConfigurationError, match="wikipedia"):
        GaiaEnvironment(GaiaEnvSettings(servers="wiki,wikipedia", workspace_root=tmp_path), "t")
    with pytest.raises(ConfigurationError, match="empty token"):
        GaiaEnvironment(GaiaEnvSettings(workspace_root=tmp_path), "")


async def test_each_episode_gets_its_own_workspace(env_server):
    await upload(env_server, "ep-a", "notes.txt", b"alpha")
    async with connect(env_server, episode="ep-a") as client:
        listing = text_of(await client.call_tool("documents-txt__list_files", {}))
        assert "notes.txt" in listing
    async with connect(env_server, episode="ep-b") as client:
        listing = text_of(await client.call_tool("documents-txt__list_files", {}))
        assert "notes.txt" not in listing
    assert (env_server.workspace_root / "ep-a" / "notes.txt").read_bytes() == b"alpha"


async def test_handshake_sessions_get_a_workspace_each_without_an_episode_id(env_server):
    seen = []
    for _ in range(2):
        async with connect(env_server, mode="legacy") as client:
            await client.call_tool("intelligence-code__run_python", {"code": "open('mine.txt','w').write('x')"})
            seen.append(text_of(await client.call_tool("documents-txt__list_files", {})))
    assert all("mine.txt" in listing for listing in seen)
    dirs = [p for p in env_server.workspace_root.iterdir() if (p / "mine.txt").exists()]
    assert len(dirs) == 2  # one per MCP session


async def test_gaia_task_header_places_the_attachment(env_server):
    async with connect(env_server, episode="ep-attach", task_id="t-csv") as client:
        text = text_of(await client.call_tool("documents-csv__read_csv", {"path": "penguins.csv"}))
    assert "emperor" in text and "122" in text


async def test_attachment_tool_copies_by_file_name(env_server):
    async with connect(env_server, episode="ep-attach-tool") as client:
        text = text_of(await client.call_tool("download__gaia_attachment", {"file_name": "penguins.csv"}))
        assert "penguins.csv is in the workspace" in text
        text = text_of(await client.call_tool("documents-csv__read_csv", {"path": "penguins.csv"}))
        assert "emperor" in text
        missing = await client.call_tool("download__gaia_attachment", {"file_name": "nope.pdf"})
        assert missing.is_error and "no GAIA attachment named 'nope.pdf'" in text_of(missing)


async def test_bad_episode_ids_and_uploads_outside_are_refused(env_server):
    text, is_error = await call(env_server, "documents-txt__list_files", {}, episode="../etc")
    assert is_error and "invalid episode id" in text
    async with aiohttp.ClientSession() as session:
        async with session.put(
            f"{env_server.base}/workspaces/ep-up/files/..%2F..%2Fescape.txt",
            data=b"x",
            headers={"Authorization": f"Bearer {env_server.token}"},
        ) as response:
            assert response.status == 400
            assert "outside the workspace" in (await response.json())["error"]
    assert not (env_server.workspace_root / "escape.txt").exists()


async def test_workspace_can_be_deleted_after_an_episode(env_server):
    await upload(env_server, "ep-done", "result.txt", b"x")
    assert (env_server.workspace_root / "ep-done").exists()
    async with aiohttp.ClientSession() as session:
        async with session.delete(
            f"{env_server.base}/workspaces/ep-done", headers={"Authorization": f"Bearer {env_server.token}"}
        ) as response:
            assert response.status == 204
    assert not (env_server.workspace_root / "ep-done").exists()
