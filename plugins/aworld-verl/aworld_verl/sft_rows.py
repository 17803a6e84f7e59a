"""Kept episodes as verl's multi-turn SFT rows: the ``verl`` trajectory format.

Registered on the backend (``Backend.formats``), so ``python -m aworld_core.trajectories convert
--format verl`` and a job's ``sft:`` launch (``aworld_verl.sft``) write the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aworld_core.schemas import Episode
from aworld_core.trajectories import messages_rows, task_key


def sft_rows(episodes: Sequence[Episode], tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """verl multi-turn SFT rows (``MultiTurnSFTDataset``: ``data.messages_key=messages``,
    ``data.tools_key=tools``; every assistant turn is trained)."""
    return [{**row, "data_source": "aworld", "task_id": task_key(e)}
            for row, e in zip(messages_rows(episodes, tools), episodes, strict=True)]
