"""The failure policy, once for every backend: which episodes train, what a failed member does to
its group, and when a run that only fails stops.

An episode trains only when it succeeded, sampled at least one token and has a reward
(:func:`untrainable_reason` says why not otherwise). A failed member never trains a token, and a
GRPO group is never silently shrunk, because frameworks normalize advantages per group by a fixed
stride or count (AReaL slices by ``group_size``; verl and TRL by the group's members):

* ``keep_group_neutral`` (default): the group keeps its size; failed members are masked (no
  token trained) and are *neutral*: their reward is the mean of the members that ran (or NaN /
  ``None`` where the framework skips missing values, as TRL does), so their advantage is 0 and
  the group's baseline comes from the members that ran. A group in which every member failed is
  dropped. The mean fill keeps the group's mean exactly but not its standard deviation: where a
  framework also divides by the std (GRPO's default), the survivors' advantages are scaled by
  about sqrt((n-1)/(k-1)) for k of n members run (x1.08 for one failure in 8). Frameworks that
  skip missing values (``None``) have no such effect; ``drop_group`` avoids it everywhere.
* ``drop_group``: a group with any failed member is not trained at all (AReaL: rejected whole;
  TRL / verl: every member masked).

``max_failed_steps``: after that many consecutive training steps in which no episode was
trainable, the run stops with the first error (:class:`FailedSteps`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aworld_core.errors import AworldError
from aworld_core.schemas import Episode, EpisodeStatus

FailedEpisodes = Literal["drop_group", "keep_group_neutral"]

# why an episode does not train (metrics and logs count these names)
FAILED = "failed"  # FAILED / TIMEOUT / CANCELLED: the status value is used
NO_TOKENS = "no_sampled_tokens"
REWARD_FAILED = "reward_failed"
NO_REWARD = "no_reward"
GROUP_DROPPED = "group_dropped"


@dataclass(frozen=True)
class GroupPolicy:
    """What failed episodes do to their group, and how many all-failed steps a run survives."""

    failed_episodes: FailedEpisodes = "keep_group_neutral"
    max_failed_steps: int = 3

    def __post_init__(self) -> None:
        if self.failed_episodes not in ("drop_group", "keep_group_neutral"):
            raise AworldError(
                f"failed_episodes must be 'drop_group' or 'keep_group_neutral', got {self.failed_episodes!r}"
            )
        if self.max_failed_steps < 1:
            raise AworldError(f"max_failed_steps must be >= 1, got {self.max_failed_steps}")

    @classmethod
    def from_job(cls, job: Any, *, failed_episodes: str | None = None) -> GroupPolicy:
        """The policy a job's ``rollout`` section sets (``None``: the defaults); ``failed_episodes``
        overrides the job's (a framework-side option)."""
        policy = cls() if job is None else cls(job.rollout.failed_episodes, job.rollout.max_failed_steps)
        if failed_episodes is None:
            return policy
        return cls(failed_episodes, policy.max_failed_steps)  # type: ignore[arg-type]


def untrainable_reason(episode: Episode, *, needs_reward: bool = True) -> str | None:
    """Why ``episode`` must not train (a status value, ``no_sampled_tokens``, ``reward_failed``,
    ``no_reward``, ``group_dropped``), or ``None`` when it trains."""
    if episode.status is not EpisodeStatus.SUCCESS:
        return episode.status.value
    view = episode.training
    if view is None or not view.total_sampled_tokens:
        return NO_TOKENS
    if episode.reward_errors:
        return REWARD_FAILED
    if needs_reward and episode.reward is None:
        return NO_REWARD
    if episode.metadata.get(GROUP_DROPPED):
        return GROUP_DROPPED
    return None


def is_trainable(episode: Episode, *, needs_reward: bool = True) -> bool:
    return untrainable_reason(episode, needs_reward=needs_reward) is None


def error_of(episode: Episode) -> str | None:
    """The episode's recorded error, else its reward errors (``reward <name>: <why>; ...``)."""
    if episode.error:
        return episode.error
    return "; ".join(f"reward {k}: {v}" for k, v in episode.reward_errors.items()) or None


