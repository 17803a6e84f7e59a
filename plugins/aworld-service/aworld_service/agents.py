"""The agents a task server runs, and the one function that runs a task with one of them.

``--agents gaia_agent=my_pkg.agents:build_gaia_agent`` names a reference that is one of:

* a **factory** (a plain function) returning an ``Agent`` or ``Swarm``. Without a ``task``
  parameter it is called once, at start-up, and the agent is shared by every task (agents hold
  no per-episode state); a task's ``llm_*`` / ``sampling`` / ``system_prompt`` / ``mcp_*``
  overrides then run on a copy of that agent made for the task. With a ``task`` parameter it is
  called for every task with the :class:`~aworld_core.schemas.AworldTask`, and applies the
  overrides itself.
* a **task function**: an ``async def f(task) -> Episode | str`` for agents that are plain code
  (a no-op agent for benchmarks, a scripted baseline). A string becomes a successful episode
  whose final answer it is.

Agent episodes run through the ``rollout`` hook (the runtime's ``Runners``), so a plugin that
replaces rollouts replaces them here too. References are resolved when the server starts, so a
typo fails the start, not every task.

A task comes from whoever can reach the API, so its overrides may not reach into this host
(:func:`task_override_problems`, checked at submission and again before the task runs): its
``mcp_config`` may not read this host's environment (``{"env": NAME}`` values are refused) nor
start a stdio server (a command on this host) unless the operator allows it
(``--allow-stdio-mcp``), and a task that points the LLM elsewhere (``llm_base_url``) brings its own
``llm_api_key``: the host's key never goes to a URL the submitter chose.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aworld_core import import_ref, maybe_await
from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, Episode, EpisodeStatus, Sample

AGENT_SPEC_HELP = "name=package.module:factory (or name=path/to/file.py:factory)"


def parse_agent_specs(specs: Sequence[str]) -> dict[str, str]:
    """``["a=mod:f", "b=mod:g"]`` (also comma-separated) to ``{"a": "mod:f", "b": "mod:g"}``."""
    refs: dict[str, str] = {}
    for spec in specs:
        for item in spec.split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, ref = item.partition("=")
            if not sep or not name.strip() or ":" not in ref:
                raise UsageError(f"bad agent spec {item!r}: expected {AGENT_SPEC_HELP}")
            if name.strip() in refs:
                raise UsageError(f"agent '{name.strip()}' is given twice in --agents")
            refs[name.strip()] = ref.strip()
    return refs


def _takes_task(func: Callable[..., Any]) -> bool:
    try:
        return "task" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class AgentEntry:
    """One agent a server offers: its reference, and what the reference turned out to be."""

    name: str
    ref: str
    target: Any  # the resolved object
    kind: str  # "task_function" | "task_factory" | "shared_agent"
    agent: Any = None  # the shared agent, for kind == "shared_agent"


class AgentRegistry:
    """Agent name -> how to run a task with it. ``names`` is what this server claims from the queue."""

    def __init__(self, refs: Mapping[str, str | Callable[..., Any]], *, base_dir: str | None = None):
        if not refs:
            raise UsageError(f"a task server needs at least one agent: --agents {AGENT_SPEC_HELP}")
        self.entries: dict[str, AgentEntry] = {}
        for name, ref in refs.items():
            target = import_ref(ref, base_dir) if isinstance(ref, str) else ref
            label = ref if isinstance(ref, str) else getattr(ref, "__qualname__", repr(ref))
            if inspect.iscoroutinefunction(target):
                entry = AgentEntry(name, label, target, "task_function")
            elif callable(target) and _takes_task(target):
                entry = AgentEntry(name, label, target, "task_factory")
            elif callable(target) and (inspect.isfunction(target) or inspect.ismethod(target)):
                built = target()
                entry = AgentEntry(name, label, target, "shared_agent", agent=_check_agent(name, label, built))
            else:
                entry = AgentEntry(name, label, target, "shared_agent", agent=_check_agent(name, label, target))
            self.entries[name] = entry

    @property
    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> AgentEntry:
        entry = self.entries.get(name)
        if entry is None:
            raise UsageError(f"unknown agent_id '{name}': this server runs {', '.join(self.names)}")
        return entry

    async def aclose(self) -> None:
        for entry in self.entries.values():
            close = getattr(entry.agent, "aclose", None)
            if close is not None:
                await close()


def _check_agent(name: str, ref: str, obj: Any) -> Any:
    if inspect.iscoroutine(obj) or obj is None or isinstance(obj, (str, int, float, dict, list)):
        raise UsageError(
            f"agent '{name}' ({ref}) gave {type(obj).__name__}; a factory must return an Agent or Swarm "
            f"(or be an 'async def f(task)' task function)"
        )
    return obj


def task_override_problems(task: AworldTask, *, allow_stdio_mcp: bool = False) -> list[tuple[str, str]]:
    """What in ``task``'s overrides this host refuses, as ``(field, why)``: an MCP config that reads
    this host's environment or (unless ``allow_stdio_mcp``) starts a stdio server, and an
    ``llm_base_url`` without the task's own ``llm_api_key``."""
    from aworld_core.errors import ConfigError
    from aworld_core.tools.mcp_config import parse_mcp_config

    problems: list[tuple[str, str]] = []
    if task.llm_base_url is not None and not task.llm_api_key:
        problems.append((
            "llm_api_key",
            "a task that sets llm_base_url must also set its own llm_api_key: this server does not send "
            "its key to an endpoint a task chose",
        ))
    if task.mcp_config is not None:
        try:
            config = parse_mcp_config(task.mcp_config, env_refs=False)
        except ConfigError as exc:
            problems.append(("mcp_config", str(exc)))
        else:
            if not allow_stdio_mcp:
                for name, server in config.mcp_servers.items():
                    if server.type == "stdio":
                        problems.append((
                            f"mcp_config.mcpServers.{name}",
                            "a task may not start a stdio MCP server (it runs 'command' on this host); use "
                            "a streamable-http or sse server, or start the server with --allow-stdio-mcp",
                        ))
    return problems


