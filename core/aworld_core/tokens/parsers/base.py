"""What every tool-call parser shares: the parsed turn, the protocol, call ids and call checks.

A parser reads the decoded turn (special tokens kept as their text, so ``[TOOL_CALLS]`` or
``<|call|>`` are visible); the sampled ids are never touched. A call the model wrote that does not
parse becomes a ``ToolCall`` with ``error`` set: never a crash, never a silently dropped call.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from dataclasses import dataclass, field
from typing import Any, Protocol

from aworld_core.errors import UsageError
from aworld_core.schemas import ToolCall


@dataclass
class ParsedText:
    """The agent's view of one assistant turn."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None


class ToolParser(Protocol):
    """Splits an assistant text into content and tool calls (ids derived from ``id_prefix``)."""

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        ...


def split_reasoning(
    text: str, *, opened_by_prompt: bool = False, call_markers: tuple[str, ...] = ()
) -> tuple[str | None, str]:
    """``(reasoning, rest)`` for text with a ``<think>`` block.

    Only a turn that starts with ``<think>`` has one, or, when the family's generation prompt may
    open the block itself (``opened_by_prompt``), a turn with a ``</think>``; a ``</think>`` written
    after one of the parser's ``call_markers`` is part of a tool call (its arguments), never the
    end of reasoning, so the text is left whole for the parser. An unclosed block that the turn
    opened (the generation stopped while thinking) is all reasoning.
    """
    stripped = text.lstrip()
    opened = stripped.startswith("<think>")
    if not opened and not opened_by_prompt:
        return None, text
    body = stripped[len("<think>") :] if opened else text
    close = body.find("</think>")
    if close >= 0 and any(0 <= body.find(m) < close for m in call_markers if m):
        return None, text
    if close < 0:
        return (body.strip("\n"), "") if opened else (None, text)
    return body[:close].strip("\n"), body[close + len("</think>") :].lstrip("\n")


# -- tool-call ids ----------------------------------------------------------------------------

# "prefix": ``id_prefix`` + the call's index (``call_<sha8>_<turn>_<i>`` in a TokenLLM session);
# "alnum9": 9 letters and digits hashed from the same text (Mistral's templates refuse any other id).
ID_FORMATS = ("prefix", "alnum9")
_ALNUM = string.digits + string.ascii_letters
_ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")


def check_id_format(id_format: str) -> str:
    if id_format not in ID_FORMATS:
        raise UsageError(f"unknown tool-call id format {id_format!r}; choose one of {', '.join(ID_FORMATS)}")
    return id_format


