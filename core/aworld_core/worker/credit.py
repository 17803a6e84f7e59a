"""Segmented episodes in a batch: which rows an episode becomes, the credit each row gets, and how
the loss is normalized. One rule, written once; every backend follows it.

An episode's training data is an ordered list of token-exact segments
(:meth:`~aworld_core.schemas.TrainingView.segments`; a Swarm's other trained agents add theirs,
:func:`episode_segments`). A segment is trained on its own: its prompt ids are exactly what the
engine saw before its first sampled token, so it is **one row** of the batch (prompt mask 0,
sampled tokens mask 1 with their logprobs and versions, tool/template tokens mask 0). Gluing two
segments into one row would condition the second on tokens the policy never saw with it.

**Credit.** The backend's estimator (GRPO's group normalization, REINFORCE's baseline, ...) sees
one reward per *episode*: the group statistics count episodes, never segments, so an episode
split in five weighs as much in its group's baseline as one that was not. Every segment of an
episode gets the episode's advantage ``A``. When the reward function gives per-segment rewards
(:func:`set_segment_rewards`), segment ``s`` is credited with its own reward ``r_s`` in place of
the episode's ``r``, under the same baseline and scale::

    A_s = A + (r_s - r) / scale       # scale: what the estimator divides by (GRPO: std + eps; else 1)

which is ``(r_s - baseline) / scale`` for any estimator of the form ``(r - baseline) / scale``.

**Loss normalization.** The policy loss is the mean over the *sampled tokens of the whole batch*
(every row's mask-1 tokens): ``sum(loss_t) / count(sampled tokens)``. Splitting an episode into
segments then changes nothing: each sampled token weighs the same as it would in one row. A
per-sequence mean (a row's tokens averaged, then rows averaged) would weigh an episode by its
number of segments; backends refuse it for multi-segment batches (:func:`check_token_mean`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, TrainingSegment, TrainingView


def _views(episode: Episode) -> list[TrainingView]:
    """The episode's trained sessions in the order they ran: the primary, then a Swarm's other
    trained agents (``metadata["extra_training"]``)."""
    if episode.training is None:
        return []
    views = [episode.training]
    for extra in episode.metadata.get("extra_training") or []:
        views.append(extra if isinstance(extra, TrainingView) else TrainingView.model_validate(extra))
    return views


def episode_segments(episode: Episode) -> list[TrainingSegment]:
    """Every segment the episode trains, in order: the primary session's segments, then those of
    a Swarm's other trained agents. Empty when the episode has no training view."""
    return [segment for view in _views(episode) for segment in view.segments()]


def has_segment_rewards(episode: Episode) -> bool:
    """Whether the reward function gave any segment a reward of its own."""
    return any(s.reward is not None for s in episode_segments(episode))


def set_segment_rewards(episode: Episode, rewards: Sequence[float | None]) -> None:
    """Per-segment rewards, in :func:`episode_segments` order (``None``: the episode's reward).

    For a trajectory-aware reward function (``(episode, sample)``): it returns the episode's
    reward as always and may call this first to credit segments differently (e.g. a compaction
    segment scored on what its summary kept). The values travel with the training view (they are
    stored on the segments), so a reward run in a process pool gives them back too.
    """
    views = _views(episode)
    segments = [s for v in views for s in v.segments()]
    if len(rewards) != len(segments):
        raise UsageError(
            f"episode {episode.id} has {len(segments)} training segments but the reward gave {len(rewards)} "
            "segment rewards; give one per segment (None keeps the episode's reward)"
        )
    values = iter(rewards)
    updated = []
    for view in views:
        new = []
        for segment in view.segments():
            value = next(values)
            new.append(segment.model_copy(update={"reward": None if value is None else float(value)}))
        updated.append(TrainingView.of_segments(new).model_copy(
            update={"history_rewritten": view.history_rewritten or len(new) > 1}))
    episode.training = updated[0]
    if len(updated) > 1:
        episode.metadata["extra_training"] = [v.model_dump() for v in updated[1:]]


def segment_rewards(episode: Episode, reward: float | None = None) -> list[float | None]:
    """The reward each segment is credited with: its own when the reward function gave one, else
    ``reward`` (default: the episode's)."""
    base = episode.reward if reward is None else reward
    return [base if s.reward is None else s.reward for s in episode_segments(episode)]


def segment_advantages(
    episode: Episode, advantage: float, *, reward: float | None = None, scale: float = 1.0
) -> list[float]:
    """Each segment's advantage: ``advantage`` (the episode's, from the backend's estimator), moved
    by ``(r_s - r) / scale`` for a segment with a reward of its own (see the module docstring).
    ``reward``: the episode reward the estimator used (default ``episode.reward``)."""
    segments = episode_segments(episode)
    if not any(s.reward is not None for s in segments):
        return [float(advantage)] * len(segments)
    base = episode.reward if reward is None else reward
    if base is None:
        raise UsageError(f"episode {episode.id} has segment rewards but no episode reward to credit them against")
    if scale <= 0:
        raise UsageError(f"the advantage scale must be > 0, got {scale}")
    return [float(advantage) + (0.0 if s.reward is None else (s.reward - base) / scale) for s in segments]


@dataclass(frozen=True)
class SegmentRow:
    """One row of a batch: a segment, the episode it belongs to (its index in the batch's
    episode list) and its place in that episode."""

    segment: TrainingSegment
    episode: int
    index: int  # the segment's position in its episode (0: the first)
    advantage: float | None = None


def segment_rows(
    episodes: Sequence[Episode], advantages: Sequence[float] | None = None, *, scales: Sequence[float] | float = 1.0
) -> list[SegmentRow]:
    """The rows of ``episodes`` (each trained: it has a training view): one per segment, episode
    by episode, each with its credited advantage when ``advantages`` (one per episode) is given."""
    if advantages is not None and len(advantages) != len(episodes):
        raise UsageError(f"{len(advantages)} advantages for {len(episodes)} episodes")
    scale_list = [float(scales)] * len(episodes) if isinstance(scales, (int, float)) else list(scales)
    rows = []
    for e, episode in enumerate(episodes):
        segments = episode_segments(episode)
        if not segments:
            raise UsageError(f"episode {episode.id} has no training view; only trained episodes become rows")
        credits = (
            [None] * len(segments)
            if advantages is None
            else segment_advantages(episode, advantages[e], scale=scale_list[e])
        )
        rows.extend(SegmentRow(s, e, i, a) for i, (s, a) in enumerate(zip(segments, credits, strict=True)))
    return rows


def check_token_mean(aggregation: str, *, token_mean: Sequence[str], multi_segment: bool, setting: str) -> None:
    """Refuse a per-sequence loss aggregation for a batch holding a multi-segment episode (it would
    weigh the episode by its number of segments): ``aggregation`` is the backend's setting,
    ``token_mean`` the values that normalize over the batch's sampled tokens, ``setting`` its name."""
    if multi_segment and aggregation not in token_mean:
        raise UsageError(
            f"{setting}={aggregation!r} averages each row before averaging rows, so an episode split into "
            f"several segments (a rewritten history, a context compaction) would weigh as many times as it "
            f"has segments; set {setting} to one of {list(token_mean)} (the mean over the batch's sampled "
            "tokens, aworld's rule for segmented episodes)"
        )
