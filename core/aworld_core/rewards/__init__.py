"""Rewards: the built-in ``gsm8k``/``format`` functions, the calling conventions, and scoring.

``registry.score_episode`` is what runtimes call after an episode ends; ``resolve_reward`` turns
a name into a :class:`~aworld_core.rewards.conventions.Reward` once; ``compute_named_reward`` is
what the core's ``compute_reward`` hook answers with. (``gaia`` and GAIA's scorer are
aworld-gaia-env's.)
"""

from __future__ import annotations

from aworld_core.rewards.builtin import format_reward, gsm8k_reward, require_ground_truth
from aworld_core.rewards.conventions import Reward
from aworld_core.rewards.extract import extract_gsm8k_answer, extract_tagged_answer
from aworld_core.rewards.registry import (
    RewardStats,
    compute_named_reward,
    get_reward_stats,
    resolve_reward,
    score_episode,
    solution_text,
    validate_reward_value,
)

__all__ = [
    "Reward",
    "RewardStats",
    "compute_named_reward",
    "extract_gsm8k_answer",
    "extract_tagged_answer",
    "format_reward",
    "get_reward_stats",
    "gsm8k_reward",
    "require_ground_truth",
    "resolve_reward",
    "score_episode",
    "solution_text",
    "validate_reward_value",
]
