"""Build the agent a job trains, in whatever process needs it.

Agent objects never travel between processes: a backend worker re-creates the agent from the
serialized job config, either by calling ``job.agent.factory`` (an importable reference to a
function in the user's script) or from ``job.agent``'s plain fields.
"""

from __future__ import annotations

import inspect
from typing import Any

from aworld_core.agents.agent import Agent, AgentConfig
from aworld_core.agents.swarm import Swarm
from aworld_core.errors import UsageError
from aworld_core.imports import import_ref


def agent_from_job(job: Any, settings: Any = None) -> Agent | Swarm:
    """The ``Agent`` or ``Swarm`` of ``job`` (what the core's ``build_agents`` hook returns)."""
    if settings is None:
        from aworld_core.settings import get_settings

        settings = get_settings()
    section = job.agent
    if getattr(section, "openai_agent", None):
        from aworld_core.worker.openai_agent import training_only

        raise training_only(section.openai_agent)
    if section.factory:
        from aworld_core.secrets import resolve_env_ref

        # a secret option arrives as {"env": NAME} from a plan file (aworld_core.secrets)
        options = {k: _resolved(resolve_env_ref, v, f"agent.options.{k}") for k, v in section.options.items()}
        return _from_factory(section.factory, options, getattr(job, "base_dir", None))
    if section.options:
        raise UsageError(
            "agent.options is set but agent.factory is not: options are the factory's keyword "
            "arguments; set agent.factory to 'module:function' or remove agent.options"
        )
    tools = [import_ref(ref, getattr(job, "base_dir", None)) for ref in section.tools]
    for ref, tool in zip(section.tools, tools, strict=True):
        if not callable(tool):
            raise UsageError(f"agent.tools entry {ref!r} is not callable (it is {type(tool).__name__})")
    mcp_config = section.mcp_config
    mcp_servers = section.mcp_servers
    if mcp_config is None and getattr(settings, "mcp_server_url", None):
        from aworld_core.tools.mcp_config import configured_release, get_agent_tool_env_and_servers

        # exactly the request the environment named (MCP_SERVER_RELEASE, exported by a job's
        # environment from its spec); none when it named none
        release = configured_release(getattr(settings, "mcp_server_release", None))
        mcp_config, names = get_agent_tool_env_and_servers(
            settings.mcp_server_url, settings.mcp_server_token, settings.mcp_servers,
            release=release, release_workspace=release is not None,
        )
        mcp_servers = mcp_servers or names
    values = {name: getattr(section, name) for name in AgentConfig.model_fields}  # every AgentConfig field
    for name in ("llm_base_url", "llm_model_name", "llm_api_key"):
        values[name] = values[name] or getattr(settings, name, None)
    conf = AgentConfig.parse(values, where="agent")
    return Agent(
        name=section.name,
        desc=section.desc,
        system_prompt=section.system_prompt,
        conf=conf,
        mcp_config=mcp_config,
        mcp_servers=mcp_servers,
        tools=tools,
    )


def _resolved(resolve: Any, value: Any, where: str) -> Any:
    try:
        return resolve(value, where)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _from_factory(ref: str, options: dict[str, Any], base_dir: str | None) -> Agent | Swarm:
    target = import_ref(ref, base_dir)
    if isinstance(target, (Agent, Swarm)):
        if options:
            raise UsageError(f"agent.factory {ref!r} is an agent object, not a function; it takes no options")
        return target
    if not callable(target):
        raise UsageError(f"agent.factory {ref!r} is a {type(target).__name__}, not a function returning an Agent")
    if options:
        try:
            inspect.signature(target).bind(**options)
        except TypeError as exc:
            raise UsageError(f"agent.factory {ref!r} does not accept agent.options {sorted(options)}: {exc}") from None
        except ValueError:  # no signature (builtins); let the call decide
            pass
        result = target(**options)
    else:
        result = target()
    if not isinstance(result, (Agent, Swarm)):
        raise UsageError(
            f"agent.factory {ref!r} returned {type(result).__name__}; it must return an "
            f"aworld_core.Agent or aworld_core.Swarm"
        )
    return result
