"""One episode: an agent (or swarm) on one task, recorded step by step.

``run_episode`` never raises for an episode *failure*: an LLM that gives up, an exception in the
loop or a timeout are recorded on the returned ``Episode`` (FAILED, TIMEOUT). A cancellation is
recorded (CANCELLED) and re-raised, with the partial episode attached to the ``CancelledError``
as ``.episode``. It does raise for *setup* errors that
no episode can survive and that must not go unnoticed: an MCP server refusing the token or
unreachable at start (``MCPConnectionError``), an agent without an LLM endpoint, a trained LLM
passed to agents none of which is trainable (``UsageError``).

Termination: a reply without tool calls is the final answer (SUCCESS). Running out of steps is
a normal environment termination, as in verl: SUCCESS with ``metadata["stop"] = "max_steps"``
and ``final_answer=None``; the reward decides. A reply cut by length (``finish_reason ==
"length"``, e.g. the token-level client's response budget is spent) ends the episode with
``metadata["stop"] = "length"`` and the cut text as the answer when it has no tool calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from aworld_core.agents.agent import Agent
from aworld_core.agents.compaction import (
    CompactionConfig,
    compact_tool_results,
    context_tokens,
    summary_request,
    with_summary,
)
from aworld_core.agents.swarm import Swarm
from aworld_core.aio import gather_settled, maybe_await
from aworld_core.errors import EpisodeInputError, LLMError, MCPConnectionError, UsageError
from aworld_core.policy_clients import PolicyClients
from aworld_core.schemas import (
    ActionResult,
    Episode,
    EpisodeStatus,
    ExpData,
    ExpMeta,
    ExpState,
    Message,
    Sample,
    SamplingParams,
    ToolCall,
    TrainingView,
    TrajectoryStep,
    new_id,
)
from aworld_core.tools.base import EndEpisode, ToolOutcome, ToolSpec
from aworld_core.tools.toolbox import Toolbox, build_toolbox

logger = logging.getLogger(__name__)

STOP_FINAL = "final_answer"
STOP_MAX_STEPS = "max_steps"
STOP_LENGTH = "length"

_AGENT_TOOL_PARAMETERS = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the agent should do, with the context it needs."}
    },
    "required": ["task"],
}


@dataclass
class _Result:
    answer: str | None
    stop: str
    agent: str


class _EpisodeEnded(EndEpisode):
    """A trained conversation ran out of length budget: the whole episode ends here."""

    def __init__(self, result: _Result):
        super().__init__(result.stop)
        self.result = result


@dataclass
class Compactor:
    """One conversation's compaction state: the config, how many messages its first prompt has,
    the last call's usage and how many messages it covered, and the compactions so far."""

    config: CompactionConfig
    first: int
    last_usage: dict[str, int] | None = None
    counted: int = 0
    count: int = 0

    def seen(self, response: Any, messages: int) -> None:
        self.last_usage, self.counted = response.usage, messages

    def compacted(self, messages: int) -> None:
        self.count += 1
        self.last_usage, self.counted = None, messages


