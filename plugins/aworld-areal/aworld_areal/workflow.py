"""``AworldWorkflow``: AReaL's rollout workflow; one call runs one prompt's whole GRPO group.

Each member is a whole multi-turn AWorld episode run by the worker kit (``EpisodeRunner``) through
the core's ``TokenLLM`` over ``ArealTokenEngine``: every LLM call is an ``engine.agenerate``
request (``n_samples=1``, ``rid`` = the episode id), so AReaL's weight-update pauses and staleness
control see them all; each row is the episode token for token, tool tokens masked, logprobs and
per-token policy versions from the engine, the reward scored once and discounted once.

**The group is formed here, at full size.** AReaL 1.0.4 groups by wrapping a workflow in
``GroupedRolloutWorkflow`` (``submit(group_size=n)``), which drops members that return ``None``
and concatenates the rest, while the actor's ``Normalization`` slices rewards by a fixed stride of
``group_size`` rows: one missing member shifts every later group. So ``arun_episode`` runs
``gconfig.n_samples`` members (``EpisodeRunner.run_group``) under the job's group policy
(``rollout.failed_episodes``) and returns exactly that many rows, a member that does not train as a
fully loss-masked row with the group's neutral reward, or ``None`` when the policy drops the group.
``aworld_areal.train`` gives ``PPOTrainer`` ``n_samples = 1`` so AReaL does not group it again; a
workflow wrapped anyway refuses with a ``UsageError``.

**Everything costly is built once per process.** AReaL constructs the workflow from its import
path and kwargs for every submitted prompt (``RemoteInfEngine._resolve_workflow``), so an instance
is a handle on a :class:`WorkflowState` cached per job and options (the kit's ``WorkerCache``): the
job, tokenizer (the kit's ``shared_tokenizer``), agent (the kit's ``build_agent``: the job's
``Agent``, or the ``OpenAIAgent`` that ``agent.openai_agent`` names, with its gateways), one
``TokenLLM``/``EpisodeRunner`` per engine, the counters (the kit's ``StepRecorder``).
:func:`close_workflow_states` (also run at exit) stops an OpenAI-API agent's gateways and the
reward processes.

**``rollout.max_failed_steps`` stops AReaL's rollouts, not just this workflow.** The kit's
``StepRecorder`` counts ``groups_per_step`` groups as a step; once it trips, this workflow stops
AReaL through its dispatcher's fail-fast slot (``aworld_areal.stopping``), in SPMD mode (the engine
in the trainer) and in single-controller mode (with ``watch_rollouts`` on the controller).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from dataclasses import dataclass
from typing import Any

from areal.api.workflow_api import RolloutWorkflow

from aworld_areal.config import OPENAI_AGENT_MOVED
from aworld_areal.data import sample_from_row
from aworld_areal.engine import ArealTokenEngine, as_gconfig
from aworld_areal.scoring import TRUNCATED, RewardScorer, shutdown_pools
from aworld_areal.stopping import STOP_GRACE_S, logger, stop_areal
from aworld_areal.tensors import group_tensors
from aworld_core.config import JobConfig
from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, RolloutContext
from aworld_core.worker import REASONS as KIT_REASONS
from aworld_core.worker import (
    EpisodeGroup,
    EpisodeRunner,
    GroupPolicy,
    OpenAIAgent,
    StepRecorder,
    WorkerCache,
    build_agent,
    build_token_llm,
    count_metrics,
    episode_segments,
    options_key,
    pad_id_of,
    shared_tokenizer,
    step_metrics,
)

# why a member did not train: the kit's reasons and the scorer's (counted per step in AReaL's stats)
REASONS = (*KIT_REASONS, TRUNCATED)
WRAPPED = (
    "AworldWorkflow runs each prompt's GRPO group itself (gconfig.n_samples members), but AReaL called it "
    "several times for the same prompt at once: it was submitted with group_size > 1, which would run "
    "n x n episodes. Submit it with group_size=1: aworld_areal.train does so by giving PPOTrainer "
    "gconfig.n_samples=1 (and eval_gconfig.n_samples=1) while the workflow keeps the group size"
)


@dataclass(frozen=True)
class WorkflowOptions:
    """``AworldWorkflow``'s options (``backends.areal.workflow`` plus what ``train`` adds)."""

    chat_template: str | None = None
    tool_parser: str | None = None
    turn_discount: float = 1.0
    max_response_tokens: int | None = None
    max_steps: int | None = None
    episode_timeout_s: float | None = None
    reward_processes: int = 0
    reward_timeout_s: float = 60.0
    reject_truncated: bool = False
    groups_per_step: int | None = None
    trajectories: str | None = None  # a JSONL file: every training group's episodes are appended (train adds it)


