"""An episode as verl's ``AgentLoopOutput``: exact ids, mask, logprobs, metrics and extra fields.

The token sequences come straight from the ``TokenLLM`` session (``episode.training``): what the
engine sampled (mask 1, with its logprobs) and what the chat template rendered for tool and
environment messages (mask 0). Nothing is re-tokenized here; ids, mask and logprobs are cut at
``response_length`` together.

A member that does not train still holds its place in its GRPO group: :func:`placeholder_output`
is its prompt and one padding token, mask 0 and logprob 0 (no gradient), with the reward the group
policy gave it (neutral for the group's statistics). Every output carries ``extra_fields["aworld"]``:
the kit's ``outcome_record`` of its episode, which the trainer-side sampler (``aworld_verl.sampler``)
counts per step.
"""

from __future__ import annotations

from typing import Any

from aworld_core.schemas import Episode, TrainingView
from aworld_verl.engine import EpisodeEngineStats

# extra_fields key of what the sampler counts
AWORLD = "aworld"


def views_of(episode: Episode) -> list[TrainingView]:
    """The episode's trained sessions in the order they ran: the primary first, then those of
    trained agents called later (a swarm's trained members)."""
    if episode.training is None:
        return []
    views = [episode.training]
    for extra in episode.metadata.get("extra_training") or []:
        views.append(extra if isinstance(extra, TrainingView) else TrainingView.model_validate(extra))
    return views


def _tool_seconds(episode: Episode) -> float:
    return sum(
        result.duration_s or 0.0 for step in episode.steps for result in step.exp_data.state.action_result
    )


def _turns(episode: Episode, view: TrainingView | None, primary: bool) -> int:
    """verl counts chat turns: user, assistant and tool messages of the trained conversation."""
    if primary and episode.messages:
        return sum(1 for m in episode.messages if m.get("role") != "system")
    return 1 + (view.num_turns if view is not None else 0)


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
    view: TrainingView,
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
    """One trained session as an ``AgentLoopOutput`` (``reward`` goes to ``reward_score``;
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
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    return AgentLoopOutput(
        prompt_ids=list(prompt_ids) or [int(pad_id)],
        response_ids=[int(pad_id)],
        response_mask=[0],
        response_logprobs=[0.0],
        reward_score=reward,
        num_turns=_turns(episode, None, True),
        metrics=_metrics(episode, stats),
        extra_fields=extra_fields(
            episode, stats, facts, reward_info=reward if reward_info else None, global_steps=global_steps
        ),
    )
