"""``POST /v1/responses``: the Responses API on the same session and token path as chat completions.

Input items become chat messages (``message`` items by role, ``function_call`` items the
assistant's calls, ``function_call_output`` items tool results, ``reasoning`` items the next
assistant turn's reasoning); ``instructions`` is a system message first. ``previous_response_id``
continues a stored response of the same session: its conversation (input and output, without its
instructions, as OpenAI does) comes before the new input. Then the turn goes through
``TokenLLM.chat`` like any chat completion, and its answer becomes output items (``reasoning``,
``message`` with ``output_text``, ``function_call``). Streaming sends OpenAI's event sequence.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aworld_core.gateway.fields import (
    GatewayRequestError,
    check_known,
    function_tools,
    number,
    sampling_from_body,
    structured_output,
    tool_choice,
)
from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import Message, SamplingParams
from aworld_core.tokens.engine import STRUCTURED_OUTPUT, TOP_LOGPROBS
from aworld_core.tokens.turn import TurnRequest

RESPONSES_FIELDS: dict[str, str] = {
    "input": "a string (one user message) or items: message, function_call, function_call_output, reasoning",
    "instructions": "a system message before the conversation (not carried over by previous_response_id)",
    "previous_response_id": "continue a stored response of the same session (its input and output come first)",
    "model": "any name reaches the one policy the gateway serves; the answer names the served model",
    "tools": "function tools ({'type': 'function', 'name': ...}); other tool types refused",
    "tool_choice": "as in chat completions: 'none' bans the call opener, 'required' / a named function force the call",
    "parallel_tool_calls": "false stops the turn on the token that closes its first call",
    "temperature": "sampling temperature",
    "top_p": "nucleus sampling",
    "max_output_tokens": "cap on sampled tokens; reaching it makes the response 'incomplete'",
    "top_logprobs": "k most likely tokens per output token (with include 'message.output_text.logprobs')",
    "include": "'message.output_text.logprobs' adds the sampled tokens' logprobs; other values refused",
    "text": "format 'text'; 'json_object' / 'json_schema' constrain sampling on engines with structured outputs, else 400",
    "stream": "OpenAI's event stream, text as it is sampled",
    "stream_options": "include_obfuscation refused when true",
    "store": "true (default): the response is kept for previous_response_id and GET while its session lives; false: not kept",
    "metadata": "kept with the response and echoed in it",
    "truncation": "'disabled' only (an over-long conversation is an error, never silently cut)",
    "service_tier": "'auto' / 'default' only",
    "reasoning": "refused unless null: set the chat template's kwargs in the job instead",
    "background": "false only",
    "conversation": "refused: use previous_response_id within the session",
    "prompt": "refused (no stored prompt templates)",
    "max_tool_calls": "refused unless null (no built-in tools to count)",
    "context_management": "refused unless null (the agent manages its context)",
    "user": "refused unless null: the gateway's only caller is the episode",
    "safety_identifier": "refused unless null",
    "prompt_cache_key": "refused unless null: the engine caches each session's prefix by itself",
    "prompt_cache_retention": "refused unless null",
    "prompt_cache_options": "refused unless null",
    "moderation": "refused unless null",
    "access_programs": "refused unless null",
    "background_options": "refused unless null",
    "image": "refused unless null (text only)",
}

_NULL_ONLY = {
    "reasoning": "set the chat template's kwargs in the job (model.chat_template_kwargs) instead",
    "conversation": "the gateway keeps conversations per session: use previous_response_id",
    "prompt": "the gateway has no stored prompt templates",
    "max_tool_calls": "the gateway has no built-in tools to count",
    "context_management": "the agent manages its own context",
    "user": "the gateway's only caller is the episode (its session id)",
    "safety_identifier": "the gateway does no abuse monitoring",
    "prompt_cache_key": "the engine caches each session's prefix by itself",
    "prompt_cache_retention": "the engine caches each session's prefix by itself",
    "prompt_cache_options": "the engine caches each session's prefix by itself",
    "moderation": "the gateway does no moderation",
    "access_programs": "not supported",
    "background_options": "not supported",
    "image": "the gateway serves text only",
}

LOGPROBS_INCLUDE = "message.output_text.logprobs"


@dataclass
class ResponsesRequest:
    """A Responses API request as the token path takes it."""

    body: dict[str, Any]
    messages: list[Message]  # the whole conversation the turn answers (instructions first)
    conversation: list[Message]  # the same without the instructions (what a follow-up continues)
    tools: list[dict[str, Any]] | None
    sampling: SamplingParams
    turn: TurnRequest
    stream: bool
    store: bool
    logprobs: bool
    top_logprobs: int | None


@dataclass
class StoredResponse:
    session_id: str | None
    conversation: list[Message]
    data: dict[str, Any]


@dataclass
class ResponseStore:
    """Stored responses (``store: true``) by id, newest last, forgotten with their session."""

    limit: int = 10_000
    items: OrderedDict[str, StoredResponse] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, response_id: str, stored: StoredResponse) -> None:
        with self.lock:
            self.items[response_id] = stored
            while len(self.items) > self.limit:
                self.items.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        with self.lock:
            return self.items.get(response_id)

    def forget_sessions_except(self, live: set[str]) -> None:
        """Forget the responses of sessions that ended (stateless ones stay until the limit)."""
        with self.lock:
            for key in [
                k for k, v in self.items.items() if v.session_id is not None and v.session_id not in live
            ]:
                del self.items[key]

    def forget_session(self, session_id: str) -> None:
        with self.lock:
            for key in [k for k, v in self.items.items() if v.session_id == session_id]:
                del self.items[key]


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text"):
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise GatewayRequestError(
                    f"{where} content part {i} has type {kind!r}; the gateway takes text only", "input"
                )
        return "".join(parts)
    raise GatewayRequestError(f"{where} content must be a string or a list of text parts", "input")


def input_messages(items: Any) -> list[Message]:
    """Responses input items as chat messages (consecutive calls join the assistant turn before them)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise GatewayRequestError("'input' must be a string or a list of input items", "input")
    out: list[Message] = []
    reasoning: str | None = None
    for i, item in enumerate(items):
        where = f"input item {i}"
        if not isinstance(item, dict):
            raise GatewayRequestError(f"{where} must be an object", "input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise GatewayRequestError(f"{where} has role {role!r}", "input")
            message: Message = {"role": role, "content": _text(item.get("content"), where)}
            if role == "assistant" and reasoning is not None:
                message["reasoning_content"] = reasoning
                reasoning = None
            out.append(message)
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise GatewayRequestError(f"{where} (function_call) needs 'name' and 'call_id'", "input")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            if out and out[-1]["role"] == "assistant":  # the calls of the turn that said the message before
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                if reasoning is not None:
                    message["reasoning_content"] = reasoning
                    reasoning = None
                out.append(message)
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise GatewayRequestError(f"{where} (function_call_output) needs 'call_id'", "input")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": _text(item.get("output", ""), where),
                }
            )
        elif kind == "reasoning":
            texts = [p.get("text", "") for p in (item.get("content") or []) if isinstance(p, dict)]
            if not texts:
                texts = [p.get("text", "") for p in (item.get("summary") or []) if isinstance(p, dict)]
            reasoning = "".join(texts) or None
        else:
            raise GatewayRequestError(
                f"{where} has type {kind!r}; the gateway takes message, function_call, function_call_output and "
                "reasoning items",
                "input",
            )
    return out


