"""Agent, AgentConfig, Python tools, the MCP config form and agent_from_job."""

from __future__ import annotations

import threading
from typing import Literal

import pytest
from pydantic import ValidationError

from aworld_core import Agent, AgentConfig, Swarm, get_agent_tool_env_and_servers
from aworld_core.agents.factory import agent_from_job
from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.hookspecs import hookimpl
from aworld_core.plugins import PluginManager, reset_plugin_manager
from aworld_core.settings import AworldSettings, get_settings
from aworld_core.specs import EnvironmentSpec
from aworld_core.tools.mcp_config import parse_mcp_config, select_servers
from aworld_core.tools.python_tools import PythonTool, parse_docstring

# ---------------------------------------------------------------------------------------------
# tools used below (also imported by reference from the job configs)
# ---------------------------------------------------------------------------------------------


def search(query: str, limit: int = 5, mode: Literal["web", "news"] = "web", tags: list[str] | None = None) -> dict:
    """Search the web.

    Longer explanation that is not part of the summary.

    Args:
        query: What to look for.
        limit: How many results
            to return at most.
        mode: Where to search.
    """
    return {"query": query, "limit": limit, "mode": mode, "tags": tags}


def sphinx_tool(path: str, start: int = 0) -> str:
    """Read a file.

    :param path: The file path.
    :param start: First line.
    """
    return f"{path}:{start}"


async def async_tool(x: int) -> str:
    """Double x."""
    return str(2 * x)


def returns_none() -> None:
    """Returns nothing."""


SEEN_THREADS: list[int] = []


def which_thread() -> str:
    SEEN_THREADS.append(threading.get_ident())
    return "ok"


def make_agent() -> Agent:
    return Agent("factory_agent", system_prompt="hi", tools=[search])


def make_configured_agent(name: str, steps: int = 3) -> Agent:
    return Agent(name, conf=AgentConfig(max_steps=steps))


def make_swarm() -> Swarm:
    return Swarm(Agent("a"), Agent("b", trainable=False))


def not_an_agent() -> str:
    return "nope"


AGENT_OBJECT = Agent("module_level")

# ---------------------------------------------------------------------------------------------
# AgentConfig / Agent
# ---------------------------------------------------------------------------------------------


def test_agent_config_fields_and_validation():
    conf = AgentConfig(llm_base_url="http://x/v1", llm_model_name="m", temperature=0.7, top_k=5, max_steps=3)
    sampling = conf.sampling()
    assert (sampling.temperature, sampling.top_k, sampling.top_p, sampling.max_tokens) == (0.7, 5, None, None)
    assert conf.llm_provider == "openai"
    assert AgentConfig(llm_temperature=0.6).temperature == 0.6  # upstream AWorld's spelling
    with pytest.raises(ValidationError):
        AgentConfig(llm_provider="anthropic")
    with pytest.raises(ValidationError, match="max_step"):
        AgentConfig(max_step=3)  # a typo is an error, not ignored
    with pytest.raises(ValidationError):
        AgentConfig(max_steps=0)
    assert "secret" not in repr(AgentConfig(llm_api_key="secret"))


