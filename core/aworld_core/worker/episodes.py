"""Running episodes and GRPO groups for a backend: always finished ``Episode``s, scored, notified once.

:class:`EpisodeRunner` is the one place where a backend's worker turns samples into episodes:

* the episode runs through the ``rollout`` hook with a typed
  :class:`~aworld_core.schemas.RolloutContext`;
* whatever goes wrong becomes a recorded failure, never an exception: an exception from the hook,
  a ``None`` or non-``Episode`` answer, an MCP server that is down, a timeout (a plugin that
  ignores its deadline is cut 5 s after it), a cancellation that is not the caller's. Only
  configuration errors (``UsageError``, which every episode would hit) and the caller's own
  cancellation propagate;
* the token session of an unsuccessful episode is dropped, so nothing it sampled can train;
* a successful episode is scored with the job's reward (``compute_reward``);
* groups get the :class:`~aworld_core.worker.policy.GroupPolicy`;
* ``on_episode_end`` is called exactly once per episode, after scoring and the group policy.

Concurrency: every coroutine runs on the caller's event loop; ``concurrency`` bounds the episodes
in flight per runner (a group's members count one each).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_core.aio import maybe_await
from aworld_core.errors import EpisodeInputError, UsageError
from aworld_core.schemas import Episode, EpisodeStatus, RolloutContext, Sample, SamplingParams, new_id
from aworld_core.worker.policy import GROUP_DROPPED, GroupPolicy, untrainable_reason

logger = logging.getLogger(__name__)

# a rollout plugin that overruns its own deadline by this much is cut by the runner
DEADLINE_GRACE_S = 5.0

Scorer = Callable[[Episode, Sample], Awaitable[Any]]


@dataclass
class EpisodeGroup:
    """The members of one GRPO group (one prompt, ``n`` episodes), after the group policy.

    ``dropped`` says why no member trains (``None``: the members that ran train).
    ``needs_reward`` false: members train without a reward of their own (the framework scores
    them later, e.g. verl's reward manager).
    """

    group_id: str
    sample: Sample
    episodes: list[Episode]
    dropped: str | None = None
    policy: GroupPolicy = field(default_factory=GroupPolicy)
    needs_reward: bool = True

    def __len__(self) -> int:
        return len(self.episodes)

    def trained(self) -> list[bool]:
        """Per member: does it train a token."""
        return [untrainable_reason(e, needs_reward=self.needs_reward) is None for e in self.episodes]

    @property
    def failed(self) -> int:
        return sum(1 for t in self.trained() if not t)

    def rewards(self, neutral: str = "mean") -> list[float | None]:
        """Each member's reward for the framework's group statistics.

        A member that does not train gets the *neutral* value: ``"mean"`` (the mean reward of the
        members that train: advantage 0, the group's mean unchanged) or ``"none"`` (``None``, for
        frameworks that skip missing values, e.g. TRL's NaN-aware group statistics). A dropped
        group answers ``None`` for every member with ``"none"`` and 0.0 with ``"mean"``.
        """
        if neutral not in ("mean", "none"):
            raise UsageError(f"neutral must be 'mean' or 'none', got {neutral!r}")
        trained = self.trained()
        kept = [float(e.reward) for e, t in zip(self.episodes, trained, strict=True) if t and e.reward is not None]
        fill: float | None = None
        if neutral == "mean":
            fill = sum(kept) / len(kept) if kept else 0.0
        return [float(e.reward) if t and e.reward is not None else fill for e, t in zip(self.episodes, trained, strict=True)]

    def neutral_rewards(self) -> list[float | None]:
        """Each member's reward for a framework that normalizes over every member it is given
        (placeholders included): a trained member's own reward (``None`` when the framework scores
        it: ``needs_reward`` false), an untrained member's neutral value (the mean reward of the
        members that train; 0.0 for every member of a dropped group, or without scoring here)."""
        if not self.needs_reward:
            return [None if t else 0.0 for t in self.trained()]
        return [float(r) if r is not None else 0.0 for r in self.rewards("mean")]


async def notify_episode_end(episode: Episode, manager: Any = None) -> list[str]:
    """Call ``on_episode_end`` of every plugin once. An observer that fails is logged and recorded
    on the episode (``metadata["on_episode_end_errors"]``) and returned; it does not stop training
    or the other observers."""
    if manager is None:
        from aworld_core.plugins import get_plugin_manager

        manager = get_plugin_manager()
    errors: list[str] = []
    # each observer on its own: pluggy's hook call stops at the first one that raises
    for impl in reversed(manager.hook.on_episode_end.get_hookimpls()):
        try:
            await maybe_await(impl.function(episode=episode))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            logger.error("on_episode_end of plugin %s failed for episode %s: %s", impl.plugin_name, episode.id,
                         errors[-1])
    if errors:
        episode.metadata.setdefault("on_episode_end_errors", []).extend(errors)
    return errors


def apply_group_policy(
    group_id: str, sample: Sample, episodes: list[Episode], policy: GroupPolicy, *, needs_reward: bool = True
) -> EpisodeGroup:
    """Decide what the group trains under ``policy``; records ``group_id`` / ``group_dropped`` on
    each member's metadata. ``needs_reward`` false: a member without a reward still trains (the
    framework scores it later)."""
    reasons = [untrainable_reason(e, needs_reward=needs_reward) for e in episodes]
    failed = [r for r in reasons if r is not None]
    dropped: str | None = None
    if episodes and len(failed) == len(episodes):
        dropped = f"every member failed ({', '.join(sorted(set(failed)))})"
    elif failed and policy.failed_episodes == "drop_group":
        dropped = f"{len(failed)} of {len(episodes)} members failed ({', '.join(sorted(set(failed)))}); drop_group"
    for index, episode in enumerate(episodes):
        episode.metadata.setdefault("group_id", group_id)
        episode.metadata.setdefault("group_index", index)
        if dropped is not None:
            episode.metadata[GROUP_DROPPED] = dropped
    return EpisodeGroup(group_id, sample, episodes, dropped, policy, needs_reward)


class EpisodeRunner:
    """Runs samples as episodes (or groups) for one agent and one LLM client.

    ``agent``: the ``Agent``/``Swarm`` (see ``build_agent``); ``llm``: the client the trained
    agent uses (a ``TokenLLM``; ``None``: the agents' own endpoints). ``reward``: the job's
    reward section(s) or name (``None``: not scored here). ``scorer``: replaces the built-in
    scoring with ``await scorer(episode, sample)`` (e.g. a process pool); it must not call
    ``on_episode_end``. ``timeout`` / ``max_steps`` fill contexts that leave them unset;
    ``sampling`` (the job's ``rollout.sampling``) lies under each context's own sampling.
    """

    def __init__(
        self,
        agent: Any,
        llm: Any = None,
        *,
        reward: Any = None,
        base_dir: str | None = None,
        policy: GroupPolicy | None = None,
        timeout: float | None = None,
        max_steps: int | None = None,
        concurrency: int = 8,
        manager: Any = None,
        stats: Any = None,
        scorer: Scorer | None = None,
        sampling: SamplingParams | None = None,
    ):
        from aworld_core.plugins import get_plugin_manager

        if concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {concurrency}")
        self.agent = agent
        self.llm = llm
        self.reward = reward
        self.base_dir = base_dir
        self.policy = policy or GroupPolicy()
        self.timeout = timeout
        self.max_steps = max_steps
        self.concurrency = concurrency
        self.manager = manager or get_plugin_manager()
        self.stats = stats
        self.scorer = scorer
        self.sampling = sampling
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    @classmethod
    def from_job(cls, job: Any, llm: Any = None, *, agent: Any = None, **kwargs: Any) -> EpisodeRunner:
        """A runner with the job's agent, reward, limits and group policy (``kwargs`` override).

        ``rollout.sampling`` is the trained agents' sampling under whatever a context gives (a
        backend that maps it onto its own keys passes the same values; one that passes none gets
        the job's). ``rollout.max_turns`` replaces the agents' ``max_steps`` only when the job sets it;
        otherwise each agent keeps its own. The episode timeout is ``rollout.episode_timeout_s``
        when set, else the (lead) agent's ``episode_timeout_s``, else 600 s
        (``RolloutSection.timeout_for``).
        """
        from aworld_core.worker.build import build_agent

        agent = agent if agent is not None else build_agent(job)
        rollout = job.rollout
        options: dict[str, Any] = {
            "reward": job.reward,
            "base_dir": job.base_dir,
            "policy": GroupPolicy.from_job(job),
            "timeout": rollout.timeout_for(agent),
            "max_steps": rollout.max_turns,
            "concurrency": job.rollout.concurrency,
            "sampling": rollout.sampling.params(),
        }
        options.update(kwargs)
        return cls(agent, llm, **options)

    @property
    def scores(self) -> bool:
        """Whether this runner scores episodes (a runner without a reward leaves that to the
        framework, so a missing reward does not make a member untrainable)."""
        return self.reward is not None or self.scorer is not None

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(id(loop))
        if semaphore is None:
            semaphore = self._semaphores[id(loop)] = asyncio.Semaphore(self.concurrency)
        return semaphore

    # -- one episode ----------------------------------------------------------------------------

    async def run(
        self, sample: Sample, context: RolloutContext | dict[str, Any] | None = None, *, notify: bool = True
    ) -> Episode:
        """One finished, scored episode (see the module docstring for what becomes a failure)."""
        ctx = self._context(sample, context)
        async with self._semaphore():
            episode = await self._rollout(sample, ctx)
        if self.scores:
            await self.score(episode, sample)  # a failed episode is counted as skipped, never scored
        if notify:
            await self.notify(episode)
        return episode

    def _context(self, sample: Sample, context: RolloutContext | dict[str, Any] | None) -> RolloutContext:
        ctx = RolloutContext.of(context)
        update: dict[str, Any] = {}
        if ctx.episode_id is None:
            update["episode_id"] = new_id("ep-")
        if ctx.task_id is None:
            update["task_id"] = sample.id
        if ctx.timeout is None and self.timeout is not None:
            update["timeout"] = self.timeout
        if ctx.max_steps is None and self.max_steps is not None:
            update["max_steps"] = self.max_steps
        if self.sampling is not None:  # the context's own settings win (e.g. greedy evaluation)
            update["sampling"] = self.sampling.merged(ctx.sampling)
        return ctx.model_copy(update=update) if update else ctx

    async def _rollout(self, sample: Sample, ctx: RolloutContext) -> Episode:
        episode_id = ctx.episode_id
        assert episode_id is not None
        deadline = asyncio.timeout(ctx.timeout + DEADLINE_GRACE_S if ctx.timeout else None)
        try:
            async with deadline:
                answer = await maybe_await(
                    self.manager.hook.rollout(agent=self.agent, sample=sample, llm=self.llm, context=ctx)
                )
        except EpisodeInputError as exc:  # this episode's data, not the configuration
            return self.failed(sample, ctx, EpisodeStatus.FAILED, f"{type(exc).__name__}: {exc}")
        except UsageError:
            self._drop_sessions(episode_id)
            raise
        except asyncio.CancelledError as cancelled:
            task = asyncio.current_task()
            self._drop_sessions(episode_id)
            if task is not None and task.cancelling():
                raise  # the caller's cancellation
            partial = getattr(cancelled, "episode", None)
            episode = partial if isinstance(partial, Episode) else self.failed(sample, ctx, EpisodeStatus.CANCELLED,
                                                                               "the episode was cancelled")
            return episode
        except TimeoutError:
            if not deadline.expired():
                return self.failed(sample, ctx, EpisodeStatus.FAILED, "TimeoutError raised by the rollout")
            return self.failed(
                sample, ctx, EpisodeStatus.TIMEOUT,
                f"the rollout did not finish within its {ctx.timeout:g} s timeout (+{DEADLINE_GRACE_S:g} s grace)",
            )
        except Exception as exc:  # an MCP server that is down, a plugin that raised: recorded
            logger.warning("episode %s raised %s: %s", episode_id, type(exc).__name__, exc)
            return self.failed(sample, ctx, EpisodeStatus.FAILED, f"{type(exc).__name__}: {exc}")
        if answer is None:
            return self.failed(sample, ctx, EpisodeStatus.FAILED,
                                "no plugin answered the rollout hook (is aworld-core's built-in plugin disabled?)")
        if not isinstance(answer, Episode):
            return self.failed(sample, ctx, EpisodeStatus.FAILED,
                                f"the rollout hook returned {type(answer).__name__}, expected an Episode")
        if answer.status is EpisodeStatus.RUNNING:
            answer.finish(EpisodeStatus.FAILED, "the rollout hook returned an episode that is still running")
        if answer.status is EpisodeStatus.SUCCESS and answer.training is None:
            # a rollout plugin that drove the token client without finishing its session
            finish = getattr(self.llm, "finish_session", None)
            if finish is not None and getattr(self.llm, "session", lambda _id: None)(answer.id) is not None:
                answer.training = await maybe_await(finish(answer.id))
        # whoever collected the views (the runtime pops its sessions' failures itself), calls the
        # gateway failed in this episode's sessions and nobody consumed (a plugin that drove the
        # gateway over HTTP, the seed's style, and swallowed a 502) fail it: the gateway's one rule
        from aworld_core.gateway.failures import episode_failures, settle_episode

        settle_episode(answer, [episode_failures(self.llm, answer.id)])
        if answer.status is not EpisodeStatus.SUCCESS:
            answer.training = None
            self._drop_sessions(answer.id)
        for key, value in ctx.episode_metadata().items():
            answer.metadata.setdefault(key, value)
        return answer

    def failed(self, sample: Sample, ctx: RolloutContext, status: EpisodeStatus, error: str) -> Episode:
        """A finished episode that failed with ``error`` (for a backend that ends one outside
        :meth:`run`): the token sessions of ``ctx.episode_id`` dropped, nothing trains."""
        self._drop_sessions(ctx.episode_id or "")
        episode = Episode(
            id=ctx.episode_id or new_id("ep-"),
            task_id=ctx.task_id or sample.id,
            agent_id=getattr(self.agent, "name", "agent"),
            metadata=ctx.episode_metadata(),
        )
        episode.finish(status, error)
        return episode

    def _drop_sessions(self, episode_id: str) -> None:
        """Drop what the token client recorded for this episode (its sessions ``id`` and ``id:k``)
        and what the gateways over it recorded of its failed calls (the episode failed anyway)."""
        finish = getattr(self.llm, "finish_session", None)
        if finish is None or not episode_id:
            return
        ids = getattr(self.llm, "session_ids", None)
        names = [episode_id]
        if callable(ids):
            names = [s for s in ids() if s == episode_id or s.startswith(f"{episode_id}:")] or names
        for name in names:
            try:
                finish(name)
            except Exception as exc:  # dropping must not hide the episode's own outcome
                logger.warning("dropping token session %s failed: %s", name, exc)
        from aworld_core.gateway.failures import episode_failures

        episode_failures(self.llm, episode_id)  # forgotten: the episode failed anyway

    async def score(self, episode: Episode, sample: Sample) -> Episode:
        """Score in place (only a successful episode gets a reward); never notifies."""
        if self.scorer is not None:
            await self.scorer(episode, sample)
            return episode
        from aworld_core.rewards.registry import score_episode

        await score_episode(episode, sample, self.reward, base_dir=self.base_dir, stats=self.stats,
                            plugin_manager=self.manager, notify=False)
        return episode

    async def notify(self, episode: Episode) -> list[str]:
        """``on_episode_end`` for every plugin (see :func:`notify_episode_end`)."""
        return await notify_episode_end(episode, self.manager)

    # -- groups and batches ---------------------------------------------------------------------

    async def run_group(
        self, sample: Sample, n: int, context: RolloutContext | dict[str, Any] | None = None
    ) -> EpisodeGroup:
        """``n`` episodes of ``sample`` (one GRPO group) under the group policy, notified once each."""
        if n < 1:
            raise UsageError(f"a group needs at least 1 member, got n={n}")
        base = RolloutContext.of(context)
        group_id = base.group_id or new_id("grp-")
        contexts = [
            base.model_copy(update={"group_id": group_id, "group_index": i, "episode_id": None if n > 1 else base.episode_id})
            for i in range(n)
        ]
        episodes = await _gather_or_cancel([self.run(sample, c, notify=False) for c in contexts])
        group = apply_group_policy(group_id, sample, episodes, self.policy, needs_reward=self.scores)
        for episode in episodes:
            await self.notify(episode)
        return group

    async def run_groups(
        self, samples: Sequence[Sample], n: int, context: RolloutContext | dict[str, Any] | None = None
    ) -> list[EpisodeGroup]:
        """One group of ``n`` per sample, concurrently (at most ``concurrency`` episodes at once).
        Each group gets its own group and episode ids: ids in ``context`` are refused here."""
        base = RolloutContext.of(context)
        if base.group_id is not None or base.episode_id is not None:
            raise UsageError("run_groups gives every group its own ids; leave group_id and episode_id unset "
                             "(use run_group for one group with a chosen id)")
        return await _gather_or_cancel([self.run_group(s, n, base) for s in samples])

    async def run_batch(
        self,
        samples: Sequence[Sample],
        *,
        group_size: int = 1,
        sampling: SamplingParams | None = None,
        extras: dict[str, Any] | None = None,
        tag: str | None = None,
    ) -> list[EpisodeGroup]:
        """Episodes for a batch whose rows a framework already repeated ``group_size`` times in a
        row (TRL, ms-swift): one episode per row, grouped by consecutive ``group_size`` rows."""
        if group_size < 1 or len(samples) % group_size:
            raise UsageError(
                f"a batch of {len(samples)} rows cannot be split into groups of {group_size}; the framework's "
                f"batch must hold whole groups"
            )
        batch = tag or new_id("")[:8]
        groups: list[tuple[str, Sample]] = []
        runs = []
        for start in range(0, len(samples), group_size):
            group_id = f"grp-{batch}-{start // group_size}"
            groups.append((group_id, samples[start]))
            for i in range(group_size):
                context = RolloutContext(episode_id=f"ep-{batch}-{start + i}", group_id=group_id, group_index=i,
                                         sampling=sampling, extras=dict(extras or {}))
                runs.append(self.run(samples[start + i], context, notify=False))
        episodes = await _gather_or_cancel(runs)
        out = []
        for index, (group_id, sample) in enumerate(groups):
            members = episodes[index * group_size:(index + 1) * group_size]
            out.append(apply_group_policy(group_id, sample, members, self.policy, needs_reward=self.scores))
        for episode in episodes:
            await self.notify(episode)
        return out


async def _gather_or_cancel(coros: list[Awaitable[Any]]) -> list[Any]:
    """``gather`` that cancels the rest when one raises (a ``UsageError``: every episode would)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