def make_call_id(id_prefix: str, index: int, id_format: str = "prefix") -> str:
    """A deterministic id for call ``index`` of the turn whose ids start with ``id_prefix``."""
    if id_format == "prefix":
        return f"{id_prefix}{index}"
    check_id_format(id_format)
    number = int.from_bytes(hashlib.sha1(f"{id_prefix}{index}".encode()).digest()[:8], "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALNUM))
        chars.append(_ALNUM[digit])
    return "".join(chars)


def is_valid_call_id(value: Any, id_format: str) -> bool:
    """Whether an id the model wrote itself (Mistral does) can be kept as the call's id."""
    if not isinstance(value, str) or not value:
        return False
    if id_format == "alnum9":
        return _ALNUM9.fullmatch(value) is not None
    return not any(ch.isspace() for ch in value)


class BaseToolParser:
    """Holds the id format; ``default_id_format`` is the family's (``alnum9`` for Mistral)."""

    default_id_format = "prefix"
    call_markers: tuple[str, ...] = ()  # texts that open a tool call (a "</think>" after one is in it)

    def __init__(self, *, id_format: str | None = None):
        self.id_format = check_id_format(id_format or self.default_id_format)

    def call_id(self, id_prefix: str, index: int, written: Any = None, used: set[str] | None = None) -> str:
        """The id of call ``index``: the model's own (``written``) when it is valid and new in the
        turn, so tool results answer the id the model saw; else one made from ``id_prefix``."""
        if is_valid_call_id(written, self.id_format) and (used is None or written not in used):
            chosen = str(written)
        else:
            chosen = make_call_id(id_prefix, index, self.id_format)
        if used is not None:
            used.add(chosen)
        return chosen

    def parse(self, text: str, *, tools: list[dict[str, Any]] | None = None, id_prefix: str = "call_") -> ParsedText:
        raise NotImplementedError


# -- building calls ---------------------------------------------------------------------------


def arguments_text(name: str, raw_args: Any) -> tuple[str | None, str | None]:
    """Normalize a call's arguments to JSON object text, or say why they are not one."""
    if raw_args is None:
        return "{}", None
    if isinstance(raw_args, str):
        try:
            raw_args = json.loads(raw_args)
        except json.JSONDecodeError as exc:
            return None, f"arguments of {name!r} are a string that is not JSON ({exc.msg})"
    if not isinstance(raw_args, dict):
        return None, f"arguments of {name!r} must be a JSON object, got {type(raw_args).__name__}"
    return json.dumps(raw_args, ensure_ascii=False), None


def call_from_object(obj: Any, raw: str, call_id: str, *, args_keys: tuple[str, ...]) -> ToolCall:
    """A call from a decoded ``{"name": ..., <args key>: {...}}`` object."""
    if not isinstance(obj, dict):
        return ToolCall(id=call_id, name="", arguments=raw, error="a tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(id=call_id, name="", arguments=raw, error="the tool call has no string 'name'")
    raw_args = next((obj[k] for k in args_keys if k in obj), None)
    arguments, error = arguments_text(name, raw_args)
    if error:
        return ToolCall(id=call_id, name=name, arguments=raw, error=error)
    return ToolCall(id=call_id, name=name, arguments=arguments or "{}")


def call_from_json_text(name: str, raw: str, call_id: str, *, where: str) -> ToolCall:
    """A call whose name is known and whose arguments are JSON object text (``where`` says what
    the text is, for the error message)."""
    body = raw.strip()
    if not name:
        return ToolCall(id=call_id, name="", arguments=body, error=f"the tool call has no name ({where})")
    decoder = json.JSONDecoder()
    try:
        value, end = decoder.raw_decode(body)
    except json.JSONDecodeError as exc:
        return ToolCall(
            id=call_id, name=name, arguments=body, error=f"the arguments of {name!r} are not valid JSON ({exc.msg}; {where})"
        )
    if body[end:].strip():
        return ToolCall(
            id=call_id, name=name, arguments=body, error=f"unexpected text after the arguments of {name!r} ({where})"
        )
    arguments, error = arguments_text(name, value)
    if error:
        return ToolCall(id=call_id, name=name, arguments=body, error=error)
    return ToolCall(id=call_id, name=name, arguments=arguments or "{}")


_NAME_GUESS = re.compile(r'"name"\s*:\s*"([^"]*)"')


def unparsed_call(call_id: str, text: str, error: str) -> ToolCall:
    """A call whose text could not be parsed, named by the ``"name": "..."`` in it when there is
    one, so the agent's error message can say which tool the model meant."""
    guess = _NAME_GUESS.search(text)
    return ToolCall(id=call_id, name=guess.group(1) if guess else "", arguments=text, error=error)


def parameter_types(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, str]]:
    """``{function: {parameter: JSON-schema type}}`` of the offered tools."""
    out: dict[str, dict[str, str]] = {}
    for tool in tools or []:
        fn = tool.get("function", tool)
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[fn.get("name", "")] = {k: v.get("type", "") for k, v in props.items() if isinstance(v, dict)}
    return out


def typed_value(kind: str | None, value: str) -> Any:
    """A parameter written as text (XML-style formats): kept as text when the schema says
    ``string``, else decoded when it reads as JSON (number, bool, object, list)."""
    if kind == "string":
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