@dataclass
class _Run:
    root: Agent | Swarm
    episode: Episode
    llm: Any
    sampling: SamplingParams | None
    max_steps: int | None
    toolboxes: dict[str, Toolbox] = field(default_factory=dict)
    toolsets: list[Any] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    primary_messages: list[Message] | None = None
    root_messages: list[Message] | None = None

    # -- who is trained, which LLM each agent uses --------------------------------------------

    @property
    def agents(self) -> list[Agent]:
        return self.root.agents if isinstance(self.root, Swarm) else [self.root]

    @property
    def router(self) -> PolicyClients | None:
        """The per-agent clients of a multi-policy job (``aworld_core.policy_clients``), if given."""
        return self.llm if isinstance(self.llm, PolicyClients) else None

    def is_trained(self, agent: Agent) -> bool:
        """Whether the agent samples through the backend's token client (its turns are recorded):
        a multi-policy job's mapping decides, else the Swarm's (or the agent's) own flags."""
        if self.router is not None:
            return self.router.routes(agent.name)
        if isinstance(self.root, Swarm):
            return self.root.is_trained(agent)
        return agent.trainable

    def uses_trained_llm(self, agent: Agent) -> bool:
        return self.llm is not None and self.is_trained(agent)

    def trained_client(self, agent: Agent) -> Any:
        return self.router.client(agent.name) if self.router is not None else self.llm

    def own_client(self, agent: Agent) -> Any:
        """The client of an agent that is not recorded: its endpoint policy's, else its own."""
        return self.router.endpoint_client(agent.name) if self.router is not None else agent.own_llm()

    def check(self) -> None:
        """Setup errors, raised before anything runs."""
        if self.router is not None:
            self.router.check(self.root)  # every agent mapped to a policy
            if not any(self.router.routes(a.name) for a in self.agents):
                raise UsageError(
                    f"no agent of '{self.root.name}' is mapped to a policy served here: every agent samples "
                    f"from an endpoint, so nothing would be recorded or trained"
                )
            for agent in self.agents:
                if not self.router.routes(agent.name):
                    self.own_client(agent)  # an endpoint's key that is not set is named now
            return
        if self.llm is not None and not any(self.is_trained(a) for a in self.agents):
            raise UsageError(
                f"an LLM to train was passed, but no agent of '{self.root.name}' is trainable: mark the "
                f"trained agent with Agent(..., trainable=True) or Swarm(..., train=[name])"
            )
        if self.llm is not None and not callable(getattr(self.llm, "chat", None)):
            raise UsageError(f"llm={self.llm!r} has no chat() method; pass an aworld_core LLMClient")
        for agent in self.agents:
            if not self.uses_trained_llm(agent):
                agent.own_llm()  # raises UsageError naming the agent when it has no endpoint

    # -- tools ----------------------------------------------------------------------------------

    async def open_tools(self) -> None:
        from aworld_core.tools.mcp_client import MCPToolset

        agents = self.agents
        # servers that keep per-episode state (workspaces) key it on these headers
        headers = {"X-Episode-Id": self.episode.id, "X-Task-Id": self.episode.task_id}
        toolsets = [
            MCPToolset(
                a.servers,
                call_timeout_s=a.conf.tool_timeout_s,
                connect_retries=a.conf.mcp_connect_retries,
                headers=headers,
            )
            if a.servers
            else None
            for a in agents
        ]
        self.toolsets = [t for t in toolsets if t is not None]
        opened = await gather_settled([t.open() if t else _no_tools() for t in toolsets])
        for result in opened:
            if isinstance(result, BaseException):
                raise result
        members = self.root.members if isinstance(self.root, Swarm) else []
        for agent, toolset, mcp_specs in zip(agents, toolsets, opened, strict=True):
            own: list[ToolSpec] = [t.spec for t in agent.tools]
            executors: list[Any] = [t.run for t in agent.tools]
            if isinstance(self.root, Swarm) and agent is self.root.lead and members:
                for member in members:
                    own.append(
                        ToolSpec(
                            name=member.name,
                            description=member.desc or f"Ask the agent '{member.name}' to do a task; returns its answer.",
                            parameters=dict(_AGENT_TOOL_PARAMETERS),
                            kind="agent",
                        )
                    )
                    executors.append(self._agent_tool(member, agent))
            self.toolboxes[agent.name] = build_toolbox(
                own,
                executors,
                list(mcp_specs),  # type: ignore[arg-type]
                toolset.executor if toolset else None,
                timeout_s=agent.conf.tool_timeout_s,
            )

    async def close_tools(self) -> None:
        await gather_settled([t.aclose() for t in self.toolsets])  # a close error is not the episode's outcome

    async def end_tools(self, releases: list[tuple[str, Any]]) -> None:
        """Close this episode's sessions, then send the servers' release requests (never raises)."""
        if any(t.needs_closing() for t in self.toolsets):
            await self.close_tools()
        if releases:
            from aworld_core.tools.mcp_release import release_episode

            try:
                await release_episode(releases, self.episode.id, self.episode.task_id)
            except Exception:  # a release is best-effort: never the episode's outcome
                logger.exception("releasing episode %s on its MCP servers failed", self.episode.id)

    def _agent_tool(self, member: Agent, lead: Agent) -> Any:
        async def run(arguments: dict[str, Any]) -> ToolOutcome:
            task = arguments.get("task")
            if not isinstance(task, str) or not task.strip():
                return ToolOutcome(
                    f"Error: agent '{member.name}' needs a 'task' string argument.",
                    is_error=True,
                    error="missing 'task' argument",
                )
            result = await self.converse(member, self.first_messages(member, task), lead.name, lead.name)
            if result.stop == STOP_MAX_STEPS:
                steps = self.steps_limit(member)
                return ToolOutcome(
                    f"Error: agent '{member.name}' stopped after {steps} steps without a final answer.",
                    is_error=True,
                    error=f"agent '{member.name}' hit max_steps ({steps})",
                )
            return ToolOutcome(result.answer or "")

        return run

    # -- conversations --------------------------------------------------------------------------

    def first_messages(self, agent: Agent, text: str, prompt: list[Message] | None = None) -> list[Message]:
        """System prompt plus the task. A sample's own prompt is kept, except that the agent's
        system prompt replaces the sample's system message (two system blocks break templates)."""
        if prompt is not None:
            messages = [dict(m) for m in prompt if not (agent.system_prompt and m.get("role") == "system")]
        else:
            messages = [{"role": "user", "content": text}]
        if agent.system_prompt:
            messages.insert(0, {"role": "system", "content": agent.system_prompt})
        return messages

    def steps_limit(self, agent: Agent) -> int:
        return self.max_steps or agent.conf.max_steps

    def _new_session(self) -> str:
        session = self.episode.id if not self.sessions else f"{self.episode.id}:{len(self.sessions)}"
        self.sessions.append(session)
        return session

    async def converse(self, agent: Agent, messages: list[Message], from_agent: str, pre_agent: str | None) -> _Result:
        trained = self.uses_trained_llm(agent)
        if trained:
            client = self.trained_client(agent)
            session_id = self._new_session()
            if self.primary_messages is None:
                self.primary_messages = messages
        else:
            client = self.own_client(agent)
            session_id = self.episode.id
        sampling = agent.sampling()
        if self.is_trained(agent):
            sampling = sampling.merged(self.sampling)
        toolbox = self.toolboxes[agent.name]
        tools = toolbox.schemas() or None
        task_id = self.episode.task_id
        compactor = Compactor(agent.conf.compaction, len(messages)) if agent.conf.compaction else None
        for step_no in range(1, self.steps_limit(agent) + 1):
            if compactor is not None and step_no > 1:
                await self.compact(compactor, agent, client, session_id, trained, messages, tools, sampling,
                                   from_agent, pre_agent, step_no)
            started_at = time.time()
            started = time.perf_counter()
            sent = list(messages)
            response = await client.chat(sent, tools, sampling, session_id=session_id)
            messages.append(response.message())
            if compactor is not None:
                compactor.seen(response, len(messages))
            calls = list(response.tool_calls)
            step = TrajectoryStep(
                exp_meta=ExpMeta(task_id=task_id, agent_id=agent.name, step=step_no, pre_agent=pre_agent, started_at=started_at),
                exp_data=ExpData(
                    state=ExpState(from_agent_name=from_agent, content=response.content),
                    actions=calls,
                    messages=sent,
                    llm_call=response.to_record(),
                ),
            )
            self.episode.steps.append(step)
            if response.finish_reason == STOP_LENGTH:
                step.exp_meta.duration_s = time.perf_counter() - started
                valid = [c for c in calls if c.error is None]
                result = _Result(None if valid else response.content, STOP_LENGTH, agent.name)
                if trained:
                    raise _EpisodeEnded(result)
                return result
            if not calls:
                step.exp_meta.duration_s = time.perf_counter() - started
                return _Result(response.content, STOP_FINAL, agent.name)
            results = await _run_calls(toolbox, calls)
            step.exp_data.state.action_result = results
            for call, result in zip(calls, results, strict=True):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
            step.exp_meta.duration_s = time.perf_counter() - started
        return _Result(None, STOP_MAX_STEPS, agent.name)

    async def compact(
        self, compactor: Compactor, agent: Agent, client: Any, session_id: str, trained: bool,
        messages: list[Message], tools: Any, sampling: SamplingParams, from_agent: str, pre_agent: str | None,
        step_no: int,
    ) -> None:
        """Compact ``messages`` in place when the next call's context would pass the agent's budget
        (``aworld_core.agents.compaction``); a summary is one more recorded (and trained) LLM call.
        ``trained``: ``client`` is the token client, which counts the context exactly and marks the
        segment the compacted conversation begins."""
        config = compactor.config
        if compactor.count >= config.max_compactions:
            return
        size = context_tokens(client, session_id if trained else None, messages, tools, compactor.last_usage,
                              compactor.counted)
        if size <= config.max_context_tokens:
            return
        if config.strategy == "summary":
            started_at, started = time.time(), time.perf_counter()
            sent = summary_request(messages, config)
            ask = sampling if config.summary_max_tokens is None else sampling.model_copy(
                update={"max_tokens": config.summary_max_tokens})
            response = await client.chat(sent, tools, ask, session_id=session_id)
            self.episode.steps.append(TrajectoryStep(
                exp_meta=ExpMeta(task_id=self.episode.task_id, agent_id=agent.name, step=step_no, pre_agent=pre_agent,
                                 started_at=started_at, duration_s=time.perf_counter() - started),
                exp_data=ExpData(state=ExpState(from_agent_name=from_agent, content=response.content),
                                 messages=sent, llm_call=response.to_record()),
            ))
            exhausted = getattr(client, "exhausted", None) if trained else None
            if response.finish_reason == STOP_LENGTH and exhausted is not None \
                    and exhausted(session_id):  # the response budget is spent (a summary cut at its own
                raise _EpisodeEnded(_Result(None, STOP_LENGTH, agent.name))  # max_tokens goes on)
            compacted = with_summary(messages[: compactor.first], response.content or "")
        else:
            compacted = compact_tool_results(messages, config)
            if compacted is None:
                return  # nothing old enough to compact: the context grows
        note = getattr(client, "note_compaction", None) if trained else None
        if note is not None:
            note(session_id)  # the next call begins a training segment marked "compaction"
        messages[:] = compacted
        compactor.compacted(len(messages))
        self.episode.metadata.setdefault("compactions", []).append(
            {"agent": agent.name, "step": step_no, "strategy": config.strategy, "context_tokens": size})

    async def execute(self, question: str, prompt: list[Message] | None) -> _Result:
        try:
            await self.open_tools()
            return await self._run_root(question, prompt)
        except _EpisodeEnded as ended:
            return ended.result
        finally:
            # sessions are closed and servers told the episode ended (mcp_release) even when the
            # episode is cancelled meanwhile; nothing to do (shared sessions, no release) costs no task
            releases = [(n, c) for a in self.agents for n, c in a.servers.items() if c.release is not None]
            if releases or any(t.needs_closing() for t in self.toolsets):
                closing = asyncio.ensure_future(self.end_tools(releases))
                try:
                    await asyncio.shield(closing)
                except asyncio.CancelledError:
                    await closing
                    raise

    async def _run_root(self, question: str, prompt: list[Message] | None) -> _Result:
        root = self.root
        if isinstance(root, Agent):
            self.root_messages = self.first_messages(root, question, prompt)
            return await self.converse(root, self.root_messages, "user", None)
        if root.mode == "lead":
            self.root_messages = self.first_messages(root.lead, question, prompt)
            return await self.converse(root.lead, self.root_messages, "user", None)
        text, previous = question, None
        result = _Result(None, STOP_FINAL, root.agents[0].name)
        for index, agent in enumerate(root.agents):
            self.root_messages = self.first_messages(agent, text, prompt if index == 0 else None)
            result = await self.converse(agent, self.root_messages, previous or "user", previous)
            if result.stop == STOP_MAX_STEPS:
                return result
            text, previous = result.answer or "", agent.name
        return result

    # -- the end --------------------------------------------------------------------------------

    async def finish_sessions(self, keep: bool) -> str | None:
        """Hand each trained session back to the LLM client; keep the views only when trainable.

        A call of a session that reached the shared gateway over HTTP (an agent or tool whose
        endpoint is the gateway, with the session's ``X-Session-Id``) may have failed on the
        server side and been swallowed: the gateway's rule (``aworld_core.gateway.failures``)
        then fails the episode, which keeps no view."""
        from aworld_core.gateway.failures import finished_session, settle_episode

        finish = getattr(self.llm, "finish_session", None)
        if finish is None or not self.sessions:
            return None
        error = None
        views: list[Any] = []
        finished = []
        for session in self.sessions:
            try:
                views.append(await maybe_await(finish(session)))
            except Exception as exc:
                error = f"finish_session({session!r}) failed: {type(exc).__name__}: {exc}"
                views.append(None)
            finished.append(finished_session(self.llm, session, views[-1]))
        settle_episode(self.episode, finished)
        keep = keep and self.episode.status is EpisodeStatus.SUCCESS
        if keep and error is None:
            primary = views[0]
            if primary is not None and not isinstance(primary, TrainingView):
                primary = TrainingView.model_validate(primary)
            self.episode.training = primary
            extra = [v.model_dump() if hasattr(v, "model_dump") else v for v in views[1:] if v is not None]
            if extra:
                self.episode.metadata["extra_training"] = extra
        return error