def first_error(episodes: Sequence[Episode]) -> str:
    """The first recorded cause among ``episodes`` (an error, a reward error, or a reason)."""
    for episode in episodes:
        error = error_of(episode)
        if error:
            return f"episode {episode.id}: {error}"
    for episode in episodes:
        reason = untrainable_reason(episode)
        if reason is not None:
            return f"episode {episode.id}: {reason}"
    return "no episode produced trainable tokens"


# what every all-failed stop says (an error that crosses a process boundary as text is found by it)
STOP_PHRASE = "consecutive training steps, so nothing can be learned"


def stop_error_in(text: str) -> AworldError | None:
    """The kit's all-failed stop carried in ``text`` (a framework passed the error on as text,
    e.g. over RPC), as an ``AworldError`` holding the kit's message; ``None`` when there is none."""
    if STOP_PHRASE not in text:
        return None
    start = text.find("every episode failed in")
    return AworldError(text[start:] if start >= 0 else text)


class FailedSteps:
    """Counts consecutive steps with no trainable episode; raises after ``limit`` of them.

    ``setting`` names the knob in the error message (e.g. ``rollout.max_failed_steps``).
    """

    def __init__(self, limit: int, setting: str = "rollout.max_failed_steps"):
        if limit < 1:
            raise AworldError(f"max_failed_steps must be >= 1, got {limit}")
        self.limit = limit
        self.setting = setting
        self.consecutive = 0

    def step(self, episodes: Sequence[Episode], *, needs_reward: bool = True) -> None:
        trained = sum(1 for e in episodes if is_trainable(e, needs_reward=needs_reward))
        self.record(trained, lambda: first_error(episodes))

    def record(self, trained: int, error: str | Callable[[], str]) -> None:
        """``step`` for a backend that sees a step's counts but not its episodes (verl's trainer
        reads what its workers stored): ``trained`` episodes trained, ``error`` the first cause
        (text, or a function giving it)."""
        if trained:
            self.consecutive = 0
            return
        self.consecutive += 1
        if self.consecutive >= self.limit:
            cause = error() if callable(error) else error
            raise AworldError(
                f"every episode failed in {self.consecutive} {STOP_PHRASE}; first error: {cause}. Fix the cause "
                f"(is the tool environment running?), or raise {self.setting}"
            )


def step_metrics(episodes: Sequence[Episode], prefix: str = "aworld/", *, needs_reward: bool = True) -> dict[str, float]:
    """Per-step episode counts and rates every backend logs (failures by reason included).
    ``needs_reward`` false: an episode without a reward of its own counts as trained (the
    framework scores it later)."""
    n = len(episodes) or 1
    reasons: dict[str, int] = {}
    for episode in episodes:
        reason = untrainable_reason(episode, needs_reward=needs_reward)
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
    failed = sum(1 for e in episodes if e.status is not EpisodeStatus.SUCCESS)
    reward_failed = sum(1 for e in episodes if e.status is EpisodeStatus.SUCCESS and e.reward_errors)
    with_calls = sum(1 for e in episodes if any(s.exp_data.actions for s in e.steps))
    results = [r for e in episodes for s in e.steps for r in s.exp_data.state.action_result]
    trained = [e for e in episodes if is_trainable(e, needs_reward=needs_reward)]
    sampled = [e.training.total_sampled_tokens for e in trained if e.training is not None]
    segmented = [e for e in trained if e.training is not None and e.training.num_segments > 1]
    out = {
        f"{prefix}episodes": float(len(episodes)),
        f"{prefix}trained_rate": len(trained) / n,
        f"{prefix}failed_rate": failed / n,
        f"{prefix}reward_failed_rate": reward_failed / n,
        f"{prefix}tool_call_rate": with_calls / n,
        f"{prefix}tool_error_rate": (sum(1 for r in results if r.is_error) / len(results)) if results else 0.0,
        f"{prefix}turns": sum(len(e.steps) for e in episodes) / n,
        f"{prefix}sampled_tokens": (sum(sampled) / len(sampled)) if sampled else 0.0,
        # trained episodes of several segments (rewritten or compacted history) and their segments
        f"{prefix}segmented_rate": len(segmented) / n,
        f"{prefix}segments": (sum(e.training.num_segments for e in trained if e.training) / len(trained))
        if trained else 0.0,
    }
    for reason, count in reasons.items():
        out[f"{prefix}untrained/{reason}"] = float(count)
    return out
