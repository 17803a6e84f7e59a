"""Every request field the gateway takes, and what each does: applied, or refused with a 400 that
names it. None is accepted and ignored (an accepted field that silently does nothing changes an
agent's behaviour without anyone noticing: a forced call answered with another, a JSON answer
that is not JSON). A field the gateway does not know is refused too, as OpenAI refuses it.

``CHAT_FIELDS`` / ``RESPONSES_FIELDS`` list the fields with a one-line account each (the docs and
the test that walks every field of the OpenAI SDK's request types read them); the parsers below
apply them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import (
    FREQUENCY_PENALTY,
    LOGIT_BIAS,
    PRESENCE_PENALTY,
    STOP_TOKEN_IDS,
    STRUCTURED_OUTPUT,
    TOP_LOGPROBS,
)
from aworld_core.tokens.turn import TurnRequest


class GatewayRequestError(UsageError):
    """A request the gateway refuses (HTTP 400, or ``status``: 404 for something named that is not
    there, as OpenAI answers), with the OpenAI error ``param`` it concerns."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400):
        super().__init__(message)
        self.param = param
        self.status = status


# field -> what the gateway does with it (applied / refused and why)
CHAT_FIELDS: dict[str, str] = {
    "messages": "the conversation; 'developer' messages are rendered as the template's system role when it has no developer role",
    "model": "any name reaches the one policy the gateway serves; the answer names the served model",
    "temperature": "sampling temperature (0 = greedy)",
    "top_p": "nucleus sampling",
    "max_tokens": "cap on sampled tokens (also capped by the episode's response budget)",
    "max_completion_tokens": "same as max_tokens (wins over it)",
    "seed": "per-request seed",
    "stop": "stop strings (HF engine; the vLLM engine refuses them: it never sees text)",
    "n": "only 1 (each choice would be a separate episode)",
    "stream": "incremental SSE: text as it is sampled, tool calls as OpenAI sends them",
    "stream_options": "include_usage applied; include_obfuscation refused when true",
    "logprobs": "per-token logprobs of the sampled tokens (the ones trained)",
    "top_logprobs": "the k most likely tokens per sampled token (engines with top_logprobs; needs logprobs: true)",
    "presence_penalty": "OpenAI's presence penalty over the tokens sampled so far (engines with penalties, else 400)",
    "frequency_penalty": "OpenAI's frequency penalty (engines with penalties, else 400)",
    "logit_bias": "token id -> bias added to the logits (engines with logit_bias, else 400)",
    "tools": "function tools (type 'function'); other tool types refused",
    "tool_choice": "'auto'; 'none' bans the call-opening token; 'required' / a named function force the call's prefix (mask 0)",
    "parallel_tool_calls": "false stops the turn on the token that closes its first call",
    "response_format": "'text'; 'json_object' / 'json_schema' constrain sampling on engines with structured outputs, else 400",
    "functions": "refused: legacy; send 'tools'",
    "function_call": "refused: legacy; send 'tool_choice'",
    "reasoning_effort": "refused unless null: set the chat template's kwargs in the job instead",
    "verbosity": "refused unless null",
    "audio": "refused unless null (text only)",
    "modalities": "['text'] only",
    "prediction": "refused unless null (no predicted outputs)",
    "web_search_options": "refused unless null (no web search)",
    "store": "false only (nothing is stored for later retrieval)",
    "metadata": "refused unless null (it is stored with 'store', which the gateway does not do)",
    "service_tier": "'auto' / 'default' only (one tier)",
    "user": "refused unless null: the gateway has one caller, the episode (its session)",
    "safety_identifier": "refused unless null (no abuse monitoring)",
    "prompt_cache_key": "refused unless null: the engine caches each session's prefix by itself",
    "prompt_cache_retention": "refused unless null",
    "prompt_cache_options": "refused unless null",
    "moderation": "refused unless null (no moderation)",
    # vLLM-style extras
    "top_k": "top-k sampling (vLLM extra; <= 0 means off)",
    "stop_token_ids": "extra stop ids (vLLM extra)",
}

_NULL_ONLY = {
    "reasoning_effort": "set the chat template's kwargs in the job (model.chat_template_kwargs) instead",
    "verbosity": "the policy's verbosity is what it learned",
    "audio": "the gateway serves text only",
    "prediction": "the gateway has no predicted outputs",
    "web_search_options": "the gateway has no web search; give the agent a search tool",
    "metadata": "metadata is stored with 'store', which the gateway does not do",
    "user": "the gateway's only caller is the episode (its session id)",
    "safety_identifier": "the gateway does no abuse monitoring",
    "prompt_cache_key": "the engine caches each session's prefix by itself",
    "prompt_cache_retention": "the engine caches each session's prefix by itself",
    "prompt_cache_options": "the engine caches each session's prefix by itself",
    "moderation": "the gateway does no moderation",
    "functions": "legacy function calling: send 'tools' ([{'type': 'function', 'function': ...}])",
    "function_call": "legacy function calling: send 'tool_choice'",
}