async def _no_tools() -> list[ToolSpec]:
    return []


async def _run_calls(toolbox: Toolbox, calls: list[ToolCall]) -> list[ActionResult]:
    """Run the step's tool calls concurrently; results in call order."""
    if len(calls) == 1:
        return [await toolbox.call(calls[0])]
    tasks = [asyncio.ensure_future(toolbox.call(call)) for call in calls]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if pending:  # one raised (an agent-as-tool's LLM failed): stop the others
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return [task.result() for task in tasks]


def _task_text(task: Any) -> tuple[str, list[Message] | None, Sample | None]:
    if isinstance(task, Sample):
        if not task.prompt:
            raise EpisodeInputError(f"sample '{task.id}' has an empty prompt; nothing to ask the agent")
        return task.question, list(task.prompt), task
    if isinstance(task, str):
        return task, None, None
    raise UsageError(f"an episode's task must be a Sample or a string, got {type(task).__name__}")


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


async def run_episode(
    agent_or_swarm: Agent | Swarm,
    task: Sample | str,
    *,
    llm: Any = None,
    episode_id: str | None = None,
    task_id: str | None = None,
    timeout: float | None = None,
    max_steps: int | None = None,
    sampling: SamplingParams | dict[str, Any] | None = None,
    **extra: Any,
) -> Episode:
    """Run ``agent_or_swarm`` on ``task`` and return the recorded ``Episode``.

    ``llm`` is the client the trained agent(s) use (a backend's token-level client); ``None``
    runs every agent on its own endpoint. ``sampling`` overrides the trained agents' sampling
    (e.g. a backend's validation settings). ``timeout`` (seconds) bounds the whole episode,
    MCP connection included; default: the (lead) agent's ``episode_timeout_s``. ``max_steps``
    overrides every agent's ``AgentConfig.max_steps``. Other keyword arguments whose values are
    plain JSON are recorded in ``episode.metadata``; others (e.g. a backend's handles) are not.
    """
    if not isinstance(agent_or_swarm, (Agent, Swarm)):
        raise UsageError(f"run_episode needs an Agent or a Swarm, got {type(agent_or_swarm).__name__}")
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"max_steps must be >= 1, got {max_steps}")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"timeout must be > 0 seconds, got {timeout}")
    if isinstance(sampling, dict):
        sampling = SamplingParams(**sampling)
    question, prompt, sample = _task_text(task)
    episode = Episode(
        id=episode_id or new_id("ep-"),
        task_id=task_id or (sample.id if sample is not None else new_id("task-")),
        agent_id=agent_or_swarm.name,
    )
    episode.metadata.update({k: v for k, v in extra.items() if _jsonable(v)})
    run = _Run(agent_or_swarm, episode, llm, sampling, max_steps)
    run.check()
    if timeout is None:
        lead = agent_or_swarm.lead if isinstance(agent_or_swarm, Swarm) else agent_or_swarm
        timeout = lead.conf.episode_timeout_s

    # the episode runs in this task under a deadline (no task of its own: at concurrency 1 each
    # extra task is measurable CPU, benchmarks/rollout_overhead.py)
    deadline = asyncio.timeout(timeout)
    result: _Result | None = None
    exc: Exception | None = None
    try:
        async with deadline:
            result = await run.execute(question, prompt)
    except asyncio.CancelledError as cancelled:  # the caller's cancellation (our deadline raises TimeoutError)
        episode.finish(EpisodeStatus.CANCELLED, "the episode was cancelled")
        await run.finish_sessions(keep=False)
        episode.messages = list(run.primary_messages or run.root_messages or [])
        cancelled.episode = episode  # type: ignore[attr-defined]  # the partial record, for callers that keep it
        raise
    except Exception as error:  # recorded on the episode below, never swallowed
        exc = error

    if exc is not None and isinstance(exc, TimeoutError) and deadline.expired():
        episode.finish(
            EpisodeStatus.TIMEOUT,
            f"the episode exceeded its {timeout:g} s timeout after {len(episode.steps)} steps",
        )
    elif exc is None:
        assert result is not None
        episode.final_answer = result.answer
        episode.metadata["stop"] = result.stop
        if result.stop != STOP_FINAL and isinstance(agent_or_swarm, Swarm):
            episode.metadata["stopped_agent"] = result.agent
        episode.finish(EpisodeStatus.SUCCESS)
    elif isinstance(exc, (MCPConnectionError, UsageError)):
        await run.finish_sessions(keep=False)
        raise exc
    elif isinstance(exc, LLMError):
        episode.finish(EpisodeStatus.FAILED, str(exc))
    else:
        episode.finish(EpisodeStatus.FAILED, f"{type(exc).__name__}: {exc}")
        episode.metadata["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        logger.warning("episode %s failed: %s: %s", episode.id, type(exc).__name__, exc)

    error = await run.finish_sessions(keep=episode.status is EpisodeStatus.SUCCESS)
    if error is not None and episode.status is EpisodeStatus.SUCCESS:
        episode.status = EpisodeStatus.FAILED
        episode.error = error
    episode.messages = list(run.primary_messages or run.root_messages or [])
    return episode
