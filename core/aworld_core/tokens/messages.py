"""Message normalization for the token path: what a chat template gets, and what "the same
conversation" means when a client echoes its history back.

Clients echo the assistant's turn in their own way (``content: None`` for ``""``, arguments
re-serialized, reasoning dropped, fresh tool-call ids), so an echoed assistant message is compared
by meaning: its text (whitespace-trimmed) and its calls' names and parsed arguments. Every other
message is compared exactly.
"""

from __future__ import annotations

import json
from typing import Any

from aworld_core.errors import EpisodeInputError
from aworld_core.schemas import Message

_ROLES = ("system", "user", "assistant", "tool", "developer", "function", "ipython")


def content_text(content: Any, *, where: str) -> str | None:
    """A message's content as text: OpenAI content parts are joined; non-text parts are refused."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                texts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise EpisodeInputError(
                    f"{where} content part {i} has type {kind!r}; the token-level path handles text only "
                    "(send text parts, or use a multimodal model endpoint)"
                )
        return "".join(texts)
    raise EpisodeInputError(f"{where} content must be a string, a list of text parts or null, got {type(content).__name__}")


def _arguments_value(arguments: Any) -> Any:
    """Tool-call arguments as templates expect them: a dict when the JSON text is an object."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
        return value if isinstance(value, dict) else arguments
    return arguments


def normalize_messages(messages: Any) -> list[Message]:
    """Validated copies of OpenAI-format messages, ready for a chat template.

    Raises ``EpisodeInputError`` (a ``UsageError``) naming the first malformed message.
    """
    if not isinstance(messages, list) or not messages:
        raise EpisodeInputError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    out: list[Message] = []
    for i, message in enumerate(messages):
        where = f"message {i}"
        if not isinstance(message, dict):
            raise EpisodeInputError(f"{where} must be a dict with 'role' and 'content', got {type(message).__name__}")
        role = message.get("role")
        if role not in _ROLES:
            raise EpisodeInputError(f"{where} has role {role!r}; expected one of {', '.join(_ROLES)}")
        msg: Message = {"role": role, "content": content_text(message.get("content"), where=where)}
        if role != "assistant" and msg["content"] is None:
            msg["content"] = ""
        for key in ("name", "tool_call_id", "reasoning_content"):
            if message.get(key) is not None:
                msg[key] = message[key]
        calls = message.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise EpisodeInputError(f"{where} has tool_calls that is not a list")
            norm_calls = []
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise EpisodeInputError(
                        f"{where} tool call {j} must look like "
                        "{'id': ..., 'type': 'function', 'function': {'name': ..., 'arguments': ...}}"
                    )
                norm_calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": _arguments_value(fn.get("arguments", {}))},
                    }
                )
            msg["tool_calls"] = norm_calls
        out.append(msg)
    return out


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    fn = call["function"]
    args = _arguments_value(fn.get("arguments"))
    return fn["name"], args if isinstance(args, str) else json.dumps(args, sort_keys=True)


def same_message(recorded: Message, echoed: Message, unparsed: frozenset[str] = frozenset()) -> bool:
    """Whether ``echoed`` (from the client) stands for ``recorded`` (what the session holds);
    ``unparsed``: ids of recorded calls that failed to parse, which the echo may leave out."""
    if recorded["role"] != echoed["role"]:
        return False
    if recorded["role"] == "assistant":
        if (recorded.get("content") or "").strip() != (echoed.get("content") or "").strip():
            return False
        calls = recorded.get("tool_calls") or []
        theirs = [_call_key(c) for c in echoed.get("tool_calls") or []]
        if theirs == [_call_key(c) for c in calls]:
            return True
        # a client may leave out the calls that failed to parse (an OpenAI response cannot carry them)
        return any(c.get("id") in unparsed for c in calls) and theirs == [
            _call_key(c) for c in calls if c.get("id") not in unparsed
        ]
    keys = ("content", "tool_call_id", "name")
    return all(recorded.get(k) == echoed.get(k) for k in keys)


def extends(history: list[Message], messages: list[Message], unparsed: frozenset[str] = frozenset()) -> bool:
    """Whether ``messages`` is ``history`` followed by at least one new message (``unparsed``: ids
    of recorded calls that failed to parse; an OpenAI client cannot echo them)."""
    if len(messages) <= len(history):
        return False
    return all(same_message(h, m, unparsed) for h, m in zip(history, messages, strict=False))


def first_difference(history: list[Message], messages: list[Message], unparsed: frozenset[str] = frozenset()) -> int:
    """The index of the first message of ``messages`` that does not stand for ``history``'s message
    at that place (``len(messages)`` when all do: the client sent no new message)."""
    for index, (h, m) in enumerate(zip(history, messages, strict=False)):
        if not same_message(h, m, unparsed):
            return index
    return min(len(history), len(messages))
