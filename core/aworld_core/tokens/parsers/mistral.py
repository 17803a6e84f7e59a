"""Mistral: ``[TOOL_CALLS]`` followed by a JSON list (tokenizer v3/v7) or by ``name[CALL_ID]id[ARGS]{...}``
/ ``name[ARGS]{...}`` per call (v11 and later)."""

from __future__ import annotations

import json
from typing import Any

from aworld_core.schemas import ToolCall
from aworld_core.tokens.parsers.base import (
    BaseToolParser,
    ParsedText,
    call_from_json_text,
    call_from_object,
    unparsed_call,
)

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"


class MistralParser(BaseToolParser):
    """Both published Mistral forms, told apart per ``[TOOL_CALLS]`` segment.

    Text before the first ``[TOOL_CALLS]`` is content. Ids are 9 letters and digits by default
    (Mistral's templates refuse others); an id the model wrote (``"id"`` in the v3 list,
    ``[CALL_ID]`` in v11) is kept when it is valid, so its tool results answer the id it saw.
    """

    default_id_format = "alnum9"
    call_markers = (TOOL_CALLS,)

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        if TOOL_CALLS not in text:
            return ParsedText(content=text.strip())
        content, *segments = text.split(TOOL_CALLS)
        calls: list[ToolCall] = []
        used: set[str] = set()
        for segment in segments:
            body = segment.strip()
            if body.startswith(("[", "{")) and not body.startswith((ARGS, CALL_ID)):
                calls.extend(self._json_list(body, id_prefix, len(calls), used))
            else:
                calls.append(self._named(segment, id_prefix, len(calls), used))
        return ParsedText(content=content.strip(), tool_calls=calls)

    def _json_list(self, body: str, id_prefix: str, first: int, used: set[str]) -> list[ToolCall]:
        """v3: ``[{"name": ..., "arguments": {...}, "id": "..."}, ...]`` (a lone object is one call)."""
        try:
            value, end = json.JSONDecoder().raw_decode(body)
        except json.JSONDecodeError as exc:
            call_id = self.call_id(id_prefix, first, used=used)
            return [unparsed_call(call_id, body, f"the [TOOL_CALLS] list is not valid JSON ({exc.msg} at char {exc.pos})")]
        items = value if isinstance(value, list) else [value]
        calls: list[ToolCall] = []
        for item in items:
            written = item.get("id") if isinstance(item, dict) else None
            call_id = self.call_id(id_prefix, first + len(calls), written, used)
            raw = json.dumps(item, ensure_ascii=False)
            calls.append(call_from_object(item, raw, call_id, args_keys=("arguments", "parameters")))
        if not items:
            call_id = self.call_id(id_prefix, first, used=used)
            calls.append(ToolCall(id=call_id, name="", arguments=body, error="the [TOOL_CALLS] list is empty"))
        if body[end:].strip():
            call_id = self.call_id(id_prefix, first + len(calls), used=used)
            calls.append(
                ToolCall(id=call_id, name="", arguments=body[end:].strip(), error="unexpected text after the [TOOL_CALLS] list")
            )
        return calls

    def _named(self, segment: str, id_prefix: str, index: int, used: set[str]) -> ToolCall:
        """v11+: ``name[CALL_ID]id[ARGS]{...}`` or ``name[ARGS]{...}``."""
        at = segment.find(ARGS)
        if at < 0:
            call_id = self.call_id(id_prefix, index, used=used)
            return ToolCall(
                id=call_id,
                name=segment.split(CALL_ID, 1)[0].strip(),
                arguments=segment.strip(),
                error="the tool call has no [ARGS] after its name (the generation probably stopped inside it)",
            )
        head, args = segment[:at], segment[at + len(ARGS) :]
        written = None
        if CALL_ID in head:
            head, written = head.split(CALL_ID, 1)
            written = written.strip()
        call_id = self.call_id(id_prefix, index, written, used)
        return call_from_json_text(head.strip(), args, call_id, where="after [ARGS]")
