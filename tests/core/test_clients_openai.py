"""The official OpenAI SDK, unmodified, against the gateway: chat completions (plain, streamed,
constrained), the Responses API (input items, function tools and their outputs,
previous_response_id, streaming events), and client mistakes the SDK must not retry. Every
episode's segments are checked against what the engine sampled."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from aworld_core.testing import check_segments
from aworld_core.tokens import HFTokenEngine, ScriptedTokenEngine
from support.gateway_clients import (
    RecordingEngine,
    ToolPolicy,
    qwen_llm,
    scripted_calls,
    start_gateway,
    tool_schema,
)

pytest_plugins = ["aworld_core.testing.fixtures"]

WEATHER = tool_schema("get_weather", {"city": {"type": "string"}})
TIME = tool_schema("get_time", {"zone": {"type": "string"}})
TOOLS = [WEATHER, TIME]


class Counter:
    """Counts the HTTP requests the SDK sends (to prove it did not retry)."""

    def __init__(self):
        self.requests = 0

    async def __call__(self, request: httpx.Request) -> None:
        self.requests += 1


def client(base_url: str, counter: Counter | None = None, **kwargs) -> openai.AsyncOpenAI:
    hooks = {"request": [counter]} if counter else {}
    return openai.AsyncOpenAI(
        base_url=base_url, api_key="aworld", http_client=httpx.AsyncClient(event_hooks=hooks), **kwargs
    )


@pytest.fixture
def scripted(tiny_tokenizer):
    policy = ToolPolicy(
        tiny_tokenizer,
        plan=[[("get_weather", {"city": "Paris"})]],
        arguments={"get_time": {"zone": "CET"}, "get_weather": {"city": "Paris"}},
    )
    engine = ScriptedTokenEngine(policy, token_delay_s=0.0)
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    yield server, engine
    server.stop()


async def test_a_tool_episode_with_chat_completions_plain_and_streamed(scripted):
    server, engine = scripted
    api = client(server.session_base_url("ep"))
    messages = [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    first = await api.chat.completions.create(model="tiny-policy", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    pieces = []
    stream = await api.chat.completions.create(
        model="tiny-policy", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True},
        logprobs=True,
    )
    usage = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert "".join(pieces) == "The answer is 5." and len(pieces) > 1  # several deltas: incremental
    assert usage.completion_tokens == len(scripted_calls(engine, "ep")[1].output.token_ids)
    view = server.gateway.finish_session("ep")
    assert view.num_segments == 1 and view.num_turns == 2
    check_segments(view, scripted_calls(engine, "ep"))
    # the developer message was rendered as the template's system turn
    prompt = server.gateway.llm.renderer.decode(view.prompt_ids)
    assert prompt.startswith("<|im_start|>system\nAnswer briefly.")


async def test_a_named_function_is_the_call_that_comes_back(scripted):
    """A forced get_time call came back as get_weather before: now the name is forced (mask 0)."""
    server, engine = scripted
    api = client(server.session_base_url("named"))
    out = await api.chat.completions.create(
        model="tiny-policy",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    (call,) = out.choices[0].message.tool_calls
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {"zone": "CET"}
    view = server.gateway.finish_session("named")
    check_segments(view, scripted_calls(engine, "named"))
    # the forced ids end the prompt (the engine saw them; the policy did not sample them)
    tok = server.gateway.llm.tokenizer
    assert tok.decode(view.prompt_ids).endswith('<|im_start|>assistant\n<tool_call>\n{"name": "get_time')
    assert tok.decode(view.response_ids).startswith('", "arguments": {"zone": "CET"}}')


async def test_required_and_one_call_at_most(tiny_tokenizer):
    policy = ToolPolicy(tiny_tokenizer, plan=[[("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]])
    engine = ScriptedTokenEngine(policy)
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    try:
        api = client(server.session_base_url("one"))
        out = await api.chat.completions.create(
            model="tiny-policy", messages=[{"role": "user", "content": "both?"}], tools=TOOLS,
            parallel_tool_calls=False,
        )
        (call,) = out.choices[0].message.tool_calls  # the policy wrote two; the turn stopped after one
        assert call.function.name == "get_weather" and out.choices[0].finish_reason == "tool_calls"
        sampled = scripted_calls(engine, "one")[0].output.token_ids
        assert tiny_tokenizer.decode(sampled[-1:]) == "</tool_call>"
        messages = [{"role": "user", "content": "both?"}, out.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        out = await api.chat.completions.create(
            model="tiny-policy", messages=messages, tools=TOOLS, tool_choice="required"
        )
        assert out.choices[0].message.tool_calls[0].function.name == "get_weather"
        view = server.gateway.finish_session("one")
        check_segments(view, scripted_calls(engine, "one"))
        # the turn that stopped on </tool_call> got the template's terminator as env (mask 0)
        text = tiny_tokenizer.decode(view.response_ids)
        assert "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>" in text
    finally:
        server.stop()


async def test_client_mistakes_are_4xx_the_sdk_does_not_retry(tiny_tokenizer):
    policy = ToolPolicy(tiny_tokenizer, plan=[])
    engine = ScriptedTokenEngine(policy, delay_s=0.3)
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    try:
        counter = Counter()
        api = client(server.session_base_url("busy"), counter)  # the SDK's default: 2 retries
        ask = [{"role": "user", "content": "hi"}]
        results = await asyncio.gather(
            api.chat.completions.create(model="tiny-policy", messages=ask),
            api.chat.completions.create(model="tiny-policy", messages=[*ask, {"role": "user", "content": "again"}]),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, Exception)]
        assert len(errors) == 1 and isinstance(errors[0], openai.ConflictError), results
        assert errors[0].status_code == 409 and "in flight" in errors[0].message
        assert counter.requests == 2  # not retried
        view = server.gateway.finish_session("busy")
        assert view.num_turns == 1 and view.num_segments == 1

        counter.requests = 0
        with pytest.raises(openai.APIStatusError) as finished:
            await api.chat.completions.create(model="tiny-policy", messages=ask)
        assert finished.value.status_code == 410 and counter.requests == 1
        assert "was finished" in finished.value.message

        async with httpx.AsyncClient() as http:
            r = await http.get(f"http://{server.address}/sessions/nobody/training")
            assert r.status_code == 404 and r.headers["x-should-retry"] == "false"
    finally:
        server.stop()


async def test_fields_the_engine_cannot_honour_are_refused_not_ignored(scripted):
    server, _ = scripted
    api = client(server.session_base_url("refused"))
    ask = [{"role": "user", "content": "hi"}]
    cases = {
        "response_format": {"response_format": {"type": "json_object"}},
        "logit_bias": {"logit_bias": {"5": 10}},  # the scripted engine has no logit_bias
        "top_logprobs": {"logprobs": True, "top_logprobs": 2},
        "functions": {"functions": [{"name": "f", "parameters": {}}]},
        "reasoning_effort": {"reasoning_effort": "low"},
        "user": {"user": "u-1"},
    }
    for param, extra in cases.items():
        with pytest.raises(openai.BadRequestError) as refused:
            await api.chat.completions.create(model="tiny-policy", messages=ask, **extra)
        assert refused.value.body["param"] == param, (param, refused.value.body)


async def test_the_responses_api_with_function_tools_and_previous_response_id(scripted):
    server, engine = scripted
    api = client(server.session_base_url("resp"))
    tools = [{"type": "function", "name": f["function"]["name"], "parameters": f["function"]["parameters"],
              "strict": True} for f in TOOLS]
    first = await api.responses.create(model="tiny-policy", instructions="Be brief.", input="Weather in Paris?",
                                       tools=tools)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    second = await api.responses.create(
        model="tiny-policy", instructions="Be brief.", previous_response_id=first.id, tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.output_text == "The answer is 5." and second.status == "completed"
    assert second.previous_response_id == first.id
    stored = await api.responses.retrieve(second.id)
    assert stored.output_text == "The answer is 5."
    view = server.gateway.finish_session("resp")
    assert view.num_segments == 1 and view.num_turns == 2  # the follow-up extended the episode
    check_segments(view, scripted_calls(engine, "resp"))
    with pytest.raises(openai.NotFoundError) as gone:  # the session's stored responses went with it (404, as OpenAI)
        await client(server.session_base_url("resp2")).responses.create(
            model="tiny-policy", input="x", previous_response_id=second.id
        )
    assert gone.value.body["param"] == "previous_response_id"


async def test_the_responses_api_streams_openai_events(scripted):
    server, engine = scripted
    api = client(server.session_base_url("rs"))
    tools = [{"type": "function", "name": f["function"]["name"], "parameters": f["function"]["parameters"]}
             for f in TOOLS]
    kinds, deltas = [], []
    stream = await api.responses.create(model="tiny-policy", input="Weather?", tools=tools, stream=True)
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.done" in kinds
    (call,) = [i for i in final.output if i.type == "function_call"]
    input_items = [{"role": "user", "content": "Weather?"}, call.model_dump(exclude_none=True),
                   {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    stream = await api.responses.create(model="tiny-policy", input=input_items, tools=tools, stream=True)
    async for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            final = event.response
    assert "".join(deltas) == final.output_text == "The answer is 5." and len(deltas) > 1
    view = server.gateway.finish_session("rs")
    assert view.num_segments == 1
    check_segments(view, scripted_calls(engine, "rs"))


async def test_a_real_model_with_logprobs_top_logprobs_penalties_and_bias(tiny_model, tiny_tokenizer):
    engine = RecordingEngine(HFTokenEngine(tiny_model, tiny_tokenizer))
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    try:
        api = client(server.session_base_url("hf"))
        favourite = tiny_tokenizer.encode("a", add_special_tokens=False)[0]
        out = await api.chat.completions.create(
            model="tiny-policy", messages=[{"role": "user", "content": "hi"}], max_tokens=5, seed=1,
            logprobs=True, top_logprobs=3, logit_bias={str(favourite): 100}, presence_penalty=0.5,
        )
        content = out.choices[0].logprobs.content
        assert [c.token for c in content] == ["a"] * 5  # the bias took effect
        assert all(len(c.top_logprobs) == 3 for c in content)
        ((prompt, sampled),) = engine.calls["hf"]
        assert [c.logprob for c in content] == sampled.logprobs
        view = server.gateway.finish_session("hf")
        check_segments(view, engine.calls["hf"])
    finally:
        server.stop()
