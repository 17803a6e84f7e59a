"""A graded reward for the server-mode test (``reward: {name: <this file>:closeness}``).

How close the final answer's last number is to the sample's answer (1.0 exact, 0.1 less per unit
off, 0 without a number): answers the tiny model gives a prompt differ, so a group's rewards
differ and GRPO has an advantage to train on. A sample with ``extra_info.break_reward`` makes it
raise, on purpose (the trajectory is recorded, not trained)."""

from __future__ import annotations

import re
from typing import Any


def closeness(episode: Any, sample: Any) -> float:
    if sample.extra_info.get("break_reward"):
        raise RuntimeError(f"the reward of sample {sample.id} is broken on purpose")
    numbers = re.findall(r"-?\d+", episode.final_answer or "")
    if not numbers:
        return 0.0
    return max(0.0, 1.0 - 0.1 * abs(int(numbers[-1]) - int(str(sample.ground_truth).strip())))