@dataclass
class ChatRequest:
    """A Chat Completions request as the token path takes it."""

    messages: list[Any]
    tools: list[dict[str, Any]] | None
    sampling: SamplingParams
    turn: TurnRequest
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _null_only(body: dict[str, Any], name: str, why: str) -> None:
    value = body.get(name)
    if value is not None and value != {} and value != []:
        raise GatewayRequestError(f"'{name}' is not supported: {why}; leave it out", name)


def check_known(body: dict[str, Any], known: dict[str, str], api: str) -> None:
    unknown = sorted(k for k in body if k not in known)
    if unknown:
        raise GatewayRequestError(
            f"unrecognized request field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for {api}; "
            f"the gateway takes: {', '.join(sorted(known))}",
            unknown[0],
        )


def number(
    body: dict[str, Any], name: str, kind: type, low: float | None = None, high: float | None = None
) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not isinstance(value, int))
    ):
        raise GatewayRequestError(f"'{name}' must be a {kind.__name__}, got {value!r}", name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise GatewayRequestError(f"'{name}' must be within [{low}, {high}], got {value!r}", name)
    return kind(value)


def sampling_from_body(
    body: dict[str, Any], *, max_tokens_field: str = "max_completion_tokens"
) -> SamplingParams:
    """OpenAI (and vLLM-style extra) sampling fields as ``SamplingParams``; bad values raise."""
    max_tokens = number(body, max_tokens_field, int, 1)
    if max_tokens is None and max_tokens_field != "max_tokens":
        max_tokens = number(body, "max_tokens", int, 1)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise GatewayRequestError("'stop' must be a string or a list of strings", "stop")
    extra: dict[str, Any] = {}
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None:
        if not (
            isinstance(stop_ids, list)
            and all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids)
        ):
            raise GatewayRequestError("'stop_token_ids' must be a list of ints", "stop_token_ids")
        extra[STOP_TOKEN_IDS] = stop_ids
    for name, key in (("presence_penalty", PRESENCE_PENALTY), ("frequency_penalty", FREQUENCY_PENALTY)):
        value = number(body, name, float, -2, 2)
        if value:
            extra[key] = value
    bias = body.get("logit_bias")
    if bias is not None:
        extra[LOGIT_BIAS] = _logit_bias(bias)
    top_k = number(body, "top_k", int)
    return SamplingParams(
        temperature=number(body, "temperature", float, 0, 2),
        top_p=number(body, "top_p", float, 0, 1),
        top_k=None if top_k is None or top_k <= 0 else top_k,
        max_tokens=max_tokens,
        stop=stop or None,
        seed=number(body, "seed", int),
        extra=extra,
    )


def _logit_bias(bias: Any) -> dict[int, float]:
    if not isinstance(bias, dict):
        raise GatewayRequestError(
            "'logit_bias' must map token ids (as strings) to numbers in [-100, 100]", "logit_bias"
        )
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise GatewayRequestError(f"'logit_bias' key {key!r} is not a token id", "logit_bias") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise GatewayRequestError(
                f"'logit_bias' value for {key!r} must be a number in [-100, 100]", "logit_bias"
            )
        if token < 0:
            raise GatewayRequestError(f"'logit_bias' key {key!r} is not a token id", "logit_bias")
        out[token] = float(value)
    return out


