"""DeepSeek-V3 / R1 (and V3.1): calls between ``<｜tool▁calls▁begin｜>`` and ``<｜tool▁calls▁end｜>``.

One call is ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
(V3, R1) or ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`` (V3.1); both are read.
"""

from __future__ import annotations

from typing import Any

from aworld_core.schemas import ToolCall
from aworld_core.tokens.parsers.base import BaseToolParser, ParsedText, call_from_json_text, unparsed_call

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekParser(BaseToolParser):
    """Text before ``<｜tool▁calls▁begin｜>`` (and any after ``<｜tool▁calls▁end｜>``) is content."""

    call_markers = (CALLS_BEGIN, CALL_BEGIN)

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        at = text.find(CALLS_BEGIN)
        if at < 0:
            return ParsedText(content=text.strip())
        content = text[:at]
        rest = text[at + len(CALLS_BEGIN) :]
        end_all = rest.find(CALLS_END)
        block = rest if end_all < 0 else rest[:end_all]
        after = "" if end_all < 0 else rest[end_all + len(CALLS_END) :]
        calls: list[ToolCall] = []
        pos = 0
        while True:
            start = block.find(CALL_BEGIN, pos)
            gap = block[pos:] if start < 0 else block[pos:start]
            if gap.strip():
                calls.append(
                    unparsed_call(
                        self.call_id(id_prefix, len(calls)),
                        gap.strip(),
                        f"text in the tool-call block that is not a {CALL_BEGIN}...{CALL_END} call",
                    )
                )
            if start < 0:
                break
            end = block.find(CALL_END, start)
            call_id = self.call_id(id_prefix, len(calls))
            if end < 0:
                calls.append(
                    unparsed_call(
                        call_id,
                        block[start + len(CALL_BEGIN) :].strip(),
                        f"the tool call is not closed with {CALL_END} (the generation probably stopped inside it)",
                    )
                )
                break
            calls.append(self._call(block[start + len(CALL_BEGIN) : end], call_id))
            pos = end + len(CALL_END)
        if not calls:
            calls.append(
                ToolCall(id=self.call_id(id_prefix, 0), name="", arguments=block, error=f"{CALLS_BEGIN} holds no tool call")
            )
        text_after = after.strip()
        content = content.strip() if not text_after else f"{content.strip()}\n{text_after}".strip()
        return ParsedText(content=content, tool_calls=calls)

    @staticmethod
    def _call(body: str, call_id: str) -> ToolCall:
        if SEP not in body:
            return unparsed_call(call_id, body.strip(), f"the tool call has no {SEP}")
        kind, rest = body.split(SEP, 1)
        if kind.strip() not in ("", "function"):  # V3.1: NAME<｜tool▁sep｜>{...}
            return call_from_json_text(kind.strip(), rest, call_id, where=f"after {SEP}")
        name, _, args = rest.partition("\n")
        args = args.strip()
        if not args.startswith("```"):
            return ToolCall(
                id=call_id, name=name.strip(), arguments=args, error="the arguments are not in a ```json ... ``` block"
            )
        args = args[3:]
        if args.startswith("json"):
            args = args[4:]
        if not args.rstrip().endswith("```"):
            return ToolCall(id=call_id, name=name.strip(), arguments=args.strip(), error="the ```json block is not closed")
        return call_from_json_text(name.strip(), args.rstrip()[:-3], call_id, where="in the ```json block")