class WorkflowState:
    """What every ``AworldWorkflow`` of one job and options shares in a process."""

    def __init__(self, job: JobConfig, gconfig: Any, tokenizer: Any, options: WorkflowOptions):
        if job.reward is None:
            raise UsageError("the job has no reward section; AReaL trains on rewards (set reward: {name: ...})")
        if options.max_response_tokens is not None and options.max_response_tokens < 1:
            raise UsageError(f"workflow.max_response_tokens must be >= 1, got {options.max_response_tokens}")
        self.job = job
        self.options = options
        self.tokenizer = shared_tokenizer(tokenizer)
        g = as_gconfig(gconfig).new_with_stop_and_pad_token_ids(self.tokenizer)
        g.stop_token_ids = [i for i in g.stop_token_ids if i is not None]  # a tokenizer without pad
        self.gconfig = g  # with the tokenizer's eos and pad ids as stop ids, as AReaL's workflows do
        self.group_size = int(g.n_samples)
        self.pad_id = pad_id_of(self.tokenizer)
        self.policy = GroupPolicy.from_job(job)
        self.scorer = RewardScorer(
            job.reward, base_dir=job.base_dir, processes=options.reward_processes, timeout_s=options.reward_timeout_s,
            turn_discount=options.turn_discount, reject_truncated=options.reject_truncated,
        )
        # the job's Agent, or its OpenAI-API agent (agent.openai_agent): the state owns it, so closing
        # the state stops that agent's gateways (one per event loop and engine)
        self.agent: Any = build_agent(job, cache=False)
        if isinstance(self.agent, OpenAIAgent) and options.max_steps is not None:
            raise UsageError(f"workflow.max_steps={options.max_steps} cannot limit agent.openai_agent "
                             f"{self.agent.ref!r} (the function runs its own loop): remove it")
        # tallies, a log line per untrained member, and the all-failed stop over groups_per_step groups
        self.outcomes = StepRecorder(logger, max_failed_steps=self.policy.max_failed_steps,
                                     groups_per_step=options.groups_per_step)
        self._halted: dict[int, bool] = {}  # id(engine) -> whether stop_areal stopped it
        self._trajectories: Any = None  # the JsonlEpisodeWriter of options.trajectories, opened on first use
        self._lock = threading.Lock()
        self._runners: WorkerCache[tuple[Any, EpisodeRunner]] = WorkerCache()  # id(engine) -> (engine, runner)

    # the counters (process-wide): members trained, members not trained by reason, the latest of
    # those (reason, episode id, why), groups dropped, the kit's error once the all-failed stop tripped
    accepted = property(lambda self: self.outcomes.trained)
    rejected = property(lambda self: self.outcomes.untrained)
    recent_rejections = property(lambda self: self.outcomes.recent)
    groups_dropped = property(lambda self: self.outcomes.groups_dropped)
    stopped = property(lambda self: self.outcomes.stopped)

    # -- per engine, per loop -----------------------------------------------------------------

    def runner(self, engine: Any) -> EpisodeRunner:
        """The kit's runner over ``engine`` (one ``TokenLLM`` per engine; sessions are per episode)."""
        return self._runners.get(id(engine), lambda: (engine, self._build_runner(engine)),
                                 valid=lambda entry: entry[0] is engine)[1]

    def _build_runner(self, engine: Any) -> EpisodeRunner:
        o = self.options
        llm = build_token_llm(
            ArealTokenEngine(engine, self.gconfig, self.tokenizer), self.tokenizer, self.job,
            chat_template=o.chat_template, tool_parser=o.tool_parser, max_response_tokens=o.max_response_tokens,
        )
        return EpisodeRunner.from_job(
            self.job, llm, agent=self.agent, scorer=self.scorer, max_steps=o.max_steps,
            timeout=o.episode_timeout_s or self.job.rollout.timeout_for(self.agent),
            concurrency=sys.maxsize,  # AReaL bounds it: rollout.max_concurrent_rollouts prompts in flight
        )

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop this state's gateways (an OpenAI-API agent's; from any thread) and close its
        trajectory file."""
        if isinstance(self.agent, OpenAIAgent):
            self.agent.close(timeout_s)
        with self._lock:
            if self._trajectories is not None:
                self._trajectories.close()
                self._trajectories = None

    # -- one prompt ---------------------------------------------------------------------------

    async def run_group(self, engine: Any, data: Any) -> dict[str, Any] | None:
        """The prompt's group as AReaL's tensors (``n`` rows), or ``None`` when it was dropped."""
        if self.stopped is not None:
            await self._halt(engine)
        sample = sample_from_row(data)
        version = engine.get_version() if callable(getattr(engine, "get_version", None)) else None
        context = RolloutContext(policy_version=int(version) if version is not None else None)
        group = await self.runner(engine).run_group(sample, self.group_size, context)
        self._record(group)
        self._write_trajectories(group)
        if self.stopped is not None:  # this group completed the last failed step
            await self._halt(engine)
        return group_tensors(group, self.pad_id)

    async def _halt(self, engine: Any) -> None:
        """Raise ``self.stopped``, having stopped AReaL's rollouts on ``engine`` with it first."""
        assert self.stopped is not None
        with self._lock:
            first = id(engine) not in self._halted
            if first:
                self._halted[id(engine)] = stop_areal(engine, self.stopped)
        if first and self._halted[id(engine)]:
            await asyncio.sleep(STOP_GRACE_S)
        raise self.stopped

    def _record(self, group: EpisodeGroup) -> None:
        """Counters, logs and AReaL's stats for a finished group; the failed-steps stop."""
        import torch
        from areal import workflow_context
        from areal.utils import stats_tracker
        from areal.utils.stats_tracker import ReduceType

        tracker = stats_tracker.get(workflow_context.stat_scope())
        context = workflow_context.get()
        reasons = self.outcomes.group(group, step=not context.is_eval)  # counted, logged, the stop
        for episode, trained in zip(group.episodes, group.trained(), strict=True):
            if trained:
                self._record_trained(tracker, episode)
        tracker.scalar(**{"aworld/accepted": float(group.dropped is None)})
        tracker.scalar(**{k: v for k, v in step_metrics(group.episodes).items()
                          if k != "aworld/episodes" and not k.startswith("aworld/untrained/")})
        # per-step counts: summed over the step's groups
        tracker.denominator(**{"aworld/groups": torch.ones(1, dtype=torch.bool)})
        sums = count_metrics(len(group), reasons, names=REASONS)
        tracker.stat(denominator="aworld/groups", reduce_type=ReduceType.SUM,
                     **{k: torch.tensor([float(v)]) for k, v in sums.items()})

    def _write_trajectories(self, group: EpisodeGroup) -> None:
        """Append a training group's episodes (tokens, masks, logprobs, policy versions, rewards)
        to ``options.trajectories``; validation groups are not written."""
        from areal import workflow_context

        if self.options.trajectories is None or workflow_context.get().is_eval:
            return
        from aworld_core.export import JsonlEpisodeWriter

        with self._lock:
            if self._trajectories is None:
                self._trajectories = JsonlEpisodeWriter(self.options.trajectories, append=True)
            for episode in group.episodes:
                self._trajectories.write(episode)

    def _record_trained(self, tracker: Any, episode: Episode) -> None:
        view = episode.training
        assert view is not None and episode.reward is not None
        # every training segment is a row (a rewritten or compacted history, a swarm's other trained
        # agents), in layers that keep the group's stride (aworld_areal.tensors)
        segments = episode_segments(episode)
        tracker.scalar(**{
            "aworld/reward": float(episode.reward),
            "aworld/num_turns": float(sum(s.num_turns for s in segments)),
            "aworld/truncated": float(any(s.truncated for s in segments)),
            "aworld/seq_len": float(sum(len(s.prompt_ids) + len(s.response_ids) for s in segments)),
            "aworld/segments": float(len(segments)),
        })


