"""A trajectory-aware reward for the tests: records which episodes it saw, scores exact answers."""

from __future__ import annotations

from typing import Any

SEEN: list[dict[str, Any]] = []


def seen_reward(episode: Any, sample: Any) -> float:
    from aworld_cpu_grpo_demo.tasks import parse_answer

    tool_results = [r.content for s in episode.steps for r in s.exp_data.state.action_result]
    SEEN.append({"episode_id": episode.id, "sample_id": sample.id, "steps": len(episode.steps),
                 "tool_results": tool_results})
    answer = parse_answer(episode.final_answer)
    return 1.0 if answer is not None and str(answer) == str(sample.ground_truth) else 0.0


def index_reward(episode: Any, sample: Any) -> float:
    """The member's position in its GRPO group: known, distinct rewards within every group."""
    return float(episode.metadata["group_index"])
