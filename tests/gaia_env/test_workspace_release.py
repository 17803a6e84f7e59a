"""An episode run by aworld-core frees its GAIA workspace when it ends (``release`` in the MCP
config, sent by ``aworld_core.tools.mcp_release``): the real environment server, the core's real
runtime and a scripted OpenAI-compatible LLM on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import urllib.request

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.errors import ConfigError
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.settings import get_settings
from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers, parse_mcp_config
from aworld_core.tools.mcp_release import base_of
from aworld_gaia_env.plugin import RELEASE as GAIA_ENV_RELEASE
from support.openai_stub import OpenAIStub, free_port, reply, tool_call

LIST_FILES = "documents-txt__list_files"


def _live_episodes(env) -> set[str]:
    """The episodes the server holds state for, as its live view's API reports them."""
    request = urllib.request.Request(env.base + "/live/episodes", headers={"Authorization": f"Bearer {env.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return {e["episode"] for e in json.load(response)["episodes"]}


def _agent(env, stub: OpenAIStub, **config_changes) -> Agent:
    config, names = get_agent_tool_env_and_servers(env.url, env.token, "documents-txt", release=GAIA_ENV_RELEASE)
    config["mcpServers"][names[0]].update(config_changes)
    return Agent(
        "gaia",
        conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m", llm_retries=0),
        mcp_config=config,
        mcp_servers=names,
    )


def _seen_during(env, seen: dict[str, bool], episode: str):
    """A scripted reply that records whether the episode's workspace exists while it runs."""

    def answer(_request):
        seen["workspace"] = (env.workspace_root / episode).is_dir()
        seen["live"] = episode in _live_episodes(env)
        return "the answer"

    return answer


def test_the_seed_helper_sends_the_release_serve_printed(env_server, tmp_path, monkeypatch):
    """The seed's flow: serve's lines pasted into the agent side's .env, then
    get_agent_tool_env_and_servers() with no arguments releases with the environment's request."""
    for var in ("MCP_SERVER_URL", "MCP_SERVER_TOKEN", "MCP_SERVERS", "MCP_SERVER_RELEASE"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv("AWORLD_" + var, raising=False)
    (tmp_path / ".env").write_text("\n".join(env_server.printed[1:]) + "\n")
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    try:
        config, names = get_agent_tool_env_and_servers(servers="wiki")
    finally:
        get_settings.cache_clear()
    entry = config["mcpServers"][names[0]]
    assert entry["url"] == env_server.url and entry["release"] == GAIA_ENV_RELEASE
    config, names = get_agent_tool_env_and_servers(env_server.url, env_server.token, "wiki", release=GAIA_ENV_RELEASE)
    assert config["mcpServers"][names[0]]["release"] == GAIA_ENV_RELEASE
    parsed = parse_mcp_config(config).mcp_servers[names[0]]
    assert parsed.release == GAIA_ENV_RELEASE and parsed.release_timeout == 5.0
    assert base_of(env_server.url) == env_server.base
    config, _ = get_agent_tool_env_and_servers(env_server.url, env_server.token, release=GAIA_ENV_RELEASE,
                                               release_workspace=False)
    assert "release" not in config["mcpServers"]["aworld-mcp"]


async def test_a_finished_episode_frees_its_workspace(env_server):
    seen: dict[str, bool] = {}
    with OpenAIStub() as stub:
        stub.add(reply(tool_calls=[tool_call(LIST_FILES, {})]), _seen_during(env_server, seen, "ep-release-ok"))
        episode = await run_episode(_agent(env_server, stub), "list the files", episode_id="ep-release-ok")
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "the answer"
    assert seen == {"workspace": True, "live": True}  # it was there while the episode ran
    assert "ep-release-ok" not in _live_episodes(env_server)
    assert not (env_server.workspace_root / "ep-release-ok").exists()


async def test_failed_and_timed_out_episodes_free_their_workspaces(env_server):
    with OpenAIStub() as stub:
        stub.add(reply(tool_calls=[tool_call(LIST_FILES, {})]), reply(status=500, body="engine crashed"))
        failed = await run_episode(_agent(env_server, stub), "fail", episode_id="ep-release-failed")
        stub.add(reply(tool_calls=[tool_call(LIST_FILES, {})]), reply("too late", delay_s=5))
        timed_out = await run_episode(_agent(env_server, stub), "wait", episode_id="ep-release-timeout", timeout=2)
    assert failed.status is EpisodeStatus.FAILED and timed_out.status is EpisodeStatus.TIMEOUT
    live = _live_episodes(env_server)
    for episode in ("ep-release-failed", "ep-release-timeout"):
        assert episode not in live
        assert not (env_server.workspace_root / episode).exists()


async def test_a_cancelled_episode_frees_its_workspace(env_server):
    seen: dict[str, bool] = {}
    with OpenAIStub() as stub:
        stub.add(reply(tool_calls=[tool_call(LIST_FILES, {})]), reply("never", delay_s=10))
        task = asyncio.ensure_future(run_episode(_agent(env_server, stub), "cancel", episode_id="ep-release-cancel"))
        for _ in range(200):  # until the tool ran and the LLM is answering slowly
            await asyncio.sleep(0.05)
            if len(stub.requests) == 2:
                break
        seen["live"] = "ep-release-cancel" in _live_episodes(env_server)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert seen["live"]
    assert "ep-release-cancel" not in _live_episodes(env_server)
    assert not (env_server.workspace_root / "ep-release-cancel").exists()


async def test_a_release_that_fails_is_logged_and_the_result_unchanged(env_server, caplog):
    down = free_port()  # nothing listens: the release cannot be sent
    silent = socket.socket()  # listens but never answers: the release times out
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    caplog.set_level(logging.DEBUG, logger="aworld_core.tools.mcp_release")
    try:
        with OpenAIStub() as stub:
            stub.add(reply(tool_calls=[tool_call(LIST_FILES, {})]), "fine")
            agent = _agent(env_server, stub, release=f"DELETE http://127.0.0.1:{down}/workspaces/{{episode_id}}")
            refused = await run_episode(agent, "x", episode_id="ep-release-down")
            stub.add(reply(tool_calls=[tool_call(LIST_FILES, {})]), "fine")
            agent = _agent(
                env_server, stub, release=f"DELETE http://127.0.0.1:{silent.getsockname()[1]}/w/{{episode_id}}",
                release_timeout=0.5,
            )
            slow = await run_episode(agent, "x", episode_id="ep-release-silent")
    finally:
        silent.close()
    for episode in (refused, slow):
        assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "fine"
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "aworld_core.tools.mcp_release"]
    # the first failure of a server is a warning, the next ones (until a release succeeds) debug
    assert logged[0][0] == logging.WARNING and f"127.0.0.1:{down}/workspaces/ep-release-down" in logged[0][1]
    assert logged[1][0] == logging.DEBUG and "release_timeout=0.5" in logged[1][1], logged
    assert all(env_server.token not in m for m in caplog.text.splitlines())
    # the server itself was not told: those workspaces wait for its idle sweep
    assert "ep-release-down" in _live_episodes(env_server)
    assert (env_server.workspace_root / "ep-release-down").is_dir()


def test_release_settings_are_checked():
    url = "http://127.0.0.1:1/mcp"
    with pytest.raises(ConfigError, match="must name the episode"):
        parse_mcp_config({"mcpServers": {"s": {"url": url, "release": "DELETE {base}/workspaces"}}})
    with pytest.raises(ConfigError, match="unknown placeholder"):
        parse_mcp_config({"mcpServers": {"s": {"url": url, "release": "DELETE {host}/{episode_id}"}}})
    with pytest.raises(ConfigError, match="not one of"):
        parse_mcp_config({"mcpServers": {"s": {"url": url, "release": "GET {base}/{episode_id}"}}})
    with pytest.raises(ConfigError, match="only a streamable-http or sse"):
        parse_mcp_config({"mcpServers": {"s": {"command": "x", "release": "DELETE http://h/{episode_id}"}}})
    with pytest.raises(ConfigError, match="release_timeout"):
        parse_mcp_config({"mcpServers": {"s": {"url": url, "release": GAIA_ENV_RELEASE, "release_timeout": 0}}})