def check_task_overrides(task: AworldTask, *, allow_stdio_mcp: bool = False) -> None:
    """Raise ``UsageError`` naming every override of ``task`` this host refuses."""
    problems = task_override_problems(task, allow_stdio_mcp=allow_stdio_mcp)
    if problems:
        raise UsageError(
            f"task '{task.task_id}' is refused: " + "; ".join(f"{field}: {why}" for field, why in problems)
        )


def task_sample(task: AworldTask) -> Sample:
    """The dataset row a task stands for (what rewards and the rollout hook receive)."""
    prompt: list[dict[str, Any]] = []
    if task.system_prompt:
        prompt.append({"role": "system", "content": task.system_prompt})
    prompt.append({"role": "user", "content": task.agent_input})
    return Sample(
        id=task.task_id,
        prompt=prompt,
        ground_truth=task.ground_truth,
        data_source=str(task.metadata.get("data_source", "task_service")),
        extra_info=dict(task.metadata),
    )


def has_overrides(task: AworldTask) -> bool:
    return any(
        value is not None
        for value in (
            task.llm_provider,
            task.llm_model_name,
            task.llm_base_url,
            task.llm_api_key,
            task.sampling,
            task.system_prompt,
            task.mcp_servers,
            task.mcp_config,
        )
    )


