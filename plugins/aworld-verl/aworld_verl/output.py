"""An episode as verl's ``AgentLoopOutput``: exact ids, mask, logprobs, metrics and extra fields.

The token sequences come straight from the ``TokenLLM`` session (``episode.training``): what the
engine sampled (mask 1, with its logprobs) and what the chat template rendered for tool and
environment messages (mask 0). Nothing is re-tokenized here; ids, mask and logprobs are cut at
``response_length`` together.

An episode is one output per training segment (``aworld_core.worker.credit``): its segments in
order (a rewritten or compacted history starts a new one; a Swarm's other trained agents add
theirs), the reward on the last. That is verl V1's list output: V1 computes GRPO from each
session's final output and broadcasts its advantage to the session's other outputs, which is the
core's credit rule. V0 takes one output per sample, so an episode of several segments cannot
train there: it keeps its group place as a masked row with its reward (:func:`segment_refusal`).

A member that does not train still holds its place in its GRPO group: :func:`placeholder_output`
is its prompt and one padding token, mask 0 and logprob 0 (no gradient), with the reward the group
policy gave it (neutral for the group's statistics). Every output carries ``extra_fields["aworld"]``:
the kit's ``outcome_record`` of its episode, which the trainer-side sampler (``aworld_verl.sampler``)
counts per step.
"""

from __future__ import annotations

import logging
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, TrainingSegment
from aworld_core.worker import check_token_mean, episode_segments, has_segment_rewards
from aworld_verl.engine import EpisodeEngineStats

logger = logging.getLogger(__name__)

# extra_fields key of what the sampler counts
AWORLD = "aworld"


# why a V0 sample's episode does not train (a masked row keeps its place and reward)
SEGMENTED_ON_V0 = "segmented_on_v0"


def segment_refusal(episode: Episode, *, v1: bool, loss_agg_mode: str | None) -> str | None:
    """Whether verl can train ``episode``'s segments: ``None`` when it can; ``SEGMENTED_ON_V0``
    when it has several and runs under V0 (one output per sample: the episode keeps its group
    place untrained). Raises ``UsageError`` for what no episode could train under this config:
    per-segment rewards (V1 gives every output of a session the final output's reward and
    advantage), or a per-sequence ``loss_agg_mode`` (it would weigh an episode by its segments)."""
    segments = episode_segments(episode)
    if has_segment_rewards(episode):
        raise UsageError(
            f"episode {episode.id}: the reward gave per-segment rewards, which verl cannot apply (V1 gives every "
            "output of a session its final output's reward and GRPO advantage); return one reward per episode on "
            "the verl backend"
        )
    if len(segments) <= 1:
        return None
    if not v1:
        return SEGMENTED_ON_V0
    check_token_mean(str(loss_agg_mode or "token-mean"), token_mean=("token-mean",), multi_segment=True,
                     setting="actor_rollout_ref.actor.loss_agg_mode")
    return None


_warned_v0: list[bool] = []


def warn_segmented_v0(episode: Episode) -> None:
    """Say once per process why a V0 episode of several segments does not train."""
    if not _warned_v0:
        _warned_v0.append(True)
        logger.warning(
            "episode %s has %d training segments (its history was rewritten or compacted); verl V0 takes one "
            "output per sample, so such episodes keep their group place untrained (counted as untrained/%s). "
            "Run verl's V1 trainer (trainer.use_v1=true) to train every segment", episode.id,
            len(episode_segments(episode)), SEGMENTED_ON_V0,
        )


def _tool_seconds(episode: Episode) -> float:
    return sum(
        result.duration_s or 0.0 for step in episode.steps for result in step.exp_data.state.action_result
    )


def _turns(episode: Episode, view: TrainingSegment, primary: bool) -> int:
    """verl counts chat turns: user, assistant and tool messages of the trained conversation."""
    if primary and episode.messages:
        return sum(1 for m in episode.messages if m.get("role") != "system")
    return 1 + view.num_turns


def extra_fields(
    episode: Episode,
    stats: EpisodeEngineStats,
    facts: dict[str, Any],
    *,
    reward_info: float | None = None,
    session: int = 0,
    global_steps: int | None = None,
) -> dict[str, Any]:
    """The extra fields of every output (``global_steps``: the fallback policy version)."""
    low = stats.min_global_steps if stats.min_global_steps is not None else global_steps
    high = stats.max_global_steps if stats.max_global_steps is not None else global_steps
    fields: dict[str, Any] = {
        "trajectory_id": episode.id,
        "status": episode.status.value,
        "stop": episode.metadata.get("stop"),
        "error": episode.error,
        "aworld_session": session,
        AWORLD: facts,
        # verl's own loops always set these two; keep the schema the same for mixed batches
        "turn_scores": [],
        "tool_rewards": [],
        # V1's staleness control and metrics read the policy versions the trajectory spans (ints)
        "min_global_steps": low,
        "max_global_steps": high,
    }
    if reward_info is not None:
        # V1 copies the final output's reward_extra_info to the session's other outputs (and
        # fails without it); V0 must not get it: its batch merges the key over all rows
        fields["reward_extra_info"] = {"score": reward_info}
    return fields


def _metrics(episode: Episode, stats: EpisodeEngineStats) -> Any:
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics

    return AgentLoopMetrics(
        generate_sequences=stats.generate_s,
        tool_calls=_tool_seconds(episode),
        num_preempted=-1 if stats.num_preempted is None else stats.num_preempted,
    )


def training_output(
    episode: Episode,
    view: TrainingSegment,
    stats: EpisodeEngineStats,
    facts: dict[str, Any],
    *,
    response_length: int,
    reward: float | None,
    primary: bool = True,
    session: int = 0,
    reward_info: bool = False,
    global_steps: int | None = None,
) -> Any:
    """One training segment as an ``AgentLoopOutput`` (``reward`` goes to ``reward_score``;
    ``reward_info`` also puts it in ``extra_fields["reward_extra_info"]``)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    n = min(len(view.response_ids), response_length)
    if not (len(view.response_mask) == len(view.response_logprobs) == len(view.response_ids)):
        raise ValueError(
            f"episode {episode.id}: training view is misaligned ({len(view.response_ids)} ids, "
            f"{len(view.response_mask)} mask, {len(view.response_logprobs)} logprobs)"
        )
    return AgentLoopOutput(
        prompt_ids=list(view.prompt_ids),
        response_ids=list(view.response_ids[:n]),
        response_mask=[int(m) for m in view.response_mask[:n]],
        response_logprobs=[float(x) for x in view.response_logprobs[:n]],
        reward_score=reward,
        num_turns=_turns(episode, view, primary),
        metrics=_metrics(episode, stats),
        extra_fields=extra_fields(
            episode, stats, facts, reward_info=reward if reward_info else None, session=session,
            global_steps=global_steps,
        ),
    )


def placeholder_output(
    episode: Episode,
    stats: EpisodeEngineStats,
    facts: dict[str, Any],
    prompt_ids: list[int],
    pad_id: int,
    *,
    reward: float | None,
    reward_info: bool = False,
    global_steps: int | None = None,
) -> Any:
    """A member that does not train, in its group's place: the prompt and one padding token, mask 0
    and logprob 0 (no gradient), ``reward`` its neutral value for the group's statistics."""
    pad = int(pad_id)
    view = TrainingSegment(prompt_ids=list(prompt_ids) or [pad], response_ids=[pad], response_mask=[0],
                           response_logprobs=[0.0], response_versions=[-1])
    return training_output(episode, view, stats, facts, response_length=1, reward=reward, reward_info=reward_info,
                           global_steps=global_steps)
