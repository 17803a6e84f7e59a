"""``AworldAgentLoop``: AWorld agents and swarms as a verl 0.9.1 agent loop, token-exact.

Users either subclass it and implement ``build_agents()`` (the seed's pattern), or name it in the
agent-loop YAML with the job config (``job_config_path``), and the core's ``build_agents`` hook
builds the agent. It is the worker kit (``aworld_core.worker``) inside verl's worker. Per sample,
``run()``:

1. joins the sample's GRPO group (verl's ``uid``) in this worker (the kit's ``Rendezvous``);
2. takes the task from ``raw_prompt`` (the whole prompt: system and user messages), the ground
   truth from ``reward_model`` and the rest of the row;
3. runs the episode with the kit's ``EpisodeRunner`` (failures recorded, never raised; scored
   with the job's reward) over a ``TokenLLM`` on verl's ``server_manager.generate``
   (``VerlTokenEngine``), verl's ``sampling_params`` (training or validation settings)
   overriding the trained agent's own; only trained agents use it, the others of a swarm call
   their own endpoints;
4. waits for its group, which the kit's group policy decides once (``rollout.failed_episodes``;
   ``group_decider``), counts the episode (the kit's ``StepRecorder``), then calls
   ``on_episode_end`` once;
5. returns the exact ``prompt_ids`` / ``response_ids`` / ``response_mask`` / ``response_logprobs``
   the session recorded, or, for a member that does not train, a fully masked placeholder in its
   group's place whose reward is neutral for the group (see docs/backend-verl.md).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from aworld_core import maybe_await
from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, RolloutContext, Sample, new_id
from aworld_core.worker import (
    EpisodeGroup,
    GroupPolicy,
    Member,
    OpenAIAgent,
    agent_from_ref,
    build_agent,
    check_agent,
    episode_segments,
    group_decider,
    load_job,
    outcome_record,
    pad_id_of,
    tool_parser_of,
)
from aworld_verl.groups import check_v0_group_size, expected_group_sizes, is_v1, warn_split
from aworld_verl.output import (
    placeholder_output,
    segment_refusal,
    training_output,
    warn_segmented_v0,
)
from aworld_verl.rows import plain, sample_from_row
from aworld_verl.sampling import sampling_from_verl
from aworld_verl.worker_state import WorkerState, worker_state

logger = logging.getLogger(__name__)

class AworldAgentLoop(AgentLoopBase):
    """Run an AWorld ``Agent`` or ``Swarm`` per verl sample and hand back its exact tokens.

    Keyword arguments (from the agent-loop YAML entry, all optional):

    * ``job_config_path``: the job config (JSON/YAML) the agent, reward, limits and group policy
      come from;
    * ``agent``: ``module:function`` returning the Agent/Swarm (instead of the job's agent);
    * ``reward``: a reward name or reference (instead of the job's reward); ``reward_in_loop``
      false leaves scoring to verl's reward manager (``aworld_verl.reward.compute_score``);
    * ``tool_parser``, ``chat_template``: how tool calls are parsed and prompts rendered
      (default: the job's model section, else verl's ``multi_turn.format`` and the tokenizer's);
    * ``episode_timeout_s``, ``max_steps``: episode limits (default: the job's ``rollout``
      section, else verl's ``multi_turn.max_assistant_turns`` and the agent's own);
    * ``failed_episodes``: ``keep_group_neutral`` or ``drop_group`` (default: the job's
      ``rollout.failed_episodes``).
    """

    def __init__(
        self,
        *args: Any,
        job_config_path: str | None = None,
        agent: str | None = None,
        reward: str | None = None,
        reward_in_loop: bool = True,
        tool_parser: str | None = None,
        chat_template: str | None = None,
        episode_timeout_s: float | None = None,
        max_steps: int | None = None,
        model_name: str | None = None,
        failed_episodes: str | None = None,
        **kwargs: Any,
    ):
        kwargs.pop("name", None)  # the YAML entry's own name, passed along by hydra
        super().__init__(*args, **kwargs)
        self.job = load_job(job_config_path, setting="job_config_path in the agent-loop YAML entry") if job_config_path else None
        self.agent_ref = agent
        self.base_dir = self.job.base_dir if self.job is not None else None
        self.reward = reward if reward is not None else (self.job.reward if self.job is not None else None)
        self.reward_in_loop = bool(reward_in_loop) and self.reward is not None
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.tool_parser = tool_parser_of(
            self.job, tool_parser, framework_format=str(self.rollout_config.multi_turn.get("format") or "hermes"),
            setting="'tool_parser' in the agent-loop YAML entry",
        )
        self.chat_template = chat_template
        self.episode_timeout_s = episode_timeout_s
        self.max_steps = max_steps
        if self.job is None and self.max_steps is None:
            self.max_steps = self.rollout_config.multi_turn.get("max_assistant_turns")
        self.policy = GroupPolicy.from_job(self.job, failed_episodes=failed_episodes)
        self._decide = group_decider(self.policy, self.reward_in_loop)
        self.model_name = model_name or _short_model_name(str(self.config.actor_rollout_ref.model.path))

    # -- what users override ------------------------------------------------------------------

    async def build_agents(self) -> Any:
        """The ``Agent`` or ``Swarm`` to run (called once per worker; agents hold no episode state).

        Default: ``agent=`` (an import reference) or the job's agent (the kit's ``build_agent``,
        once per process). Subclasses return their own; ``await self.get_llm_server_address()``
        and ``get_llm_server_model_name()`` give an OpenAI endpoint over this loop's policy.
        """
        if self.agent_ref:
            return agent_from_ref(self.agent_ref, self.base_dir)
        if self.job is not None:
            return build_agent(self.job)
        raise UsageError(
            f"{type(self).__name__} has no agent: subclass AworldAgentLoop and implement build_agents(), "
            f"or give 'job_config_path' (or 'agent: module:function') in the agent-loop YAML entry"
        )

    def task_from_row(self, row: dict[str, Any]) -> Sample:
        """The episode's task from verl's row (every dataset column, plus verl's own keywords)."""
        return sample_from_row(row)

    # -- the seed's endpoint helpers -----------------------------------------------------------

    async def get_llm_server_address(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:PORT/v1``) of the core gateway over this
        worker's policy: calls sent there are sampled by verl's rollout servers, token-exact."""
        server = await self._worker().gateway_server()
        return server.base_url

    async def get_llm_server_model_name(self) -> str:
        """The model name the gateway serves (the last two parts of the model path, as the seed)."""
        return self.model_name

    # -- the agent loop ----------------------------------------------------------------------------

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        state = self._worker()
        # join the group before the first await: membership closes one loop turn later
        uid = plain(kwargs.get("uid"))
        member = state.groups.join(None if uid is None else str(uid), self._decide)
        try:
            sample = await maybe_await(self.task_from_row(kwargs))
            runner = await self._runner(state)
            episode_id = new_id("ep-")
            state.engine.begin(episode_id, priority=int(plain(kwargs.get("priority", 0)) or 0))
            try:
                episode = await runner.run(sample, self._context(episode_id, member, sampling_params, kwargs),
                                           notify=False)
            finally:
                stats = state.engine.end(episode_id)
            group = await member.finish(episode, sample)
            await runner.notify(episode)  # once, after scoring and the group policy
            # until verl has this member's output, a cancellation still drops the group (leave)
            return self._outputs(state, episode, sample, group, member, stats, kwargs, sampling_params)
        except BaseException as exc:
            member.leave(exc)
            raise

    # -- internals ---------------------------------------------------------------------------------

    def _worker(self) -> WorkerState:
        return worker_state(
            self.server_manager,
            tokenizer=self.tokenizer,
            job=self.job,
            tool_parser=self.tool_parser,
            chat_template=self.chat_template,
            chat_template_kwargs=dict(self.apply_chat_template_kwargs or {}),
            max_prompt_tokens=self.prompt_length,
            max_response_tokens=self.response_length,
            model_name=self.model_name,
        )

    async def _runner(self, state: WorkerState) -> Any:
        """The kit's ``EpisodeRunner`` for this loop's configuration (its agent built once)."""
        key = (type(self), self.agent_ref, repr(self.reward), self.reward_in_loop, self.episode_timeout_s,
               self.max_steps, id(self.job))
        async with state.runner_lock:
            runner = state.runners.get(key)
            if runner is None:
                runner = state.runners[key] = await self._build_runner(state)
        return runner

    async def _build_runner(self, state: WorkerState) -> Any:
        from aworld_core.worker import EpisodeRunner

        agent = check_agent(await maybe_await(self.build_agents()), f"{type(self).__name__}.build_agents()")
        options: dict[str, Any] = {
            "reward": self.reward if self.reward_in_loop else None,
            "policy": self.policy,
            "concurrency": sys.maxsize,  # verl bounds the episodes in flight (its batch)
        }
        if self.episode_timeout_s is not None:
            options["timeout"] = self.episode_timeout_s
        if self.max_steps is not None:
            if isinstance(agent, OpenAIAgent):
                raise UsageError(
                    f"max_steps={self.max_steps} in the agent-loop YAML entry cannot limit agent.openai_agent "
                    f"{agent.ref!r} (the function runs its own loop): remove max_steps from the entry"
                )
            options["max_steps"] = self.max_steps
        if self.job is not None:
            return EpisodeRunner.from_job(self.job, state.llm, agent=agent, **options)
        return EpisodeRunner(agent, state.llm, base_dir=self.base_dir, **options)

    def _context(
        self, episode_id: str, member: Member, sampling_params: dict[str, Any], row: dict[str, Any]
    ) -> RolloutContext:
        extras = {key: plain(row[key]) for key in ("uid", "global_steps") if key in row}
        if "session_id" in row:
            extras["verl_session_id"] = plain(row["session_id"])
        return RolloutContext(
            episode_id=episode_id,
            group_id=member.group_id,
            group_index=member.index,
            sampling=sampling_from_verl(sampling_params),
            extras=extras,
        )

    def _outputs(
        self,
        state: WorkerState,
        episode: Episode,
        sample: Sample,
        group: EpisodeGroup,
        member: Member,
        stats: Any,
        row: dict[str, Any],
        sampling: dict[str, Any] | None = None,
    ) -> AgentLoopOutput | list[AgentLoopOutput]:
        v1 = is_v1(row)
        steps = plain(row.get("global_steps")) if v1 else None
        if v1 and plain(row["session_id"]) != member.index:
            warn_split(group.group_id)
        if not v1 and member.index == 0:
            check_v0_group_size(member.group.members, expected_group_sizes(self.rollout_config, sampling),
                                group.group_id)
        reason = state.outcomes.episode(episode, dropped=group.dropped, needs_reward=self.reward_in_loop)
        reward = group.neutral_rewards()[member.index]
        refusal = None if reason is not None else segment_refusal(
            episode, v1=v1, loss_agg_mode=self.config.actor_rollout_ref.actor.get("loss_agg_mode"))
        if refusal is not None:  # V0, several segments: its reward stays in the group, no token trains
            reason = refusal
            warn_segmented_v0(episode)
        facts = outcome_record(episode, needs_reward=self.reward_in_loop, neutral=reason is not None)
        if refusal is not None:
            facts["untrained"] = refusal
        if reason is not None:
            output = placeholder_output(
                episode, stats, facts, self._prompt_ids(state, sample), pad_id_of(self.tokenizer),
                reward=reward, reward_info=v1, global_steps=steps,
            )
            return [output] if v1 else output
        # one output per training segment, in order: the primary session's (more than one when its history
        # was rewritten or compacted), then those of trained agents called later (a swarm's trained members)
        views = episode_segments(episode)
        if any(v.truncated for v in views):
            state.outcomes.add("truncated")
        if not v1:
            return training_output(episode, views[0], stats, facts, response_length=self.response_length,
                                   reward=reward)
        last = len(views) - 1
        return [
            training_output(
                episode, view, stats, facts,
                response_length=self.response_length,
                reward=reward if i == last else None,
                primary=i == 0,
                session=i,
                reward_info=i == last,
                global_steps=steps,
            )
            for i, view in enumerate(views)
        ]

    def _prompt_ids(self, state: WorkerState, sample: Sample) -> list[int]:
        """The rendered task, for a placeholder's prompt (its template error was the episode's)."""
        try:
            return list(state.llm.renderer.prompt_ids(sample.prompt, None))[-self.prompt_length :]
        except Exception:
            return []


def _short_model_name(path: str) -> str:
    return "/".join(path.rstrip("/").split("/")[-2:])

