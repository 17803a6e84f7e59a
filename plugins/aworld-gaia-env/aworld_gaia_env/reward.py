"""The ``gaia`` reward: the ``<answer>...</answer>`` text scored with GAIA's own rules.

It lives with the GAIA environment (registered by ``aworld_gaia_env.plugin``) so the core does
not know the benchmark by name; its signature is the seed's plain one, so it also works as a verl
``custom_reward_function``.
"""

from __future__ import annotations

from typing import Any

from aworld_core.rewards import extract_tagged_answer, require_ground_truth
from aworld_gaia_env.scorer import question_scorer


def gaia_reward(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None
) -> float:
    """1.0 when the ``<answer>...</answer>`` text is right under GAIA's scorer; 0.0 without a tag."""
    truth = require_ground_truth("gaia", ground_truth)
    answer = extract_tagged_answer(solution_str)
    if answer is None:
        return 0.0
    return 1.0 if question_scorer(answer, truth) else 0.0