def parse_responses(body: dict[str, Any], store: ResponseStore, session_id: str | None) -> ResponsesRequest:
    check_known(body, RESPONSES_FIELDS, "POST /v1/responses")
    for name, why in _NULL_ONLY.items():
        value = body.get(name)
        if value is not None and value != {} and value != []:
            raise GatewayRequestError(f"'{name}' is not supported: {why}; leave it out", name)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise GatewayRequestError("'model' must be a string", "model")
    if body.get("background") not in (None, False):
        raise GatewayRequestError(
            "'background' must be false: the gateway answers in the request", "background"
        )
    if body.get("truncation") not in (None, "disabled"):
        raise GatewayRequestError(
            "'truncation' must be 'disabled': an over-long conversation is an error, never silently cut",
            "truncation",
        )
    if body.get("service_tier") not in (None, "auto", "default"):
        raise GatewayRequestError(
            "'service_tier' must be 'auto' or 'default': the gateway has one tier", "service_tier"
        )
    stream_options = body.get("stream_options") or {}
    if (
        not isinstance(stream_options, dict)
        or set(stream_options) - {"include_obfuscation"}
        or stream_options.get("include_obfuscation")
    ):
        raise GatewayRequestError("'stream_options' takes only include_obfuscation: false", "stream_options")
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise GatewayRequestError("'metadata' must map strings to strings", "metadata")
    include = body.get("include") or []
    if not isinstance(include, list) or any(x != LOGPROBS_INCLUDE for x in include):
        raise GatewayRequestError(f"'include' takes only {LOGPROBS_INCLUDE!r}", "include")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise GatewayRequestError("'stream' must be a boolean", "stream")
    stored = body.get("store")
    if stored is not None and not isinstance(stored, bool):
        raise GatewayRequestError("'store' must be a boolean", "store")

    conversation: list[Message] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        held = store.get(previous) if isinstance(previous, str) else None
        if held is None:
            raise GatewayRequestError(
                f"previous response {previous!r} is not stored here (unknown, sent with store: false, or its session "
                "finished)",
                "previous_response_id",
                status=404,
            )
        if held.session_id != session_id:
            raise GatewayRequestError(
                f"previous response {previous!r} belongs to another session; previous_response_id continues a "
                "response within its own session",
                "previous_response_id",
            )
        conversation = [dict(m) for m in held.conversation]  # type: ignore[misc]
    if body.get("input") is None:
        raise GatewayRequestError("'input' is required", "input")
    conversation += input_messages(body.get("input"))
    if not conversation:
        raise GatewayRequestError("'input' holds no message", "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise GatewayRequestError("'instructions' must be a string", "instructions")
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + conversation

    body_for_sampling = {k: body.get(k) for k in ("temperature", "top_p")}
    body_for_sampling["max_tokens"] = number(body, "max_output_tokens", int, 1)
    sampling = sampling_from_body(body_for_sampling, max_tokens_field="max_tokens")
    top = number(body, "top_logprobs", int, 0, 20)
    logprobs = LOGPROBS_INCLUDE in include
    if top is not None:
        if not logprobs:
            raise GatewayRequestError(f"'top_logprobs' needs include [{LOGPROBS_INCLUDE!r}]", "top_logprobs")
        sampling.extra[TOP_LOGPROBS] = top
    text = body.get("text") or {}
    if not isinstance(text, dict) or set(text) - {"format", "verbosity"}:
        raise GatewayRequestError("'text' takes 'format'", "text")
    if text.get("verbosity") is not None:
        raise GatewayRequestError("text.verbosity is not supported; leave it out", "text")
    structured = structured_output(text.get("format"), param="text")
    if structured is not None:
        sampling.extra[STRUCTURED_OUTPUT] = structured
    tools = function_tools(body.get("tools"), flat=True)
    choice, name = tool_choice(body.get("tool_choice"), flat=True)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise GatewayRequestError("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    if (choice in ("required", "function") or parallel is False) and not tools:
        param = "tool_choice" if choice in ("required", "function") else "parallel_tool_calls"
        raise GatewayRequestError(f"'{param}' needs 'tools'", param)
    turn = TurnRequest(tool_choice=choice, function=name, parallel_tool_calls=parallel is not False)
    return ResponsesRequest(
        body=body,
        messages=messages,
        conversation=conversation,
        tools=tools,
        sampling=sampling,
        turn=turn,
        stream=bool(stream),
        store=stored is not False,
        logprobs=logprobs,
        top_logprobs=top,
    )


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_object(
    request: ResponsesRequest,
    response_id: str,
    model: str,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    created_at: float,
    incomplete: str | None = None,
) -> dict[str, Any]:
    body = request.body
    choice = body.get("tool_choice") or "auto"
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": request.store,
        "temperature": body.get("temperature"),
        "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
        "tool_choice": choice,
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "top_logprobs": body.get("top_logprobs"),
        "truncation": "disabled",
        "usage": usage,
        "metadata": body.get("metadata") or {},
        "user": None,
    }


def usage_of(response: LLMResponse) -> dict[str, Any]:
    usage = response.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["total_tokens"],
    }


def output_items(response: LLMResponse, logprobs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The answer as Responses output items: reasoning, the message, each valid call."""
    items: list[dict[str, Any]] = []
    if response.reasoning:
        items.append(reasoning_item(new_id("rs"), response.reasoning))
    if response.content:
        items.append(message_item(new_id("msg"), response.content, logprobs))
    for call in response.tool_calls:
        if call.error is None:
            items.append(call_item(new_id("fc"), call.id, call.name, call.arguments))
    return items


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": "completed",
    }


def message_item(
    item_id: str, text: str, logprobs: list[dict[str, Any]] | None, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}],
    }


def call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def conversation_after(request: ResponsesRequest, response: LLMResponse) -> list[Message]:
    """What a follow-up with ``previous_response_id`` continues: this input and this answer."""
    answer = response.message()
    if answer.get("tool_calls"):
        answer = {
            **answer,
            "tool_calls": [
                c for c, t in zip(answer["tool_calls"], response.tool_calls, strict=True) if t.error is None
            ],
        }
        if not answer["tool_calls"]:
            del answer["tool_calls"]
    return [*request.conversation, answer]


def sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def now() -> float:
    return float(int(time.time()))
