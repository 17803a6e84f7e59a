"""The OpenAI-compatible gateway on a loopback port, spoken to over real HTTP."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from aworld_core.errors import AworldError
from aworld_core.gateway import (
    Gateway,
    GatewayServer,
    get_llm_server_address,
    get_llm_server_model_name,
    serve_gateway,
)
from aworld_core.testing import assistant_turn_text, load_template
from aworld_core.tokens import HFTokenEngine, ScriptedTokenEngine, TokenLLM

pytest_plugins = ["aworld_core.testing.fixtures"]  # the tiny model fixtures

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    }
]


def turn(tok, message) -> list[int]:
    return tok.encode(assistant_turn_text(tok, load_template("qwen2_5"), message, TOOLS), add_special_tokens=False)


CALL = {
    "role": "assistant",
    "content": "Computing.",
    "tool_calls": [{"id": "x", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2+3"}}}],
}
ANSWER = {"role": "assistant", "content": "It is 5."}


@pytest.fixture
def scripted(tiny_tokenizer):
    """A gateway whose engine answers with a tool call, then a final answer, per session."""
    per_session: dict[str, int] = {}
    script = [turn(tiny_tokenizer, CALL), turn(tiny_tokenizer, ANSWER)]

    def answer(prompt_ids, sampling, request_id):
        n = per_session.get(request_id, 0)
        per_session[request_id] = n + 1
        return script[min(n, 1)]

    engine = ScriptedTokenEngine(answer)
    llm = TokenLLM(engine, tiny_tokenizer, chat_template=load_template("qwen2_5"), model_name="tiny-policy")
    server = serve_gateway(llm)
    yield server, engine
    server.stop()


async def post(url: str, body, headers=None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        data = body if isinstance(body, str) else json.dumps(body)
        async with http.post(url, data=data, headers={"Content-Type": "application/json", **(headers or {})}) as r:
            return r.status, await r.json()


async def get(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.json()


async def test_models_and_health(scripted):
    server, _ = scripted
    status, models = await get(f"{server.base_url}/models")
    assert status == 200 and models["data"][0]["id"] == "tiny-policy"
    status, models = await get(f"{server.session_base_url('ep')}/models")
    assert models["data"][0]["id"] == "tiny-policy"
    assert (await get(f"http://{server.address}/health"))[1]["status"] == "ok"
    assert get_llm_server_address() == server.address == f"127.0.0.1:{server.port}"
    assert get_llm_server_model_name() == "tiny-policy"


async def test_an_openai_style_episode_is_recorded_token_for_token(scripted, tiny_tokenizer):
    server, engine = scripted
    url = f"{server.session_base_url('ep-1')}/chat/completions"
    messages = [{"role": "user", "content": "What is 2+3?"}]
    status, first = await post(url, {"model": "tiny-policy", "messages": messages, "tools": TOOLS, "temperature": 1.0})
    assert status == 200, first
    choice = first["choices"][0]
    assert first["object"] == "chat.completion" and choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "calc"
    assert json.loads(call["function"]["arguments"]) == {"expr": "2+3"}
    assert first["usage"]["completion_tokens"] == len(engine.calls[0].output.token_ids)

    messages += [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "5"}]
    status, second = await post(url, {"model": "tiny-policy", "messages": messages, "tools": TOOLS, "logprobs": True})
    assert status == 200 and second["choices"][0]["message"]["content"] == "It is 5."
    lps = second["choices"][0]["logprobs"]["content"]
    assert [x["logprob"] for x in lps] == engine.calls[1].output.logprobs

    status, debug = await get(f"http://{server.address}/sessions/ep-1/training")
    assert status == 200 and debug["num_turns"] == 2
    view = server.gateway.finish_session("ep-1")
    sampled = [t for t, m in zip(view.response_ids, view.response_mask, strict=True) if m]
    assert sampled == engine.calls[0].output.token_ids + engine.calls[1].output.token_ids
    assert not view.history_rewritten and not view.truncated
    rendered = tiny_tokenizer.apply_chat_template(
        [*messages, second["choices"][0]["message"]], tools=TOOLS, chat_template=load_template("qwen2_5"), tokenize=False
    )
    assert tiny_tokenizer.decode(view.prompt_ids + view.response_ids) + "\n" == rendered
    assert (await get(f"http://{server.address}/sessions/ep-1/training"))[0] == 404


async def test_session_from_the_header_and_stateless_calls(scripted):
    server, _ = scripted
    url = f"{server.base_url}/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, _ = await post(url, body, headers={"X-Session-Id": "ep-h"})
    assert status == 200 and server.gateway.training_view("ep-h").num_turns == 1
    status, _ = await post(url, body)
    assert status == 200 and server.gateway.llm.session_ids() == ["ep-h"]


async def test_a_client_that_rewrites_history_is_reported(scripted):
    server, _ = scripted
    url = f"{server.session_base_url('ep-r')}/chat/completions"
    messages = [{"role": "user", "content": "What is 2+3?"}]
    _, first = await post(url, {"messages": messages, "tools": TOOLS})
    # the client drops the assistant turn and answers the tool call anyway
    messages += [{"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    status, _ = await post(url, {"messages": messages, "tools": TOOLS})
    assert status == 200
    status, view = await get(f"http://{server.address}/sessions/ep-r/training")
    assert view["history_rewritten"] is True and view["num_turns"] == 1


async def test_streaming(scripted):
    server, _ = scripted
    url = f"{server.session_base_url('ep-s')}/chat/completions"
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "stream": True,
            "stream_options": {"include_usage": True}}
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as r:
        assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = await r.text()
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content == "Computing."
    first, rest = (d["tool_calls"][0] for d in deltas if d.get("tool_calls"))
    assert first["index"] == 0 and first["function"] == {"name": "calc", "arguments": ""} and first["id"]
    assert rest["index"] == 0 and json.loads(rest["function"]["arguments"]) == {"expr": "2+3"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ("{not json", None, "not JSON"),
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "only n=1"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 5}, "temperature", "within"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}, "max_tokens", "must be a int"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": 3}, "stop", "string or a list"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, None, "role 'wizard'"),
    ],
)
async def test_bad_requests_get_an_openai_error(scripted, body, param, message):
    server, _ = scripted
    status, error = await post(f"{server.base_url}/chat/completions", body)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error" and message in error["error"]["message"]
    assert error["error"]["param"] == param


async def test_engine_failures_are_a_502_with_the_reason(tiny_tokenizer):
    def broken(prompt_ids, sampling, request_id):
        raise RuntimeError("inference server unreachable")

    llm = TokenLLM(ScriptedTokenEngine(broken), tiny_tokenizer, chat_template=load_template("qwen2_5"))
    with GatewayServer(Gateway(llm)) as server:
        status, error = await post(
            f"{server.session_base_url('e')}/chat/completions", {"messages": [{"role": "user", "content": "x"}]}
        )
    assert status == 502 and "inference server unreachable" in error["error"]["message"]


class _StreamBreaks(ScriptedTokenEngine):
    """A streamed call sends its first scripted token, then the engine fails (inside a begun stream)."""

    async def stream(self, prompt_ids, sampling, *, request_id):
        async for piece in super().stream(prompt_ids, sampling, request_id=request_id):
            yield piece
            await asyncio.sleep(0.2)  # the gateway has begun its stream (the 200 is sent)
            raise RuntimeError("the engine died mid-stream")


async def test_server_side_failures_are_recorded_per_session_and_fail_it(tiny_tokenizer):
    """Every 5xx and a context-length 400 are recorded in the session (typed, secrets masked), a
    begun stream's failure too; client mistakes and stateless calls are not. A session with a
    standing failure is not trained: finish_session answers None; DELETE answers a 404 naming the
    failure when nothing was sampled, else 200 with the view marked ``"failed": true`` (and its
    ``error`` and ``gateway_failures``), so an HTTP consumer that skips the list is told too."""
    from aworld_core.gateway import CallFailure
    from aworld_core.secrets import register_secret

    secret = "sk-test-secret-27-abcdef"
    register_secret(secret)

    def broken(prompt_ids, sampling, request_id):
        raise RuntimeError(f"inference server unreachable (key {secret})")

    llm = TokenLLM(ScriptedTokenEngine(broken), tiny_tokenizer, chat_template=load_template("qwen2_5"),
                   max_prompt_tokens=60)
    hi = {"messages": [{"role": "user", "content": "x"}]}
    with GatewayServer(Gateway(llm)) as server:
        url = f"{server.session_base_url('e')}/chat/completions"
        assert (await post(url, hi))[0] == 502
        assert (await post(f"{server.session_base_url('e')}/responses", {"input": "x"}))[0] == 502
        status, error = await post(url, {"messages": [{"role": "user", "content": "x " * 100}]})
        assert status == 400 and error["error"]["code"] == "context_length_exceeded"
        assert (await post(url, {**hi, "n": 2}))[0] == 400  # a client mistake: not recorded
        assert (await post(f"{server.base_url}/chat/completions", hi))[0] == 502  # stateless: no episode
        failures = server.gateway.failures("e")
        assert all(isinstance(f, CallFailure) for f in failures)
        assert [(f.status, f.api, f.code) for f in failures] == [
            (502, "chat.completions", None), (502, "responses", None), (400, "chat.completions", "context_length_exceeded")
        ]
        assert secret not in failures[0].message and "***" in failures[0].message
        assert secret not in error["error"]["message"]
        async with aiohttp.ClientSession() as http, http.delete(f"http://{server.address}/sessions/e") as r:
            assert r.status == 404 and "the gateway failed 3 call(s): first: 502 " in (await r.json())["error"]["message"]
        assert server.gateway.failures("e") == []
        assert (await post(url, hi))[0] == 410  # finished: a client mistake, not recorded
        assert server.gateway.failures("e") == [] and server.gateway.finish_session("e") is None

    answer = turn(tiny_tokenizer, ANSWER)
    llm = TokenLLM(_StreamBreaks([answer] * 4), tiny_tokenizer, chat_template=load_template("qwen2_5"))
    with GatewayServer(Gateway(llm)) as server:
        url = f"{server.session_base_url('ep-f')}/chat/completions"
        assert (await post(url, hi))[0] == 200
        async with aiohttp.ClientSession() as http, http.post(url, json={
            "messages": [*hi["messages"], ANSWER, {"role": "user", "content": "go on"}], "stream": True}) as r:
            assert r.status == 200 and "the engine died mid-stream" in await r.text()
        status, view = await get(f"http://{server.address}/sessions/ep-f/training")
        assert status == 200 and [f["status"] for f in view["gateway_failures"]] == [502]
        assert view["failed"] is True and "the gateway failed 1 call(s): first: 502 " in view["error"]
        assert view["num_turns"] == 1 and server.gateway.training_view("ep-f").num_turns == 1
        assert server.gateway.finish_session("ep-f") is None  # a view, but a failure stands: not trained

        url = f"{server.session_base_url('ep-g')}/chat/completions"
        assert (await post(url, hi))[0] == 200
        async with aiohttp.ClientSession() as http, http.post(url, json={
            "messages": [*hi["messages"], ANSWER, {"role": "user", "content": "go on"}], "stream": True}) as r:
            assert r.status == 200 and "the engine died mid-stream" in await r.text()
        async with aiohttp.ClientSession() as http, http.delete(f"http://{server.address}/sessions/ep-g") as r:
            data = await r.json()  # a view to show, but not to train
        assert r.status == 200 and data["num_turns"] == 1 and data["failed"] is True
        assert "first: 502 " in data["error"] and [f["status"] for f in data["gateway_failures"]] == [502]


def test_a_retry_clears_only_a_502():
    """A 502 (the engine failed before anything was committed) is cleared by an answered identical
    retry; a 500 may come after the sampled turn was appended to the session, so it stands."""
    from aworld_core.gateway import CallFailure
    from aworld_core.gateway.failures import GatewayFailures, request_key

    record = GatewayFailures()
    key = request_key("chat.completions", b'{"messages": []}')
    record.record("e", CallFailure(status=502, message="engine down"), key)
    record.record("e", CallFailure(status=500, message="after append_sampled"), key)
    record.record("e", CallFailure(status=502, message="another request"), request_key("responses", b"{}"))
    record.answered("e", key)
    assert [(f.status, f.retried) for f in record.of("e")] == [(502, True), (500, False), (502, False)]


async def test_malformed_tool_calls_are_listed_apart(tiny_tokenizer):
    bad = tiny_tokenizer.encode('<tool_call>\n{"name": "calc", "arguments": {oops}\n</tool_call><|im_end|>',
                                add_special_tokens=False)
    llm = TokenLLM(ScriptedTokenEngine([bad]), tiny_tokenizer, chat_template=load_template("qwen2_5"))
    with GatewayServer(Gateway(llm)) as server:
        status, out = await post(
            f"{server.session_base_url('e')}/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS},
        )
    message = out["choices"][0]["message"]
    assert status == 200 and "tool_calls" not in message and out["choices"][0]["finish_reason"] == "stop"
    (invalid,) = message["invalid_tool_calls"]
    assert invalid["name"] == "calc" and "not valid JSON" in invalid["error"]


async def test_delete_finishes_a_session(scripted):
    server, _ = scripted
    await post(f"{server.session_base_url('ep-d')}/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    async with aiohttp.ClientSession() as http, http.delete(f"http://{server.address}/sessions/ep-d") as r:
        data = await r.json()
        assert r.status == 200 and data["num_turns"] == 1 and data["gateway_failures"] == []
        assert data["failed"] is False and "error" not in data
    assert server.gateway.training_view("ep-d") is None


async def test_in_loop_server_with_a_real_model(tiny_model, tiny_tokenizer):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    llm = TokenLLM(engine, tiny_tokenizer, chat_template=load_template("qwen2_5"), max_response_tokens=40)
    server = await GatewayServer(Gateway(llm)).astart()
    try:
        url = f"{server.session_base_url('ep')}/chat/completions"
        messages = [{"role": "user", "content": "hello"}]
        status, out = await post(url, {"messages": messages, "max_tokens": 6, "seed": 1})
        assert status == 200
        messages += [out["choices"][0]["message"], {"role": "user", "content": "and?"}]
        status, out = await post(url, {"messages": messages, "max_tokens": 6, "seed": 2})
        assert status == 200
    finally:
        await server.astop()
    view = llm.finish_session("ep")
    assert view.num_turns == 2 and sum(view.response_mask) == 12 and not view.history_rewritten


def test_no_current_gateway_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("aworld_core.gateway.server._current", None)
    with pytest.raises(AworldError, match="serve_gateway"):
        get_llm_server_address()
