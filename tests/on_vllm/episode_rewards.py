"""A reward for the vLLM GRPO test: distinct within every group, so every step has advantages
(and the weights move) whatever the tiny model answers."""

from __future__ import annotations

from typing import Any


def index_reward(episode: Any, sample: Any) -> float:
    """The member's position in its GRPO group."""
    return float(episode.metadata["group_index"])
