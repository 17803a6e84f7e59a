"""gpt-oss (harmony): a turn is a run of messages, each ``[<|start|>assistant]<header><|message|>body``
ended by ``<|end|>``, ``<|call|>`` or ``<|return|>`` (or by the end of the text, whose stop token
TokenLLM took off).

The header names the channel (``<|channel|>analysis|commentary|final``) and, for a tool call, the
recipient ``to=functions.NAME`` (in the role part, as gpt-oss's template writes it, or after the
channel, as the harmony guide shows it), with ``<|constrain|>json`` or ``json`` as content type.
``analysis`` is reasoning; ``final`` and addressed-to-nobody ``commentary`` are content.
"""

from __future__ import annotations

import re
from typing import Any

from aworld_core.schemas import ToolCall
from aworld_core.tokens.parsers.base import BaseToolParser, ParsedText, call_from_json_text

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")


class HarmonyParser(BaseToolParser):
    """Every recipient-addressed message is one call (``functions.`` dropped from the name)."""

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        if MESSAGE not in text and CHANNEL not in text:
            return ParsedText(content=text.strip())
        content: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        for header, body, closed in _messages(text):
            recipient = _RECIPIENT.search(header)
            channel_words = header.split(CHANNEL, 1)[1].split() if CHANNEL in header else []
            channel = channel_words[0] if channel_words else ""
            if recipient is not None:
                target = recipient.group(1)
                name = target[len("functions.") :] if target.startswith("functions.") else target
                call_id = self.call_id(id_prefix, len(calls))
                if body is None:
                    error = f"the message to {target} stopped before its arguments (<|message|>)"
                    calls.append(ToolCall(id=call_id, name=name, arguments="", error=error))
                    continue
                call = call_from_json_text(name, body, call_id, where=f"message to {target}")
                if call.error and not closed:
                    call = call.model_copy(update={"error": f"{call.error}; the message is not closed (the generation probably stopped inside it)"})
                calls.append(call)
            elif body is None:  # the text ends in a header (no content yet), or is plain text
                if not header.lstrip().startswith(("assistant", CHANNEL)):
                    content.append(_SPECIAL.sub("", header).strip())
            elif channel == "analysis":
                reasoning.append(body.strip())
            else:
                content.append(body.strip())
        return ParsedText(
            content="\n\n".join(part for part in content if part),
            tool_calls=calls,
            reasoning="\n\n".join(part for part in reasoning if part) or None,
        )


def _messages(text: str) -> list[tuple[str, str | None, bool]]:
    """``(header, body, closed)`` per message; ``body`` is ``None`` when the text ends in a header."""
    out: list[tuple[str, str | None, bool]] = []
    pos = 0
    while pos < len(text):
        at = text.find(MESSAGE, pos)
        header = text[pos:] if at < 0 else text[pos:at]
        if header.startswith(START):
            header = header[len(START) :]
        if at < 0:
            out.append((header, None, False))
            break
        start = at + len(MESSAGE)
        ends = [(text.find(tok, start), tok) for tok in ENDS if text.find(tok, start) >= 0]
        if not ends:
            out.append((header, text[start:], False))
            break
        end, tok = min(ends)
        out.append((header, text[start:end], True))
        pos = end + len(tok)
    return out
