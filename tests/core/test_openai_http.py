"""OpenAICompatibleLLM against a real OpenAI-compatible HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from aworld_core.errors import LLMError, UsageError
from aworld_core.llm.base import LLMClient
from aworld_core.llm.openai_http import OpenAICompatibleLLM, parse_tool_call
from aworld_core.schemas import SamplingParams
from support.openai_stub import OpenAIStub, free_port, reply, tool_call

TOOLS = [{"type": "function", "function": {"name": "add", "description": "", "parameters": {"type": "object"}}}]


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


def client(stub: OpenAIStub, **kw) -> OpenAICompatibleLLM:
    kw.setdefault("backoff_s", 0.01)
    return OpenAICompatibleLLM(stub.base_url, "m1", "sk-test", **kw)


async def test_chat_sends_openai_request_and_parses_reply(stub):
    stub.add(
        reply(
            "thinking done",
            tool_calls=[tool_call("add", {"a": 1, "b": 2}, id="c1")],
            reasoning="let me add",
        )
    )
    llm = client(stub, sampling=SamplingParams(temperature=0.5, top_k=20))
    assert isinstance(llm, LLMClient)
    messages = [{"role": "user", "content": "1+2?"}]
    response = await llm.chat(messages, TOOLS, SamplingParams(max_tokens=64, top_p=0.9), session_id="ep-1")
    await llm.aclose()

    body = stub.requests[0]
    assert body["model"] == "m1"
    assert body["messages"] == messages
    assert body["tools"] == TOOLS
    assert (body["temperature"], body["top_k"], body["max_tokens"], body["top_p"]) == (0.5, 20, 64, 0.9)
    assert "seed" not in body and "stop" not in body  # unset means "the engine's default", not null
    headers = stub.calls[0]["headers"]
    assert headers["Authorization"] == "Bearer sk-test"
    assert headers["X-Session-Id"] == "ep-1"

    assert response.content == "thinking done"
    assert response.reasoning == "let me add"
    assert response.finish_reason == "tool_calls"
    assert response.model == "m1"
    assert response.usage and all(isinstance(v, int) for v in response.usage.values())
    assert response.duration_s is not None and response.duration_s >= 0
    [call] = response.tool_calls
    assert (call.id, call.name, json.loads(call.arguments), call.error) == ("c1", "add", {"a": 1, "b": 2}, None)
    assert response.message()["tool_calls"][0]["function"]["name"] == "add"


async def test_invalid_tool_call_arguments_keep_an_error(stub):
    stub.add(
        reply(
            tool_calls=[
                tool_call("add", '{"a": 1, "b": ', id="bad"),
                tool_call("add", "[1, 2]", id="list"),
                {"id": "noname", "type": "function", "function": {"arguments": "{}"}},
                tool_call("add", {"a": 1}, id="good"),
            ]
        )
    )
    llm = client(stub)
    response = await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    bad, as_list, no_name, good = response.tool_calls
    assert bad.error and "not valid JSON" in bad.error and bad.arguments == '{"a": 1, "b": '
    assert as_list.error and "JSON object" in as_list.error
    assert no_name.error and "no function name" in no_name.error
    assert good.error is None
    # the assistant message carries every call (the runtime answers each, a failed one with an
    # error), failed ones with "{}" arguments so servers and templates can parse them
    calls = response.message()["tool_calls"]
    assert [c["id"] for c in calls] == ["bad", "list", "noname", "good"]
    assert [c["function"]["arguments"] for c in calls[:3]] == ["{}", "{}", "{}"]


def test_parse_tool_call_accepts_object_arguments():
    call = parse_tool_call({"id": "x", "function": {"name": "f", "arguments": {"k": [1, None]}}})
    assert call.error is None and json.loads(call.arguments) == {"k": [1, None]}
    empty = parse_tool_call({"id": "y", "function": {"name": "f", "arguments": ""}})
    assert empty.arguments == "{}" and empty.error is None


async def test_retries_5xx_and_429_then_succeeds(stub):
    stub.add(
        reply(status=503, body="overloaded"),
        reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "0"}),
        "finally",
    )
    llm = client(stub, retries=3)
    response = await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    assert response.content == "finally"
    assert len(stub.requests) == 3


async def test_gives_up_with_url_status_and_body(stub):
    stub.add(*[reply(status=502, body="bad gateway upstream") for _ in range(3)])
    llm = client(stub, retries=2)
    with pytest.raises(LLMError) as info:
        await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    text = str(info.value)
    assert stub.base_url + "/chat/completions" in text
    assert "HTTP 502" in text and "bad gateway upstream" in text and "3 attempts" in text


async def test_client_errors_are_not_retried(stub):
    stub.add(reply(status=401, body={"error": {"message": "invalid api key"}}), "never reached")
    llm = client(stub, retries=3)
    with pytest.raises(LLMError) as info:
        await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    assert len(stub.requests) == 1
    assert "HTTP 401" in str(info.value) and "invalid api key" in str(info.value)
    assert "llm_api_key" in str(info.value)


async def test_endpoint_down_is_an_llm_error():
    url = f"http://127.0.0.1:{free_port()}/v1"
    llm = OpenAICompatibleLLM(url, "m", retries=1, backoff_s=0.01)
    with pytest.raises(LLMError) as info:
        await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    assert url in str(info.value) and "no HTTP response" in str(info.value)


async def test_timeout_is_an_llm_error(stub):
    stub.add(reply("late", delay_s=2.0))
    llm = client(stub, timeout_s=0.2, retries=0)
    with pytest.raises(LLMError) as info:
        await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    assert "no response within 0.2 s" in str(info.value)


async def test_malformed_responses_are_llm_errors(stub):
    stub.add(reply(body={"id": "x", "choices": []}), reply(status=200, body="not json at all"))
    llm = client(stub, retries=0)
    with pytest.raises(LLMError, match="no choices"):
        await llm.chat([{"role": "user", "content": "x"}])
    with pytest.raises(LLMError, match="not JSON"):
        await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()


async def test_connections_are_reused(stub):
    stub.add(*["ok"] * 5)
    llm = client(stub)
    for _ in range(5):
        await llm.chat([{"role": "user", "content": "x"}])
    await llm.aclose()
    assert len({call["peer"] for call in stub.calls}) == 1


def test_one_client_serves_several_event_loops(stub):
    stub.add("one", "two")
    llm = client(stub)

    async def ask() -> str | None:
        return (await llm.chat([{"role": "user", "content": "x"}])).content

    assert asyncio.run(ask()) == "one"
    assert asyncio.run(ask()) == "two"
    asyncio.run(llm.aclose())


def test_bad_construction_is_a_usage_error():
    with pytest.raises(UsageError, match="not an http"):
        OpenAICompatibleLLM("localhost:8000", "m")
    with pytest.raises(UsageError, match="model"):
        OpenAICompatibleLLM("http://127.0.0.1:1/v1", "")
