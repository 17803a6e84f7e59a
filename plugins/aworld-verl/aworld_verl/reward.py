"""The core's rewards as verl's ``custom_reward_function`` (``pkg://aworld_verl.reward``,
``compute_score``).

verl's reward managers call ``compute_score(data_source=, solution_str=, ground_truth=,
extra_info=, **reward_kwargs)`` with ``solution_str`` the decoded response: for an agent loop
that is the whole multi-turn response, assistant turns *and* tool results. ``AworldAgentLoop``
scores the episode's final answer in the loop instead (``reward_score``), so verl calls this
only for rows the loop left unscored (``reward_in_loop: false``, other agent loops).

Which reward: ``reward_kwargs.aworld_reward`` (the launch sets it from the job's ``reward``),
else ``extra_info.aworld_reward``, else the ``AWORLD_VERL_REWARD`` environment variable.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, EpisodeStatus, Sample
from aworld_verl.rows import SAMPLE_ID, ground_truth_of, plain

REWARD_ENV = "AWORLD_VERL_REWARD"
BASE_DIR_ENV = "AWORLD_VERL_REWARD_BASE_DIR"


@functools.lru_cache(maxsize=64)
def _resolved(name: str, base_dir: str | None, trajectory_aware: bool | None) -> Any:
    from aworld_core.rewards import resolve_reward

    reward = resolve_reward(name, base_dir=base_dir, trajectory_aware=trajectory_aware)
    if reward.trajectory_aware:
        raise UsageError(
            f"reward '{name}' is trajectory-aware (takes the episode), but verl's reward manager only has "
            f"the decoded response text; compute it in the agent loop (AworldAgentLoop with "
            f"reward_in_loop: true, the default) instead of through custom_reward_function"
        )
    return reward


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    aworld_reward: str | None = None,
    aworld_base_dir: str | None = None,
    aworld_trajectory_aware: bool | None = None,
    **_: Any,
) -> float:
    """Score one response with the configured core reward; failures raise (never a silent 0)."""
    extra = plain(dict(extra_info or {}))
    name = aworld_reward or extra.get("aworld_reward") or os.environ.get(REWARD_ENV)
    if not name:
        raise UsageError(
            "aworld_verl.reward.compute_score does not know which reward to compute: set "
            "reward.custom_reward_function.reward_kwargs.aworld_reward (the launch does), "
            f"extra_info.aworld_reward, or the {REWARD_ENV} environment variable"
        )
    base_dir = aworld_base_dir or os.environ.get(BASE_DIR_ENV) or None
    reward = _resolved(str(name), base_dir, aworld_trajectory_aware)
    sample = Sample(
        id=str(extra.get(SAMPLE_ID, "verl-row")),
        prompt=[],
        ground_truth=ground_truth_of({"ground_truth": ground_truth}, extra),  # JSON-decoded as the row's
        data_source=str(data_source),
        extra_info=extra,
    )
    # a plain reward reads the episode only through its final answer: the text verl decoded
    episode = Episode(task_id=sample.id, agent_id="verl", final_answer=solution_str)
    episode.finish(EpisodeStatus.SUCCESS)
    from aworld_core.rewards import compute_named_reward, validate_reward_value

    value = compute_named_reward(reward.name, episode, sample, base_dir=base_dir, trajectory_aware=False)
    if inspect.isawaitable(value):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            value = asyncio.run(_awaited(value))
        else:
            raise UsageError(
                f"reward '{reward.name}' is async and compute_score was called from a running event loop; "
                f"compute it in the agent loop (reward_in_loop: true) instead"
            )
    return validate_reward_value(reward.name, value)


async def _awaited(value: Any) -> Any:
    return await value
