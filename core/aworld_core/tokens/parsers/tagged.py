"""Parsers for calls in ``<tool_call>...</tool_call>`` blocks: Hermes/Qwen JSON, Qwen3-Coder XML, GLM-4.5."""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_core.schemas import ToolCall
from aworld_core.tokens.parsers.base import (
    BaseToolParser,
    ParsedText,
    call_from_object,
    parameter_types,
    typed_value,
    unparsed_call,
)


class HermesParser(BaseToolParser):
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks, any number."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"
    call_markers = (open_tag,)

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        self._schemas = parameter_types(tools)
        calls: list[ToolCall] = []
        pieces: list[str] = []
        pos = 0
        while True:
            start = text.find(self.open_tag, pos)
            if start < 0:
                pieces.append(text[pos:])
                break
            pieces.append(text[pos:start])
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            call_id = self.call_id(id_prefix, len(calls))
            if end < 0:
                error = f"the {self.open_tag} block is not closed with {self.close_tag} (the generation probably stopped inside it)"
                calls.append(unparsed_call(call_id, text[body_start:].strip(), error))
                break
            body = text[body_start:end].strip()
            calls.append(self._parse_body(body, call_id))
            pos = end + len(self.close_tag)
        return ParsedText(content="".join(pieces).strip(), tool_calls=calls)

    def _parse_body(self, body: str, call_id: str) -> ToolCall:
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            return unparsed_call(call_id, body, f"the tool call is not valid JSON ({exc.msg} at char {exc.pos})")
        return call_from_object(obj, body, call_id, args_keys=("arguments", "parameters"))

    def _typed(self, function: str, param: str, value: str) -> Any:
        return typed_value(getattr(self, "_schemas", {}).get(function, {}).get(param), value)


_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)


class Qwen3CoderParser(HermesParser):
    """``<tool_call><function=name><parameter=p>value</parameter>...</function></tool_call>``.

    Values are typed by the tool's JSON schema when the tool is known (a ``string`` parameter
    stays text); otherwise a value that reads as JSON (number, bool, object) is decoded.
    """

    def _parse_body(self, body: str, call_id: str) -> ToolCall:
        match = _FUNCTION.search(body)
        if match is None:
            return ToolCall(
                id=call_id, name="", arguments=body, error="no <function=name>...</function> in the tool call"
            )
        name = match.group(1).strip()
        if not name:
            return ToolCall(id=call_id, name="", arguments=body, error="the <function=...> tag has no name")
        args: dict[str, Any] = {}
        for pname, raw in _PARAMETER.findall(match.group(2)):
            value = raw[1:] if raw.startswith("\n") else raw
            value = value[:-1] if value.endswith("\n") else value
            args[pname.strip()] = self._typed(name, pname.strip(), value)
        return ToolCall(id=call_id, name=name, arguments=json.dumps(args, ensure_ascii=False))


_ARG_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


class Glm45Parser(HermesParser):
    """GLM-4.5: ``<tool_call>name\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>...</tool_call>``.

    A value is text; it is typed by the tool's schema like Qwen3-Coder's (the template writes
    strings raw and everything else as JSON). Anything in the block that is not a key/value pair
    makes the call an error.
    """

    def _parse_body(self, body: str, call_id: str) -> ToolCall:
        first = body.find("<arg_key>")
        head = body if first < 0 else body[:first]
        name = head.strip()
        if not name or "\n" in name or "<" in name:
            return ToolCall(
                id=call_id, name="", arguments=body, error="the <tool_call> block does not start with a function name"
            )
        rest = body[len(head) :]
        args: dict[str, Any] = {}
        for key, value in _ARG_PAIR.findall(rest):
            args[key.strip()] = self._typed(name, key.strip(), value)
        if _ARG_PAIR.sub("", rest).strip():
            return ToolCall(
                id=call_id,
                name=name,
                arguments=body,
                error=f"the arguments of {name!r} are not <arg_key>k</arg_key><arg_value>v</arg_value> pairs",
            )
        return ToolCall(id=call_id, name=name, arguments=json.dumps(args, ensure_ascii=False))
