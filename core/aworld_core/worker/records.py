"""An episode's outcome as plain JSON, for a trainer that does not hold the episode.

Where the episodes run in one process and the training step is assembled in another (verl's
agent-loop workers and its trainer; a rollout server and its trainer), the worker stores a small
record with each output (:func:`outcome_record`), and the trainer side counts the step from the
records: :func:`merge_step_metrics` (the kit's ``step_metrics`` of the whole step) and
:func:`first_record_error` (what ``FailedSteps`` reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from typing import Any

from aworld_core.schemas import Episode
from aworld_core.worker.policy import error_of, step_metrics, untrainable_reason

# summed over a step's records (every other figure is a rate, averaged)
_SUMMED = ("episodes",)


def outcome_record(episode: Episode, *, needs_reward: bool = True, neutral: bool = False) -> dict[str, Any]:
    """What a trainer counts of ``episode``: its status, why it does not train, its error, its
    group, whether the framework got a neutral placeholder for it, and the kit's ``step_metrics``
    of the episode alone (``metrics``, without prefix)."""
    return {
        "episode": episode.id,
        "status": episode.status.value,
        "untrained": untrainable_reason(episode, needs_reward=needs_reward),
        "error": error_of(episode),
        "group": episode.metadata.get("group_id"),
        "group_dropped": episode.metadata.get("group_dropped"),
        "neutral": neutral,
        "tool_results": tool_counts(episode)["tool_results"],
        "metrics": step_metrics([episode], prefix="", needs_reward=needs_reward),
    }


def tool_counts(episode: Episode) -> dict[str, int]:
    """The episode's LLM calls (its steps), tool calls, tool results and failed tool results."""
    results = [r for step in episode.steps for r in step.exp_data.state.action_result]
    return {
        "llm_calls": len(episode.steps),
        "tool_calls": sum(len(step.exp_data.actions) for step in episode.steps),
        "tool_results": len(results),
        "tool_errors": sum(1 for r in results if r.is_error),
    }


def mask_runs(mask: Sequence[int]) -> list[list[int]]:
    """A loss mask as ``[value, count]`` runs (a few numbers per turn, for a record)."""
    return [[value, len(list(run))] for value, run in groupby(mask)]


def mask_of_runs(runs: Iterable[Sequence[int]]) -> list[int]:
    """The mask :func:`mask_runs` encoded."""
    return [int(value) for value, count in runs for _ in range(int(count))]


def merge_step_metrics(records: Iterable[Mapping[str, Any]], prefix: str = "aworld/") -> dict[str, float]:
    """The kit's ``step_metrics`` of a step from its episodes' records: counts summed, rates
    averaged over the episodes, ``tool_error_rate`` over the tool results, ``sampled_tokens`` and
    ``segments`` over the trained episodes; plus ``groups``, ``groups_dropped`` and ``placeholders``."""
    records = list(records)
    n = len(records)
    if not n:
        return {}
    each = [r.get("metrics") or {} for r in records]
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for m in each for k in m):
        values = [float(m.get(key, 0.0)) for m in each]
        if key in _SUMMED or key.startswith("untrained/"):
            out[prefix + key] = sum(values)
        elif key == "tool_error_rate":
            weights = [float(r.get("tool_results") or 0) for r in records]
            total = sum(weights)
            out[prefix + key] = sum(v * w for v, w in zip(values, weights, strict=True)) / total if total else 0.0
        elif key in ("sampled_tokens", "segments"):
            trained = [v for v, m in zip(values, each, strict=True) if m.get("trained_rate") == 1.0]
            out[prefix + key] = sum(trained) / len(trained) if trained else 0.0
        else:
            out[prefix + key] = sum(values) / n
    out[prefix + "groups"] = float(len({r.get("group") for r in records}))
    out[prefix + "groups_dropped"] = float(len({r.get("group") for r in records if r.get("group_dropped")}))
    out[prefix + "placeholders"] = float(sum(1 for r in records if r.get("neutral")))
    return out


def trained_records(records: Iterable[Mapping[str, Any]]) -> int:
    """How many of the records' episodes trained."""
    return sum(1 for r in records if not r.get("untrained"))


def first_record_error(records: Iterable[Mapping[str, Any]]) -> str:
    """The first recorded cause among a step's records (``FailedSteps``'s message)."""
    records = list(records)
    for record in records:
        if record.get("error"):
            return f"episode {record.get('episode')}: {record['error']}"
    for record in records:
        if record.get("untrained"):
            return f"episode {record.get('episode')}: {record.get('group_dropped') or record['untrained']}"
    return "no episode produced trainable tokens"
