"""TRL's reward calling convention, registered with the core so a TRL-style reward function works
in any job (on every backend) while aworld-trl is installed.

A TRL reward function takes ``(prompts, completions, ..., **kwargs)`` and returns one float per
completion. The core resolves a reward's convention once (``aworld_core.rewards``); this adapter
says which functions are TRL's (they take ``completions``), builds their keywords as TRL does for
a conversational dataset (a batch of one episode), and unpacks the list of one number they return.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.rewards import Reward, solution_text
from aworld_core.schemas import Episode, Sample
from aworld_core.specs import RewardConvention

TRL_SIGNATURE = "(prompts, completions, completion_ids, ground_truth, data_source, extra_info, <extra_info keys>, **kwargs)"
# what every call passes, whatever the dataset's columns
TRL_FIXED = ("prompts", "completions", "completion_ids", "ground_truth", "data_source", "extra_info", "trainer_state")


class TrlConvention(RewardConvention):
    """TRL's reward functions, called with a batch of one as TRL calls them for a conversational
    dataset: ``prompts`` the prompt messages, ``completions`` the messages the episode added after
    them (assistant turns, tool calls and tool results; the final answer is the last assistant
    one), ``completion_ids`` the sampled token ids when the episode kept them, and every dataset
    column: ``ground_truth``, ``data_source``, ``extra_info`` and each ``extra_info`` key on its own.
    The function returns a list of one number."""

    name = "trl"
    signature = TRL_SIGNATURE
    declared_only = True  # TRL passes every dataset column; a function names the ones it reads

    def claims(self, parameters: Mapping[str, Any]) -> bool:
        return "completions" in parameters and "episode" not in parameters

    def keywords(self, episode: Episode, sample: Sample) -> dict[str, Any]:
        prompt = [dict(m) for m in sample.prompt]
        messages = [dict(m) for m in episode.messages]
        completion = messages[len(prompt):] if messages[: len(prompt)] == prompt else [
            m for m in messages if m.get("role") not in ("system", "user")
        ]
        if not completion:
            completion = [{"role": "assistant", "content": solution_text(episode)}]
        ids: list[int] = []
        for step in episode.steps:
            data = step.exp_data.llm_call.token_data if step.exp_data.llm_call is not None else None
            if data is not None:
                ids.extend(data.response_ids)
        columns = {k: v for k, v in sample.extra_info.items() if isinstance(k, str) and k.isidentifier()}
        keywords: dict[str, Any] = {key: [value] for key, value in columns.items()}
        keywords.update({
            "prompts": [prompt],
            "completions": [completion],
            "completion_ids": [ids],
            "ground_truth": [sample.ground_truth],
            "data_source": [sample.data_source],
            "extra_info": [dict(sample.extra_info)],
            "trainer_state": None,
        })
        return keywords

    def value(self, reward: Reward, raw: Any) -> Any:
        if inspect.isawaitable(raw):
            return _awaited_value(reward, raw)
        return _value(reward, raw)

    def checked_keywords(self, reward: Reward, keywords: dict[str, Any]) -> dict[str, Any]:
        """The dataset's own columns vary: only TRL's fixed names are required."""
        keywords = {k: keywords[k] for k in TRL_FIXED}
        if reward.accepts is not None:
            keywords = {k: v for k, v in keywords.items() if k in reward.accepts}
            missing = sorted(reward.required - keywords.keys())
            if missing:
                raise UsageError(
                    f"reward '{reward.name}' ({reward.source}) looks like a TRL reward function (it takes "
                    f"completions) but also requires {missing}, which the core does not pass; TRL-style "
                    f"rewards get {TRL_SIGNATURE}: add **kwargs and read dataset columns from it (or "
                    f"extra_info)"
                )
        return keywords


def _value(reward: Reward, value: Any) -> Any:
    """The one number a TRL-style reward returned for its batch of one."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return value[0]
    raise ValueError(
        f"reward '{reward.name}' is a TRL-style reward (it takes completions), called with a batch of one "
        f"completion; it must return a list of one number, got {value!r}"
    )


async def _awaited_value(reward: Reward, value: Any) -> Any:
    return _value(reward, await value)


TRL = TrlConvention()
