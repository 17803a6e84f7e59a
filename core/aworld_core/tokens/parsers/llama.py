"""Llama-3.x: JSON calls (``{"name": ..., "parameters": {...}}``) and ``<|python_tag|>`` built-in calls."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from aworld_core.schemas import ToolCall
from aworld_core.tokens.parsers.base import BaseToolParser, ParsedText, call_from_object, unparsed_call

_BUILTIN = re.compile(r"([A-Za-z_]\w*)\.call\((.*)\)", re.DOTALL)
# the turn's end as sampled: <|eom_id|> after an ipython (tool) call, <|eot_id|> otherwise
_END_TOKENS = ("<|eom_id|>", "<|eot_id|>")


def _without_end_tokens(body: str) -> str:
    """``body`` without the end-of-turn token(s) it may end with (text decoded with its terminator):
    left in, a trailing ``<|eom_id|>`` read as a second, nameless call."""
    while body.endswith(_END_TOKENS):
        body = body[: -len("<|eom_id|>")].rstrip()
    return body


class Llama3JsonParser(BaseToolParser):
    """A whole answer that is a JSON call, calls split by ``;``; or, after ``<|python_tag|>``, a JSON
    call or a built-in call ``brave_search.call(query="...")`` (Llama-3.1's ipython form).

    An answer that neither starts with ``{`` nor holds ``<|python_tag|>`` is plain content, as in
    Llama-3's own convention; text before ``<|python_tag|>`` is content.
    """

    python_tag = "<|python_tag|>"
    call_markers = (python_tag,)

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        content = ""
        body = _without_end_tokens(text.strip())
        if self.python_tag in body:
            content, body = (part.strip() for part in body.split(self.python_tag, 1))
            if not body.startswith("{"):
                return ParsedText(content=content, tool_calls=[self._builtin(body, self.call_id(id_prefix, 0))])
        elif not body.startswith("{"):
            return ParsedText(content=body)
        return ParsedText(content=content, tool_calls=self._json_calls(body, id_prefix))

    def _json_calls(self, body: str, id_prefix: str) -> list[ToolCall]:
        decoder = json.JSONDecoder()
        calls: list[ToolCall] = []
        pos = 0
        while pos < len(body):
            call_id = self.call_id(id_prefix, len(calls))
            try:
                obj, end = decoder.raw_decode(body, pos)
            except json.JSONDecodeError as exc:
                calls.append(unparsed_call(call_id, body[pos:], f"the tool call is not valid JSON ({exc.msg})"))
                break
            calls.append(call_from_object(obj, body[pos:end], call_id, args_keys=("parameters", "arguments")))
            pos = end
            while pos < len(body) and body[pos] in " \t\r\n":
                pos += 1
            if pos < len(body):
                if body[pos] != ";":
                    calls.append(
                        ToolCall(
                            id=self.call_id(id_prefix, len(calls)),
                            name="",
                            arguments=body[pos:],
                            error="unexpected text after a tool call (separate calls with ';')",
                        )
                    )
                    break
                pos += 1
                while pos < len(body) and body[pos] in " \t\r\n":
                    pos += 1
        return calls

    @staticmethod
    def _builtin(body: str, call_id: str) -> ToolCall:
        """``name.call(key=literal, ...)``: keyword arguments with Python literal values only."""
        match = _BUILTIN.fullmatch(body.strip())
        if match is None:
            return ToolCall(
                id=call_id,
                name="",
                arguments=body,
                error="after <|python_tag|> expected a JSON call or a built-in call name.call(key=value, ...)",
            )
        name = match.group(1)
        try:
            node = ast.parse(f"f({match.group(2)})", mode="eval").body
            if not isinstance(node, ast.Call) or node.args or any(kw.arg is None for kw in node.keywords):
                raise ValueError("only keyword arguments are allowed")
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
            arguments = json.dumps(args, ensure_ascii=False)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
            return ToolCall(
                id=call_id, name=name, arguments=body, error=f"the built-in call {name}.call(...) does not parse ({exc})"
            )
        return ToolCall(id=call_id, name=name, arguments=arguments)
