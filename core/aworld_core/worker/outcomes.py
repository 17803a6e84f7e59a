"""What became of each episode, counted once for every backend's worker.

Every backend worker answers the same questions after an episode or a group: why did this
member not train (:func:`outcome_reason`), in words (:func:`describe`, :func:`error_of`), one log
line per untrained member, per-process tallies by reason, and, where the worker sees a whole
training step, the all-failed stop (:class:`~aworld_core.worker.policy.FailedSteps`).
:class:`StepRecorder` does all of it; the framework adds only its own metrics channel.

The reasons are the kit's (:func:`~aworld_core.worker.policy.untrainable_reason`), refined for
counting: ``mcp_unreachable`` for an episode whose MCP server could not be reached, and the
reason a scorer wrote on a successful episode it refused (``metadata["untrained_reason"]``, e.g.
AReaL's ``truncated``). :data:`REASONS` lists the kit's names (metrics keys are built from them).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from aworld_core.errors import AworldError, UsageError
from aworld_core.schemas import Episode, EpisodeStatus
from aworld_core.worker.policy import (
    GROUP_DROPPED,
    NO_REWARD,
    NO_TOKENS,
    REWARD_FAILED,
    FailedSteps,
    error_of,
    untrainable_reason,
)

MCP_UNREACHABLE = "mcp_unreachable"
# metadata key a scorer sets on a successful episode it refuses to train (its reason's name)
UNTRAINED = "untrained_reason"
# every reason the kit counts under its own name (a backend may add its scorer's)
REASONS = ("failed", "timeout", "cancelled", NO_TOKENS, REWARD_FAILED, NO_REWARD, GROUP_DROPPED, MCP_UNREACHABLE)
# the latest untrained members a recorder keeps (reason, episode id, why), for debugging a run
RECENT = 32


def outcome_reason(episode: Episode, *, needs_reward: bool = True) -> str | None:
    """``untrainable_reason`` refined for counting (see the module docstring); ``None``: trains."""
    reason = untrainable_reason(episode, needs_reward=needs_reward)
    if reason is None or reason == GROUP_DROPPED:
        return reason
    if episode.metadata.get(UNTRAINED):
        return str(episode.metadata[UNTRAINED])
    if (episode.error or "").startswith("MCPConnectionError"):
        return MCP_UNREACHABLE
    return reason


def describe(episode: Episode, reason: str | None = None) -> str:
    """Why ``episode`` does not train, in words (for logs and for a framework's record)."""
    if episode.status is not EpisodeStatus.SUCCESS:
        return f"the episode {episode.status.value}: {episode.error}"
    if episode.reward_errors:
        return "its reward failed (" + "; ".join(f"{k}: {v}" for k, v in episode.reward_errors.items()) + ")"
    reason = reason if reason is not None else untrainable_reason(episode)
    if reason == GROUP_DROPPED:
        return f"its group was dropped: {episode.metadata.get(GROUP_DROPPED)}"
    return (reason or "trained").replace("_", " ")


def count_metrics(episodes: int, reasons: Mapping[str, int], prefix: str = "aworld/",
                  names: Sequence[str] = REASONS) -> dict[str, int]:
    """Counts under the kit's metric names: ``episodes``, ``trained`` and ``untrained/<reason>``
    for each of ``names`` (0 when none; a framework's stats may need every key every time) and
    any other reason in ``reasons``."""
    counts = {**dict.fromkeys(names, 0), **reasons}
    out = {f"{prefix}episodes": episodes, f"{prefix}trained": episodes - sum(counts.values())}
    out.update({f"{prefix}untrained/{k}": v for k, v in counts.items()})
    return out


class StepRecorder:
    """One worker's tallies of episode outcomes, the log line per untrained member, and the
    all-failed stop over the steps it sees.

    ``counts``: ``episodes``, ``trained`` and each reason (plus what a backend adds with
    :meth:`add`); ``untrained``: by reason only; ``recent``: the latest untrained members.
    ``groups_per_step``: the groups one training step holds (``None``: this worker does not see
    steps, the trainer counts them); after ``max_failed_steps`` consecutive steps with nothing
    trainable, :meth:`group` sets ``stopped`` to the kit's error (it does not raise: the backend
    decides how its framework stops). ``summary_every``: log the counts every N episodes.
    """

    def __init__(
        self,
        logger: logging.Logger | Any,
        *,
        max_failed_steps: int = 3,
        groups_per_step: int | None = None,
        needs_reward: bool = True,
        summary_every: int = 0,
        label: str = "aworld worker",
        setting: str = "rollout.max_failed_steps",
    ):
        if groups_per_step is not None and groups_per_step < 1:
            raise UsageError(f"groups_per_step must be >= 1, got {groups_per_step}")
        self.logger = logger
        self.groups_per_step = groups_per_step
        self.needs_reward = needs_reward
        self.summary_every = summary_every
        self.label = label
        self.counts: collections.Counter[str] = collections.Counter()
        self.untrained: collections.Counter[str] = collections.Counter()
        self.recent: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=RECENT)
        self.groups_dropped = 0
        self.failed_steps = FailedSteps(max_failed_steps, setting)
        self.stopped: AworldError | None = None
        self._step: list[Episode] = []
        self._step_groups = 0
        self._lock = threading.Lock()

    @property
    def trained(self) -> int:
        return self.counts["trained"]

    def add(self, key: str, n: int = 1) -> None:
        """Count something the backend sees (``truncated``, ...)."""
        with self._lock:
            self.counts[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def episode(self, episode: Episode, *, dropped: str | None = None, needs_reward: bool | None = None) -> str | None:
        """Count one finished episode (``dropped``: why its group was dropped; ``needs_reward``:
        whether it needs a reward of its own to train, default the recorder's); log why it does
        not train. Returns its reason (``None``: it trains)."""
        reason = outcome_reason(episode, needs_reward=self.needs_reward if needs_reward is None else needs_reward)
        detail = ""
        if reason is not None:
            detail = error_of(episode) or dropped or episode.status.value
        with self._lock:
            self.counts["episodes"] += 1
            self.counts["trained" if reason is None else reason] += 1
            if reason is not None:
                self.untrained[reason] += 1
                self.recent.append((reason, episode.id, detail))
            finished, counts = self.counts["episodes"], dict(self.counts)
        if reason is not None:
            log = self.logger.error if reason == MCP_UNREACHABLE else self.logger.warning
            log("episode %s (task %s) not trained, %s: %s", episode.id, episode.task_id, reason, detail)
        if self.summary_every > 0 and finished % self.summary_every == 0:
            self.logger.info("%s episodes: %s", self.label, ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        return reason

    def group(self, group: Any, *, step: bool = True) -> collections.Counter[str]:
        """Count a decided ``EpisodeGroup``'s members and the group; with ``groups_per_step`` and
        ``step`` (a training group, not an evaluation's), count it toward the current step.
        Returns the group's untrained members by reason."""
        reasons: collections.Counter[str] = collections.Counter()
        for episode in group.episodes:
            reason = self.episode(episode, dropped=group.dropped, needs_reward=group.needs_reward)
            if reason is not None:
                reasons[reason] += 1
        if group.dropped is not None:
            with self._lock:
                self.groups_dropped += 1
            self.logger.warning("group %s (task %s) dropped: %s", group.group_id, group.sample.id, group.dropped)
        if step and self.groups_per_step is not None:
            self._count_step(group.episodes)
        return reasons

    def _count_step(self, episodes: Sequence[Episode]) -> None:
        with self._lock:
            self._step.extend(episodes)
            self._step_groups += 1
            assert self.groups_per_step is not None
            if self._step_groups < self.groups_per_step:
                return
            done, self._step, self._step_groups = self._step, [], 0
        try:
            self.failed_steps.step(done, needs_reward=self.needs_reward)
        except AworldError as exc:
            self.stopped = exc
            self.logger.error("stopping this worker's rollouts: %s", exc)
