"""A trajectory-aware reward for the swift suite (``reward: {name: <this file>:tool_answer}``)."""

from __future__ import annotations

import re
from typing import Any


def tool_answer(episode: Any, sample: Any) -> float:
    """1.0 when the final answer states the number the add tool returned, 0.5 when the tool was
    called, else 0.0. A sample with ``extra_info.break_reward`` makes it raise, on purpose; with
    ``extra_info.break_odd`` it raises for the episodes whose id ends in an odd number (one member
    of each group of two, since the suites number trajectories in order)."""
    if sample.extra_info.get("break_reward"):
        raise RuntimeError(f"the reward of sample {sample.id} is broken on purpose")
    if sample.extra_info.get("break_odd") and int(episode.id.rsplit("-", 1)[-1]) % 2:
        raise RuntimeError(f"the reward of episode {episode.id} is broken on purpose")
    results = [r.content for step in episode.steps for r in step.exp_data.state.action_result if not r.is_error]
    if not results:
        return 0.0
    numbers = re.findall(r"-?\d+", episode.final_answer or "")
    return 1.0 if numbers and numbers[-1] == results[-1].strip() else 0.5


def answer_parity(episode: Any, sample: Any) -> float:
    """1.0 when the episode sampled an odd number of tokens, else 0.0: a reward that differs between
    sampled episodes whatever the tiny model writes, so GRPO groups have an advantage."""
    calls = [step.exp_data.llm_call for step in episode.steps if step.exp_data.llm_call is not None]
    return float(sum(len(c.token_data.response_ids) for c in calls if c.token_data is not None) % 2)


def sampled_parity(episode: Any, sample: Any) -> float:
    """1.0 when the episode's training view holds an odd number of sampled tokens, else 0.0: like
    ``answer_parity`` for an agent written against the OpenAI API (its episode has no steps)."""
    view = episode.training
    return float(sum(view.response_mask) % 2) if view is not None else 0.0
