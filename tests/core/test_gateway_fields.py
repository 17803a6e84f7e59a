"""Every request field of the Chat Completions and Responses APIs (as the installed OpenAI SDK's
request types list them) takes effect or is refused with a 400 naming it: none is accepted and
ignored. Each field is sent with a non-default value to a gateway over the real tiny model, and
the effect is checked where it shows: the sampling settings the engine got, the prompt it saw,
what it sampled, or the answer's shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from aworld_core.gateway.fields import CHAT_FIELDS
from aworld_core.gateway.responses import RESPONSES_FIELDS
from aworld_core.tokens import HFTokenEngine
from aworld_core.tokens.engine import FREQUENCY_PENALTY, LOGIT_BIAS, PRESENCE_PENALTY, STOP_TOKEN_IDS
from support.gateway_clients import RecordingEngine, qwen_llm, start_gateway, tool_schema

pytest_plugins = ["aworld_core.testing.fixtures"]

CALC = tool_schema("calc", {"expr": {"type": "string"}})


class Seen:
    """What one request did: the HTTP answer and what the engine got for its session."""

    def __init__(self, status: int, body: Any, samplings: list[Any], calls: list[Any], tokenizer: Any, text: str):
        self.status, self.body, self.samplings, self.calls, self.tok, self.text = (
            status, body, samplings, calls, tokenizer, text,
        )

    @property
    def sampling(self) -> Any:
        return self.samplings[-1]

    @property
    def prompt(self) -> str:
        return self.tok.decode(self.calls[-1][0])

    @property
    def sampled(self) -> list[int]:
        return list(self.calls[-1][1].token_ids)


def refused(param: str, status: int = 400) -> Callable[[Seen], None]:
    def check(seen: Seen) -> None:
        assert seen.status == status, (param, seen.status, seen.body)
        assert seen.body["error"]["param"] == param, (param, seen.body)

    check.refusal = param  # type: ignore[attr-defined]
    return check


def ok(check: Callable[[Seen], Any]) -> Callable[[Seen], None]:
    def run(seen: Seen) -> None:
        assert seen.status == 200, seen.body
        assert check(seen) is not False

    return run


def _bias_token(tok) -> int:
    return tok.encode("a", add_special_tokens=False)[0]


def chat_cases(tok) -> dict[str, tuple[dict[str, Any], Callable[[Seen], None]]]:
    a = _bias_token(tok)
    close = tok.convert_tokens_to_ids("</tool_call>")
    return {
        "messages": ({"messages": [{"role": "user", "content": "fields walk"}]}, ok(lambda s: "fields walk" in s.prompt)),
        "model": ({"model": "some-other-name"}, ok(lambda s: s.body["model"] == "tiny-policy")),
        "temperature": ({"temperature": 0}, ok(lambda s: s.sampling.temperature == 0)),
        "top_p": ({"top_p": 0.5}, ok(lambda s: s.sampling.top_p == 0.5)),
        "max_tokens": ({"max_tokens": 3}, ok(lambda s: len(s.sampled) <= 3 and s.sampling.max_tokens == 3)),
        "max_completion_tokens": ({"max_completion_tokens": 2}, ok(lambda s: len(s.sampled) <= 2)),
        "seed": ({"seed": 7}, ok(lambda s: s.sampling.seed == 7)),
        "stop": ({"stop": ["zz"]}, ok(lambda s: s.sampling.stop == ["zz"])),
        "n": ({"n": 2}, refused("n")),
        "stream": ({"stream": True}, ok(lambda s: s.text.rstrip().endswith("data: [DONE]"))),
        "stream_options": (
            {"stream": True, "stream_options": {"include_usage": True}},
            ok(lambda s: '"completion_tokens"' in s.text.strip().split("\n\n")[-2]),
        ),
        "logprobs": (
            {"logprobs": True},
            ok(lambda s: [c["logprob"] for c in s.body["choices"][0]["logprobs"]["content"]] == s.calls[-1][1].logprobs),
        ),
        "top_logprobs": (
            {"logprobs": True, "top_logprobs": 2},
            ok(lambda s: all(len(c["top_logprobs"]) == 2 for c in s.body["choices"][0]["logprobs"]["content"])),
        ),
        "presence_penalty": ({"presence_penalty": 1.5}, ok(lambda s: s.sampling.extra[PRESENCE_PENALTY] == 1.5)),
        "frequency_penalty": ({"frequency_penalty": 1.5}, ok(lambda s: s.sampling.extra[FREQUENCY_PENALTY] == 1.5)),
        "logit_bias": (
            {"logit_bias": {str(a): 100}, "max_tokens": 4},
            ok(lambda s: s.sampled == [a] * 4 and s.sampling.extra[LOGIT_BIAS] == {a: 100.0}),
        ),
        "tools": ({"tools": [CALC]}, ok(lambda s: '"name": "calc"' in s.prompt)),
        "tool_choice": (
            {"tools": [CALC], "tool_choice": {"type": "function", "function": {"name": "calc"}}, "max_tokens": 8},
            ok(lambda s: s.prompt.endswith('<tool_call>\n{"name": "calc')),
        ),
        "parallel_tool_calls": (
            {"tools": [CALC], "parallel_tool_calls": False},
            ok(lambda s: close in s.sampling.extra[STOP_TOKEN_IDS]),
        ),
        "response_format": ({"response_format": {"type": "json_object"}}, refused("response_format")),
        "functions": ({"functions": [{"name": "calc", "parameters": {}}]}, refused("functions")),
        "function_call": ({"function_call": "auto"}, refused("function_call")),
        "reasoning_effort": ({"reasoning_effort": "high"}, refused("reasoning_effort")),
        "verbosity": ({"verbosity": "low"}, refused("verbosity")),
        "audio": ({"audio": {"voice": "alloy", "format": "wav"}}, refused("audio")),
        "modalities": ({"modalities": ["text", "audio"]}, refused("modalities")),
        "prediction": ({"prediction": {"type": "content", "content": "x"}}, refused("prediction")),
        "web_search_options": ({"web_search_options": {"search_context_size": "low"}}, refused("web_search_options")),
        "store": ({"store": True}, refused("store")),
        "metadata": ({"metadata": {"k": "v"}}, refused("metadata")),
        "service_tier": ({"service_tier": "priority"}, refused("service_tier")),
        "user": ({"user": "u"}, refused("user")),
        "safety_identifier": ({"safety_identifier": "s"}, refused("safety_identifier")),
        "prompt_cache_key": ({"prompt_cache_key": "k"}, refused("prompt_cache_key")),
        "prompt_cache_retention": ({"prompt_cache_retention": "24h"}, refused("prompt_cache_retention")),
        "prompt_cache_options": ({"prompt_cache_options": {"x": 1}}, refused("prompt_cache_options")),
        "moderation": ({"moderation": {"x": 1}}, refused("moderation")),
        "top_k": ({"top_k": 5}, ok(lambda s: s.sampling.top_k == 5)),
        "stop_token_ids": ({"stop_token_ids": [a]}, ok(lambda s: a in s.sampling.extra[STOP_TOKEN_IDS])),
        "an_unknown_field": ({"an_unknown_field": 1}, refused("an_unknown_field")),
    }


def responses_cases(tok) -> dict[str, tuple[dict[str, Any], Callable[[Seen], None]]]:
    close = tok.convert_tokens_to_ids("</tool_call>")
    calc = {"type": "function", "name": "calc", "parameters": CALC["function"]["parameters"]}

    def text_of(s: Seen) -> str:
        return "".join(p["text"] for i in s.body["output"] if i["type"] == "message" for p in i["content"])

    return {
        "input": ({"input": "fields walk"}, ok(lambda s: "fields walk" in s.prompt)),
        "instructions": ({"instructions": "Be terse."}, ok(lambda s: "<|im_start|>system\nBe terse." in s.prompt)),
        "previous_response_id": ({"previous_response_id": "resp_unknown"}, refused("previous_response_id", 404)),
        "model": ({"model": "another"}, ok(lambda s: s.body["model"] == "tiny-policy")),
        "tools": ({"tools": [calc]}, ok(lambda s: '"name": "calc"' in s.prompt)),
        "tool_choice": (
            {"tools": [calc], "tool_choice": {"type": "function", "name": "calc"}, "max_output_tokens": 8},
            ok(lambda s: s.prompt.endswith('<tool_call>\n{"name": "calc')),
        ),
        "parallel_tool_calls": (
            {"tools": [calc], "parallel_tool_calls": False},
            ok(lambda s: close in s.sampling.extra[STOP_TOKEN_IDS]),
        ),
        "temperature": ({"temperature": 0}, ok(lambda s: s.sampling.temperature == 0)),
        "top_p": ({"top_p": 0.5}, ok(lambda s: s.sampling.top_p == 0.5)),
        "max_output_tokens": (
            {"max_output_tokens": 3},
            ok(lambda s: len(s.sampled) <= 3
               and s.body["status"] == ("incomplete" if s.calls[-1][1].stop_reason == "length" else "completed")),
        ),
        "include": (
            {"include": ["message.output_text.logprobs"]},
            ok(lambda s: [lp["logprob"] for i in s.body["output"] if i["type"] == "message" for p in i["content"]
                          for lp in p["logprobs"]] in ([], s.calls[-1][1].logprobs)),
        ),
        "top_logprobs": (
            {"include": ["message.output_text.logprobs"], "top_logprobs": 2},
            ok(lambda s: all(len(lp["top_logprobs"]) == 2 for i in s.body["output"] if i["type"] == "message"
                             for p in i["content"] for lp in p["logprobs"])),
        ),
        "text": ({"text": {"format": {"type": "json_object"}}}, refused("text")),
        "stream": (
            {"stream": True},
            ok(lambda s: s.text.startswith("event: response.created") and s.body["status"] in ("completed", "incomplete")),
        ),
        "stream_options": ({"stream": True, "stream_options": {"include_obfuscation": True}}, refused("stream_options")),
        "store": ({"store": False}, ok(lambda s: s.body["store"] is False)),
        "metadata": ({"metadata": {"k": "v"}}, ok(lambda s: s.body["metadata"] == {"k": "v"})),
        "truncation": ({"truncation": "auto"}, refused("truncation")),
        "service_tier": ({"service_tier": "flex"}, refused("service_tier")),
        "reasoning": ({"reasoning": {"effort": "low"}}, refused("reasoning")),
        "background": ({"background": True}, refused("background")),
        "conversation": ({"conversation": "conv_1"}, refused("conversation")),
        "prompt": ({"prompt": {"id": "p"}}, refused("prompt")),
        "max_tool_calls": ({"max_tool_calls": 2}, refused("max_tool_calls")),
        "context_management": ({"context_management": [{"type": "compaction"}]}, refused("context_management")),
        "user": ({"user": "u"}, refused("user")),
        "safety_identifier": ({"safety_identifier": "s"}, refused("safety_identifier")),
        "prompt_cache_key": ({"prompt_cache_key": "k"}, refused("prompt_cache_key")),
        "prompt_cache_retention": ({"prompt_cache_retention": "24h"}, refused("prompt_cache_retention")),
        "prompt_cache_options": ({"prompt_cache_options": {"x": 1}}, refused("prompt_cache_options")),
        "moderation": ({"moderation": {"x": 1}}, refused("moderation")),
        "access_programs": ({"access_programs": ["x"]}, refused("access_programs")),
        "background_options": ({"background_options": {"x": 1}}, refused("background_options")),
        "image": ({"image": {"x": 1}}, refused("image")),
        "an_unknown_field": ({"an_unknown_field": 1}, refused("an_unknown_field")),
    }


def sdk_fields(module: Any, name: str) -> set[str]:
    fields = set()
    for cls in getattr(module, name).__mro__:
        fields |= set(getattr(cls, "__annotations__", {}))
    return fields | {"stream"}


def test_every_sdk_field_has_an_account_and_a_case(tiny_tokenizer):
    chat = sdk_fields(completion_create_params, "CompletionCreateParamsBase")
    responses = sdk_fields(response_create_params, "ResponseCreateParamsBase")
    assert chat - set(CHAT_FIELDS) == set() and chat - set(chat_cases(tiny_tokenizer)) == set()
    assert responses - set(RESPONSES_FIELDS) == set() and responses - set(responses_cases(tiny_tokenizer)) == set()
    # and every field the gateway takes is walked below
    assert set(CHAT_FIELDS) <= set(chat_cases(tiny_tokenizer))
    assert set(RESPONSES_FIELDS) <= set(responses_cases(tiny_tokenizer))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from aworld_core.testing import get_tiny_model_dir, load_tiny_model, load_tiny_tokenizer

    directory = get_tiny_model_dir()
    tok = load_tiny_tokenizer(directory)
    engine = RecordingEngine(HFTokenEngine(load_tiny_model(directory), tok, max_new_tokens=12))
    server = start_gateway(qwen_llm(engine, tok))
    yield server, engine, tok
    server.stop()


def _walk(gateway, route: str, cases: dict[str, Any], base: Callable[[str], dict[str, Any]]) -> None:
    server, engine, tok = gateway
    failures = []
    with httpx.Client(timeout=120) as http:
        for name, (extra, check) in cases.items():
            session = f"{route.replace('/', '-')}-{name}"
            body = {**base(name), **{k: v for k, v in extra.items() if v is not None}}
            r = http.post(f"{server.session_base_url(session)}/{route}", json=body)
            text = r.text
            try:
                data = r.json()
            except json.JSONDecodeError:
                data = None
            if data is None and r.status_code == 200:  # a stream: the last event's object
                events = [line[6:] for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]
                data = json.loads(events[-1]) if events else None
                data = data.get("response", data) if isinstance(data, dict) else data
            seen = Seen(r.status_code, data, engine.samplings.get(session, []), engine.calls.get(session, []), tok, text)
            try:
                check(seen)
            except (AssertionError, KeyError, IndexError, TypeError) as exc:
                failures.append(f"{name}: {type(exc).__name__} {exc}")
            server.gateway.finish_session(session)
    assert not failures, "\n".join(failures)


def test_every_chat_completions_field_takes_effect_or_is_refused(gateway):
    tok = gateway[2]
    _walk(gateway, "chat/completions", chat_cases(tok),
          lambda name: {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6})


def test_every_responses_field_takes_effect_or_is_refused(gateway):
    tok = gateway[2]
    _walk(gateway, "responses", responses_cases(tok), lambda name: {"input": "hi", "max_output_tokens": 6})