def function_tools(tools: Any, *, flat: bool = False, param: str = "tools") -> list[dict[str, Any]] | None:
    """Function tool schemas in the Chat Completions shape (``flat``: the Responses API's shape,
    ``{"type": "function", "name": ..., "parameters": ...}``); other tool types are refused."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise GatewayRequestError(f"'{param}' must be a list of tool schemas", param)
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise GatewayRequestError(
                f"'{param}[{i}]' has type {kind!r}; the gateway serves function tools only (the agent runs its tools)",
                param,
            )
        fn = {k: v for k, v in tool.items() if k != "type"} if flat else tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise GatewayRequestError(f"'{param}[{i}]' needs a function with a 'name'", param)
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise GatewayRequestError(f"'{param}[{i}]' strict must be a boolean", param)
        allowed = {"name", "description", "parameters", "strict"} | ({"defer_loading"} if flat else set())
        extra = sorted(set(fn) - allowed)
        if extra:
            raise GatewayRequestError(f"'{param}[{i}]' has unrecognized function fields {extra}", param)
        if fn.get("defer_loading"):
            raise GatewayRequestError(f"'{param}[{i}]' defer_loading is not supported; leave it out", param)
        _check_parameters(fn, f"{param}[{i}]", param)
        function = {
            k: fn[k] for k in ("name", "description", "parameters", "strict") if fn.get(k) is not None
        }
        out.append({"type": "function", "function": function})
    return out or None


def _check_parameters(fn: dict[str, Any], where: str, param: str) -> None:
    """A tool's ``parameters`` must be a JSON Schema object (a strict tool's a valid schema): the
    parser and the strict-arguments check read it after the turn is sampled, where a broken one
    would fail the request with a 500 and a sampled turn thrown away."""
    schema = fn.get("parameters")
    if schema is None:
        return
    if not isinstance(schema, dict) or not isinstance(schema.get("properties", {}), dict):
        raise GatewayRequestError(
            f"'{where}' parameters must be a JSON Schema object (properties an object), got {schema!r}", param
        )
    if fn.get("strict"):
        import jsonschema

        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise GatewayRequestError(f"'{where}' parameters is not a valid JSON Schema: {exc.message}", param) from None


def tool_choice(value: Any, *, flat: bool = False) -> tuple[str | None, str | None]:
    """``(choice, function name)`` of a ``tool_choice`` (chat shape, or the Responses API's)."""
    if value is None or value == "auto":
        return None, None
    if value in ("none", "required"):
        return value, None
    if isinstance(value, dict) and value.get("type") == "function":
        name = value.get("name") if flat else (value.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return "function", name
    raise GatewayRequestError(
        f"tool_choice {value!r} is not supported: use 'auto', 'none', 'required' or "
        + (
            "{'type': 'function', 'name': NAME}"
            if flat
            else "{'type': 'function', 'function': {'name': NAME}}"
        ),
        "tool_choice",
    )


def structured_output(value: Any, *, param: str) -> dict[str, Any] | None:
    """The engine's structured-output request of a ``response_format`` (chat) / ``text.format``."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        raise GatewayRequestError(f"'{param}' must have type 'text', 'json_object' or 'json_schema'", param)
    if value["type"] == "text":
        return None
    if value["type"] == "json_object":
        return {"json_object": True}
    schema_holder = value.get("json_schema", value)  # chat nests it; the Responses API does not
    schema = schema_holder.get("schema") if isinstance(schema_holder, dict) else None
    if not isinstance(schema, dict):
        raise GatewayRequestError(f"'{param}' json_schema needs a 'schema' object", param)
    return {"json_schema": schema}


def parse_chat(body: dict[str, Any]) -> ChatRequest:
    """A Chat Completions body as a ``ChatRequest``; every field applied or refused."""
    check_known(body, CHAT_FIELDS, "POST /v1/chat/completions")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GatewayRequestError("'messages' must be a non-empty list", "messages")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise GatewayRequestError("'model' must be a string", "model")
    for name, why in _NULL_ONLY.items():
        _null_only(body, name, why)
    if body.get("n", 1) not in (None, 1):
        raise GatewayRequestError(
            "only n=1 is supported: each choice would be a separate episode; send n requests", "n"
        )
    if body.get("modalities") not in (None, ["text"]):
        raise GatewayRequestError("'modalities' must be ['text']: the gateway serves text only", "modalities")
    if body.get("store") not in (None, False):
        raise GatewayRequestError(
            "'store' must be false: the gateway stores no completions for retrieval", "store"
        )
    if body.get("service_tier") not in (None, "auto", "default"):
        raise GatewayRequestError(
            "'service_tier' must be 'auto' or 'default': the gateway has one tier", "service_tier"
        )
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict) or set(stream_options) - {"include_usage", "include_obfuscation"}:
        raise GatewayRequestError(
            "'stream_options' takes include_usage (and include_obfuscation: false)", "stream_options"
        )
    if stream_options.get("include_obfuscation"):
        raise GatewayRequestError(
            "stream_options.include_obfuscation is not supported; leave it out", "stream_options"
        )
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise GatewayRequestError("'stream' must be a boolean", "stream")
    if stream_options and not stream:
        raise GatewayRequestError("'stream_options' needs 'stream': true", "stream_options")
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise GatewayRequestError("'logprobs' must be a boolean", "logprobs")
    top = number(body, "top_logprobs", int, 0, 20)
    if top is not None and not logprobs:
        raise GatewayRequestError("'top_logprobs' needs 'logprobs': true", "top_logprobs")

    sampling = sampling_from_body(body)
    if top is not None:
        sampling.extra[TOP_LOGPROBS] = top
    structured = structured_output(body.get("response_format"), param="response_format")
    if structured is not None:
        sampling.extra[STRUCTURED_OUTPUT] = structured
    tools = function_tools(body.get("tools"))
    choice, name = tool_choice(body.get("tool_choice"))
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise GatewayRequestError("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    if (choice in ("required", "function") or parallel is False) and not tools:
        param = "tool_choice" if choice in ("required", "function") else "parallel_tool_calls"
        raise GatewayRequestError(f"'{param}' needs 'tools'", param)
    turn = TurnRequest(
        tool_choice=None if choice is None else ("function" if name else choice),
        function=name,
        parallel_tool_calls=parallel is not False,
    )
    return ChatRequest(
        messages=messages,
        tools=tools,
        sampling=sampling,
        turn=turn,
        stream=bool(stream),
        include_usage=bool(stream_options.get("include_usage")),
        logprobs=bool(logprobs),
        top_logprobs=top,
    )
