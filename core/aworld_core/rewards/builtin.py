"""The core's named rewards: ``gsm8k`` and ``format``, with the seed's signature.

(``gaia`` is aworld-gaia-env's: ``aworld_gaia_env.reward``.)

Each takes ``(data_source, solution_str, ground_truth, extra_info)`` and returns a float, so the
same functions work as verl ``custom_reward_function``\\ s. ``solution_str`` is what
:func:`aworld_core.rewards.registry.solution_text` gives for an episode: the final answer the
runtime recorded, else the last assistant message. A missing ground truth is an error (recorded
on the episode), never a silent 0.
"""

from __future__ import annotations

from typing import Any

from aworld_core.rewards.extract import (
    extract_gsm8k_answer,
    has_answer_tag,
    normalize_number_text,
    numbers_equal,
)

FORMAT_REWARD = 0.1


def require_ground_truth(reward: str, ground_truth: Any) -> str:
    """``ground_truth`` as text; a missing one is an error (recorded on the episode), never a 0."""
    if ground_truth is None or (isinstance(ground_truth, str) and not ground_truth.strip()):
        raise ValueError(
            f"the {reward} reward needs a ground truth but the sample has none; "
            f"give the dataset a ground_truth (or answer) column"
        )
    return str(ground_truth)


def gsm8k_reward(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None
) -> float:
    """1.0 when the answer (after ``####``, else the last number) equals the ground truth.

    The ground truth may be the bare number or a whole GSM8K solution ending in ``#### N``.
    """
    truth_text = require_ground_truth("gsm8k", ground_truth)
    truth = extract_gsm8k_answer(truth_text) if "####" in truth_text else normalize_number_text(truth_text)
    answer = extract_gsm8k_answer(solution_str)
    if answer is None or not truth:
        return 0.0
    return 1.0 if numbers_equal(answer, truth) else 0.0


def format_reward(
    data_source: str, solution_str: str, ground_truth: Any = None, extra_info: dict[str, Any] | None = None
) -> float:
    """0.1 when the response holds an ``<answer>...</answer>`` pair, else 0.0."""
    return FORMAT_REWARD if has_answer_tag(solution_str) else 0.0
