"""Kept episodes as ms-swift's agent rows: the ``swift`` trajectory format.

Registered on the backend (``Backend.formats``), so ``python -m aworld_core.trajectories convert
--format swift`` and a job's ``sft:`` launch (``aworld_swift.sft``) write the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aworld_core.schemas import Episode, Message
from aworld_core.trajectories import messages_rows


def _swift_messages(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            text = message.get("content") or ""
            calls = message.get("tool_calls") or []
            if text or not calls:
                out.append({"role": "assistant", "content": text, "loss": True})
            for call in calls:
                function = call["function"]
                out.append({"role": "tool_call", "loss": True, "content": json.dumps(
                    {"name": function["name"], "arguments": function["arguments"]}, ensure_ascii=False)})
        elif role == "tool":
            out.append({"role": "tool_response", "content": message.get("content") or ""})
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def sft_rows(episodes: Sequence[Episode], tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """ms-swift agent rows: ``messages`` (``tool_call``/``tool_response`` roles, ``loss`` on the
    model's messages) and ``tools`` as JSON text (the form ms-swift's agent templates read)."""
    rows = []
    for row in messages_rows(episodes):  # the normalized, checked conversation
        out: dict[str, Any] = {"messages": _swift_messages(row["messages"])}
        if tools is not None:
            out["tools"] = json.dumps(tools, ensure_ascii=False)
        rows.append(out)
    return rows