def test_agent_is_built_like_the_seed():
    env, servers = {"mcpServers": {"env": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp"}}}, ["env"]
    agent = Agent(
        name="gaia_super_agent",
        system_prompt="You are helpful.",
        conf=AgentConfig(llm_base_url="http://127.0.0.1:1/v1", llm_model_name="m", llm_api_key="k"),
        mcp_config=env,
        mcp_servers=servers,
        tools=[search],
    )
    assert agent.name == "gaia_super_agent" and agent.trainable
    assert list(agent.servers) == ["env"]
    assert [t.name for t in agent.tools] == ["search"]


def test_agent_errors_name_the_problem():
    with pytest.raises(UsageError, match="non-empty name"):
        Agent("")
    with pytest.raises(UsageError, match="no mcp_config"):
        Agent("a", mcp_servers=["x"])
    with pytest.raises(ConfigError, match="not in mcp_config"):
        Agent("a", mcp_config={"mcpServers": {"x": {"url": "http://h/mcp"}}}, mcp_servers=["y"])
    with pytest.raises(UsageError, match="two tools named 'search'"):
        Agent("a", tools=[search, search])
    with pytest.raises(UsageError, match="not callable"):
        Agent("a", tools=["search"])


async def test_agent_without_endpoint_says_how_to_fix(monkeypatch):
    for var in ("LLM_BASE_URL", "AWORLD_LLM_BASE_URL", "LLM_MODEL_NAME", "AWORLD_LLM_MODEL_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir("/")  # no .env
    get_settings.cache_clear()
    try:
        with pytest.raises(UsageError, match="has no LLM endpoint.*llm_base_url"):
            Agent("lonely").own_llm()
    finally:
        get_settings.cache_clear()


async def test_agent_reuses_its_own_llm_per_loop():
    agent = Agent("a", conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="m"))
    first = agent.own_llm()
    assert agent.own_llm() is first
    await agent.aclose()
    assert agent.own_llm() is not first
    await agent.aclose()


# ---------------------------------------------------------------------------------------------
# Python tools
# ---------------------------------------------------------------------------------------------


def test_python_tool_schema_from_hints_and_google_docstring():
    spec = PythonTool(search).spec
    assert spec.name == "search" and spec.kind == "python"
    assert spec.description == "Search the web."
    params = spec.parameters
    assert params["type"] == "object" and params["required"] == ["query"]
    props = params["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"]["type"] == "integer" and props["limit"]["default"] == 5
    assert props["limit"]["description"] == "How many results to return at most."
    assert props["mode"]["enum"] == ["web", "news"]
    assert "title" not in params


def test_python_tool_schema_from_sphinx_docstring():
    spec = PythonTool(sphinx_tool).spec
    assert spec.description == "Read a file."
    assert spec.parameters["properties"]["path"]["description"] == "The file path."
    assert spec.parameters["properties"]["start"]["description"] == "First line."


def test_parse_docstring_without_sections():
    assert parse_docstring("Just one line.") == ("Just one line.", {})
    assert parse_docstring("") == ("", {})


async def test_python_tool_runs_sync_in_a_thread_and_async_on_the_loop():
    SEEN_THREADS.clear()
    assert (await PythonTool(which_thread).run({})).content == "ok"
    assert SEEN_THREADS and SEEN_THREADS[0] != threading.get_ident()
    assert (await PythonTool(async_tool).run({"x": 4})).content == "8"
    assert (await PythonTool(returns_none).run({})).content == ""  # None is empty, never "None"
    out = await PythonTool(search).run({"query": "q"})
    assert out.content == '{"query": "q", "limit": 5, "mode": "web", "tags": null}'


async def test_python_tool_argument_errors_are_observations():
    tool = PythonTool(search)
    out = await tool.run({"limit": "many"})
    assert out.is_error
    assert "query" in out.content and "limit" in out.content
    out = await tool.run({"query": "q", "bogus": 1})
    assert out.is_error and "bogus" in out.content


def test_python_tool_rejects_what_a_model_cannot_call():
    def star(*args):
        return args

    with pytest.raises(UsageError, match=r"\*args"):
        PythonTool(star)
    with pytest.raises(UsageError, match="tool name"):
        PythonTool(lambda x: x)  # '<lambda>' is not a usable name
    assert PythonTool(lambda x: x, name="ident").name == "ident"


async def test_callable_object_as_tool():
    class Counter:
        def __init__(self):
            self.n = 0

        async def __call__(self, step: int = 1) -> int:
            self.n += step
            return self.n

    counter = Counter()
    tool = PythonTool(counter, name="counter")
    assert tool.is_async
    assert (await tool.run({"step": 3})).content == "3"


# ---------------------------------------------------------------------------------------------
# MCP config
# ---------------------------------------------------------------------------------------------


def test_mcp_config_validation_names_server_and_key():
    with pytest.raises(ConfigError) as info:
        parse_mcp_config({"mcpServers": {"env": {"type": "streamable-http", "url": "http://h/mcp", "header": {}}}})
    assert "mcp_config.mcpServers.env.header" in str(info.value) and "no such key" in str(info.value)
    with pytest.raises(ConfigError, match="needs 'url'"):
        parse_mcp_config({"mcpServers": {"env": {"type": "sse"}}})
    with pytest.raises(ConfigError, match="needs 'command'"):
        parse_mcp_config({"mcpServers": {"local": {"type": "stdio"}}})
    with pytest.raises(ConfigError, match="no 'mcpServers'"):
        parse_mcp_config({"servers": {}})
    with pytest.raises(ConfigError, match="no value"):
        parse_mcp_config({"mcpServers": {"env": {"url": "http://h/mcp", "headers": {"Authorization": None}}}})


def test_mcp_config_normalizes_types_and_selects_servers():
    config = parse_mcp_config(
        {
            "mcpServers": {
                "a": {"type": "streamable_http", "url": "http://h/mcp", "headers": {"X-N": 3}},
                "b": {"command": "python", "args": ["-m", "srv"]},
                "c": {"url": "http://h/sse", "type": "SSE"},
            }
        }
    )
    assert config.mcp_servers["a"].type == "streamable-http"
    assert config.mcp_servers["a"].headers == {"X-N": "3"}
    assert config.mcp_servers["b"].type == "stdio"
    assert config.mcp_servers["c"].type == "sse"
    assert list(select_servers(config, ["c", "a"])) == ["c", "a"]
    assert list(select_servers(config, None)) == ["a", "b", "c"]
    assert list(select_servers(config, "b, a")) == ["b", "a"]


def test_get_agent_tool_env_and_servers_from_settings(monkeypatch):
    monkeypatch.setenv("MCP_SERVER_URL", "http://127.0.0.1:8000/mcp")
    monkeypatch.setenv("MCP_SERVER_TOKEN", "tok123")
    monkeypatch.setenv("MCP_SERVERS", "readweb-server, wiki ,arxiv")
    get_settings.cache_clear()
    try:
        config, names = get_agent_tool_env_and_servers()
        assert names == ["aworld-mcp"]
        entry = config["mcpServers"]["aworld-mcp"]
        assert entry["type"] == "streamable-http" and entry["url"] == "http://127.0.0.1:8000/mcp"
        assert entry["headers"] == {"Authorization": "Bearer tok123", "MCP_SERVERS": "readweb-server,wiki,arxiv"}
        config, _ = get_agent_tool_env_and_servers("http://other/mcp", token="t2", servers=["a"])
        assert config["mcpServers"]["aworld-mcp"]["headers"] == {"Authorization": "Bearer t2", "MCP_SERVERS": "a"}
        Agent("uses_env", mcp_config=config, mcp_servers=names)  # the pair is accepted as is
    finally:
        get_settings.cache_clear()


def test_get_agent_tool_env_and_servers_without_url(monkeypatch):
    for var in ("MCP_SERVER_URL", "AWORLD_MCP_SERVER_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir("/")
    get_settings.cache_clear()
    try:
        with pytest.raises(UsageError, match="MCP_SERVER_URL"):
            get_agent_tool_env_and_servers()
    finally:
        get_settings.cache_clear()


# ---------------------------------------------------------------------------------------------
# agent_from_job and the build_agents hook
# ---------------------------------------------------------------------------------------------


def _job(agent: dict, **extra):
    return load_job_config(data={"agent": agent, **extra})


def test_agent_from_job_fields():
    job = _job(
        {
            "name": "calc",
            "system_prompt": "be exact",
            "llm_base_url": "http://127.0.0.1:1/v1",
            "llm_model_name": "m",
            "temperature": 0.3,
            "max_steps": 4,
            "tools": [f"{__name__}:search", f"{__name__}:async_tool"],
        }
    )
    agent = agent_from_job(job, AworldSettings())
    assert isinstance(agent, Agent)
    assert agent.name == "calc" and agent.system_prompt == "be exact"
    assert agent.conf.temperature == 0.3 and agent.conf.max_steps == 4
    assert [t.name for t in agent.tools] == ["search", "async_tool"]


def test_agent_from_job_uses_the_env_from_settings():
    settings = AworldSettings(MCP_SERVER_URL="http://127.0.0.1:8000/mcp", MCP_SERVER_TOKEN="t", MCP_SERVERS="wiki")
    agent = agent_from_job(_job({"name": "g"}), settings)
    assert list(agent.servers) == ["aworld-mcp"]
    assert agent.servers["aworld-mcp"].headers == {"Authorization": "Bearer t", "MCP_SERVERS": "wiki"}


def test_agent_from_job_sends_exactly_the_release_the_environment_names():
    base = {"MCP_SERVER_URL": "http://127.0.0.1:8000/mcp", "MCP_SERVER_TOKEN": "t"}
    plain = agent_from_job(_job({"name": "g"}), AworldSettings(**base))
    assert plain.servers["aworld-mcp"].release is None  # e.g. the demo's calculator: no request per episode
    for none in ("", "0", "false"):  # empty (what an environment without one exports), the former boolean
        agent = agent_from_job(_job({"name": "g"}), AworldSettings(**base, MCP_SERVER_RELEASE=none))
        assert agent.servers["aworld-mcp"].release is None
    named = agent_from_job(_job({"name": "g"}), AworldSettings(**base, MCP_SERVER_RELEASE="POST {url}/end/{episode_id}"))
    assert named.servers["aworld-mcp"].release == "POST {url}/end/{episode_id}"
    with pytest.raises(UsageError, match="MCP_SERVER_RELEASE=.*unknown placeholder"):
        agent_from_job(_job({"name": "g"}), AworldSettings(**base, MCP_SERVER_RELEASE="DELETE {host}/{episode_id}"))


class _ReleasingEnvironments:
    def __init__(self, *releases: str | None) -> None:
        self.releases = releases

    @hookimpl
    def register_environments(self) -> list[EnvironmentSpec]:
        return [EnvironmentSpec(f"env{i}", "test", release=r) for i, r in enumerate(self.releases)]


def test_the_former_boolean_release_setting_is_read_with_a_deprecation_warning():
    """MCP_SERVER_RELEASE=true (the former form, maybe in users' .env files) means the release of
    the one installed environment that declares one; refused, naming them, otherwise."""
    base = {"MCP_SERVER_URL": "http://127.0.0.1:8000/mcp", "MCP_SERVER_TOKEN": "t", "MCP_SERVER_RELEASE": "true"}
    for releases, outcome in [((None, "DELETE {base}/s/{episode_id}"), "DELETE {base}/s/{episode_id}"),
                              ((None,), "No installed environment declares one"),
                              (("DELETE {base}/a/{episode_id}", "POST {base}/b/{episode_id}"),
                               "env0: MCP_SERVER_RELEASE='DELETE {base}/a/{episode_id}'; env1")]:
        manager = PluginManager(load_entry_points=False)
        manager.register(_ReleasingEnvironments(*releases), name="test-environments")
        reset_plugin_manager(manager)
        try:
            if outcome.startswith(("DELETE", "POST")):
                with pytest.warns(DeprecationWarning, match="former boolean form"):
                    agent = agent_from_job(_job({"name": "g"}), AworldSettings(**base))
                assert agent.servers["aworld-mcp"].release == outcome
            else:
                with pytest.raises(UsageError, match="former boolean form") as caught:
                    agent_from_job(_job({"name": "g"}), AworldSettings(**base))
                assert outcome in str(caught.value)
        finally:
            reset_plugin_manager()


def test_an_environment_spec_with_a_bad_release_is_refused_at_registration():
    with pytest.raises(ValueError, match="environment 'x': release method 'GET'"):
        EnvironmentSpec("x", "test", release="GET {base}/{episode_id}")


def test_agent_from_job_falls_back_to_llm_settings():
    settings = AworldSettings(LLM_BASE_URL="http://127.0.0.1:2/v1", LLM_MODEL_NAME="qwen")
    agent = agent_from_job(_job({"name": "g"}), settings)
    assert agent.conf.llm_base_url == "http://127.0.0.1:2/v1" and agent.conf.llm_model_name == "qwen"


def test_agent_from_job_factory_forms():
    settings = AworldSettings()
    agent = agent_from_job(_job({"factory": f"{__name__}:make_agent"}), settings)
    assert agent.name == "factory_agent"
    agent = agent_from_job(_job({"factory": f"{__name__}:make_configured_agent", "options": {"name": "x", "steps": 2}}), settings)
    assert (agent.name, agent.conf.max_steps) == ("x", 2)
    assert isinstance(agent_from_job(_job({"factory": f"{__name__}:make_swarm"}), settings), Swarm)
    assert agent_from_job(_job({"factory": f"{__name__}:AGENT_OBJECT"}), settings) is AGENT_OBJECT


def test_agent_from_job_factory_errors():
    settings = AworldSettings()
    with pytest.raises(UsageError, match="must return an aworld_core.Agent"):
        agent_from_job(_job({"factory": f"{__name__}:not_an_agent"}), settings)
    with pytest.raises(UsageError, match="does not accept agent.options"):
        agent_from_job(_job({"factory": f"{__name__}:make_agent", "options": {"bogus": 1}}), settings)
    with pytest.raises(UsageError, match="cannot import module"):
        agent_from_job(_job({"factory": "no_such_module_xyz:make"}), settings)
    with pytest.raises(UsageError, match="options is set but agent.factory is not"):
        agent_from_job(_job({"options": {"a": 1}}), settings)


def test_agent_from_job_factory_in_a_user_file(tmp_path):
    (tmp_path / "my_agent.py").write_text(
        "from aworld_core import Agent\n\ndef build(name='from_file'):\n    return Agent(name)\n"
    )
    (tmp_path / "job.yaml").write_text("agent:\n  factory: my_agent.py:build\n  options: {name: scripted}\n")
    job = load_job_config(tmp_path / "job.yaml")
    assert agent_from_job(job, AworldSettings()).name == "scripted"


def test_build_agents_hook_uses_the_factory():
    pm = PluginManager(load_entry_points=False)
    agent = pm.hook.build_agents(job=_job({"factory": f"{__name__}:make_agent"}), settings=AworldSettings())
    assert isinstance(agent, Agent) and agent.name == "factory_agent"


def test_swarm_validation():
    a, b = Agent("a"), Agent("b", trainable=False)
    assert Swarm(a, b).trained_agents == [a]
    assert Swarm(a, b, train=["b"]).trained_agents == [b]
    assert Swarm([a, b]).agents == [a, b]
    with pytest.raises(UsageError, match="unique"):
        Swarm(a, Agent("a"))
    with pytest.raises(UsageError, match="not agents of this Swarm"):
        Swarm(a, b, train=["c"])
    with pytest.raises(UsageError, match="lead"):
        Swarm(a, mode="lead")
    with pytest.raises(UsageError, match="mode"):
        Swarm(a, b, mode="parallel")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="at least one"):
        Swarm()

