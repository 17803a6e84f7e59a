"""Rewards for the AReaL suite, referenced by file path (``.../areal_rewards.py:name``) as a job
would reference its own; module-level so reward processes import them again."""

from __future__ import annotations

import os
import time
from typing import Any


def broken(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    raise ValueError("this reward always fails")


def slow(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    time.sleep(3)
    return 1.0


def dies(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """Kills its own (reward pool) process, as an OOM kill or a segfault would."""
    os._exit(1)


def hangs(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    time.sleep(120)
    return 1.0


def says_five(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    return 1.0 if "5" in solution_str else 0.0


def scripted(episode: Any, sample: Any) -> float:
    """Trajectory-aware: the reward listed for this member (``extra_info["rewards"][group_index]``);
    ``None`` there makes the reward raise, so that member fails."""
    value = sample.extra_info["rewards"][episode.metadata["group_index"]]
    if value is None:
        raise ValueError(f"scripted failure of member {episode.metadata['group_index']}")
    return float(value)


def called_calculator(episode: Any, sample: Any) -> float:
    """Trajectory-aware, for the trainer's end-to-end test on the demo's task: 1.0 when the episode
    called the calculator (whatever it asked), else 0.0. Member 0 of every fourth prompt (by the
    prompt's id) fails instead: the partial-group case, through AReaL's real trainer."""
    import zlib

    if episode.metadata.get("group_index") == 0 and zlib.crc32(str(sample.id).encode()) % 4 == 0:
        raise ValueError(f"scripted reward failure of member 0 of {sample.id}")
    return 1.0 if any(step.exp_data.actions for step in episode.steps) else 0.0