def agent_for_task(agent: Any, task: AworldTask, *, allow_stdio_mcp: bool = False) -> Any:
    """A copy of ``agent`` with the task's overrides (the shared agent is never changed)."""
    from aworld_core.agents import Agent
    from aworld_core.tools.mcp_config import parse_mcp_config

    check_task_overrides(task, allow_stdio_mcp=allow_stdio_mcp)

    if not isinstance(agent, Agent):
        raise UsageError(
            f"task '{task.task_id}' overrides the LLM/MCP settings, but agent '{task.agent_id}' is a "
            f"{type(agent).__name__}; overrides apply to a single Agent. Give the factory a 'task' "
            f"parameter to apply them to a {type(agent).__name__} yourself"
        )
    conf: dict[str, Any] = {}
    for field in ("llm_provider", "llm_model_name", "llm_base_url", "llm_api_key"):
        if getattr(task, field) is not None:
            conf[field] = getattr(task, field)
    if task.sampling is not None:
        for field in ("temperature", "top_p", "top_k", "max_tokens"):
            if getattr(task.sampling, field) is not None:
                conf[field] = getattr(task.sampling, field)
    new_conf = type(agent.conf).parse({**agent.conf.model_dump(), "llm_api_key": agent.conf.llm_api_key, **conf}, where="task", agent=agent.name)
    return Agent(
        agent.name,
        desc=agent.desc,
        system_prompt=task.system_prompt if task.system_prompt is not None else agent.system_prompt,
        conf=new_conf,
        # parsed here with env_refs=False: a task's config never reads this host's environment
        mcp_config=(
            parse_mcp_config(task.mcp_config, env_refs=False) if task.mcp_config is not None else agent.mcp_config
        ),
        mcp_servers=task.mcp_servers if task.mcp_servers is not None else agent.mcp_servers,
        tools=list(agent.tools),
        trainable=agent.trainable,
    )


async def run_agent_task(
    entry: AgentEntry, task: AworldTask, *, episode_id: str, allow_stdio_mcp: bool = False
) -> Episode:
    """Run ``task`` with ``entry`` and return its finished episode.

    Failures inside the agent come back as a FAILED / TIMEOUT episode from the runtime; an
    exception here means the agent could not be built or run at all, and the executor records
    the task as FAILED with it. The task's overrides are checked again here (the server checked
    them at submission, but a shared store may hold a task another host accepted).
    """
    check_task_overrides(task, allow_stdio_mcp=allow_stdio_mcp)
    if entry.kind == "task_function":
        started = time.time()
        return episode_from_value(await entry.target(task), task, episode_id, started_at=started)
    owned = None
    if entry.kind == "task_factory":
        agent = owned = await maybe_await(entry.target(task=task))
        _check_agent(entry.name, entry.ref, agent)
    elif has_overrides(task):
        agent = owned = agent_for_task(entry.agent, task, allow_stdio_mcp=allow_stdio_mcp)
    else:
        agent = entry.agent
    try:
        return await _rollout(agent, task, episode_id)
    finally:
        close = getattr(owned, "aclose", None)
        if close is not None:
            await close()


async def _rollout(agent: Any, task: AworldTask, episode_id: str) -> Episode:
    """The task's episode through the worker kit (failures recorded on it; scored and observed
    later by the executor, which also owns the task's timeout and cancellation)."""
    from aworld_core.schemas import RolloutContext
    from aworld_core.worker import EpisodeRunner

    context = RolloutContext(episode_id=episode_id, task_id=task.task_id, timeout=task.timeout,
                             max_steps=task.max_steps)
    return await EpisodeRunner(agent).run(task_sample(task), context, notify=False)


def episode_from_value(value: Any, task: AworldTask, episode_id: str, *, started_at: float | None = None) -> Episode:
    """What a task function returned, as an Episode (a string is a successful final answer)."""
    if isinstance(value, Episode):
        if value.status is EpisodeStatus.RUNNING:
            value.finish(EpisodeStatus.SUCCESS)
        return value
    if isinstance(value, str):
        episode = Episode(
            id=episode_id,
            task_id=task.task_id,
            agent_id=task.agent_id,
            final_answer=value,
            messages=[{"role": "user", "content": task.agent_input}, {"role": "assistant", "content": value}],
            started_at=started_at if started_at is not None else time.time(),
        )
        episode.finish(EpisodeStatus.SUCCESS)
        return episode
    raise UsageError(
        f"task function for agent '{task.agent_id}' returned {type(value).__name__}; return an Episode "
        f"or the answer as a str"
    )