def workflow_state(job: Any, gconfig: Any, tokenizer: Any, options: WorkflowOptions) -> WorkflowState:
    """The process's state for ``job`` (JSON text, dict, file path or ``JobConfig``) and options,
    built on first use (the job parsed, the tokenizer loaded, the agent built: once)."""
    return _STATES.for_job(job, options_key(gconfig=gconfig, tokenizer=tokenizer, options=options),
                           lambda parsed: WorkflowState(parsed, gconfig, tokenizer, options))


def workflow_states() -> list[WorkflowState]:
    """The states this process holds."""
    return _STATES.states()


def close_workflow_states(timeout_s: float = 10.0) -> None:
    """Stop every state's gateways and the reward processes, and forget the states (the next
    workflow builds afresh). Registered with ``atexit``; call it when a rollout worker shuts down."""
    for state in _STATES.pop(lambda _key, _state: True):
        state.close(timeout_s)
    shutdown_pools()


_STATES: WorkerCache[WorkflowState] = WorkerCache(on_exit=close_workflow_states)


class AworldWorkflow(RolloutWorkflow):
    """Run the job's agent ``gconfig.n_samples`` times on a row and return the group's tensors.

    ``job``: the job config (JSON text, dict or file path). ``gconfig``: AReaL's generation
    settings (temperature, max_new_tokens, max_tokens for the context, ``n_samples``: the group
    size). ``tokenizer``: the tokenizer directory. ``turn_discount`` scales the reward by
    ``turn_discount ** (turns - 1)``. ``max_response_tokens`` caps the episode's response (sampled +
    tool tokens); ``None`` lets ``gconfig.max_tokens`` bound the context. ``reward_processes > 0``
    scores in that many processes (``reward_timeout_s`` each). ``reject_truncated`` does not train
    episodes cut by length. An agent written against the OpenAI API is the job's
    ``agent.openai_agent`` (see ``aworld_core.worker.openai_agent``), as on every backend.
    ``groups_per_step`` (set by ``train``: the train batch size) turns on ``rollout.max_failed_steps``.

    Instances are cheap handles: the state behind them is shared per process (see the module doc).
    """

    def __init__(self, job: str | dict[str, Any] | JobConfig, gconfig: Any, tokenizer: str | Any, **options: Any):
        if "openai_agent" in options:
            raise UsageError(OPENAI_AGENT_MOVED)
        unknown = sorted(set(options) - set(WorkflowOptions.__dataclass_fields__))
        if unknown:
            raise UsageError(f"unknown AworldWorkflow option(s) {unknown}; the options are "
                             f"{sorted(WorkflowOptions.__dataclass_fields__)}")
        self.state = workflow_state(job, gconfig, tokenizer, WorkflowOptions(**options))
        self._running: dict[int, asyncio.Task[Any] | None] = {}  # row id -> the call running its group

    def __getattr__(self, name: str) -> Any:
        """The shared state's attributes: ``accepted`` (members trained), ``rejected`` (members not
        trained, by reason), ``recent_rejections``, ``job``, ``tokenizer``, ... (process-wide)."""
        if name == "state":
            raise AttributeError(name)
        return getattr(self.state, name)

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any] | None:
        """The row's group: ``gconfig.n_samples`` rows of AReaL tensors, or ``None`` (dropped)."""
        if id(data) in self._running:  # GroupedRolloutWorkflow calls this instance n times with one row
            first = self._running[id(data)]
            if first is not None:
                first.cancel()  # the group that call started is not wanted either
            raise UsageError(WRAPPED)
        self._running[id(data)] = asyncio.current_task()
        try:
            return await self.state.run_group(engine, data)
        finally:
            self._running.pop(id(data), None)
