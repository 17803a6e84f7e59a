"""A trajectory-aware reward that credits segments itself (``worker.credit.set_segment_rewards``):
the episode's exact-answer reward, and the last segment of a segmented episode 0.25 more."""

from __future__ import annotations

from typing import Any


def segment_reward(episode: Any, sample: Any) -> float:
    from aworld_core.worker.credit import episode_segments, set_segment_rewards
    from aworld_cpu_grpo_demo.tasks import parse_answer

    answer = parse_answer(episode.final_answer)
    reward = 1.0 if answer is not None and str(answer) == str(sample.ground_truth) else 0.0
    segments = episode_segments(episode)
    if len(segments) > 1:
        set_segment_rewards(episode, [None] * (len(segments) - 1) + [reward + 0.25])
    return reward
