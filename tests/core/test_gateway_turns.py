"""What a client asks of a turn, checked exactly: the HF engine's logit bias, penalties and top
logprobs against a teacher-forced forward pass, its token stream against its generation, streaming
that really is incremental (the first delta reaches the client while the engine still samples),
tool_choice 'none', and strict tool schemas."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from aworld_core.schemas import SamplingParams
from aworld_core.testing import load_template
from aworld_core.tokens import HFTokenEngine, ScriptedTokenEngine, TokenOutput
from aworld_core.tokens.engine import FREQUENCY_PENALTY, LOGIT_BIAS, PRESENCE_PENALTY, TOP_LOGPROBS
from support.gateway_clients import ToolPolicy, qwen_llm, start_gateway, tool_schema

pytest_plugins = ["aworld_core.testing.fixtures"]


@pytest.fixture
def prompt(tiny_tokenizer) -> list[int]:
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me about paris"}], chat_template=load_template("qwen2_5"),
        add_generation_prompt=True, tokenize=False,
    )
    return tiny_tokenizer.encode(text, add_special_tokens=False)


def forced_tables(model, prompt_ids, response_ids, temperature, bias, presence, frequency):
    """Per sampled position: (policy log_softmax(logits / T), processed log_softmax) by teacher forcing."""
    import torch

    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    start = len(prompt_ids) - 1
    counts = torch.zeros(logits.shape[-1])
    out = []
    for i, token in enumerate(response_ids):
        row = logits[start + i]
        adjusted = row.clone()
        for t, b in bias.items():
            adjusted[t] += b
        adjusted = adjusted - presence * (counts > 0).float() - frequency * counts
        out.append((torch.log_softmax(row / temperature, -1), torch.log_softmax(adjusted / temperature, -1)))
        counts[token] += 1
    return out


@pytest.mark.parametrize("mode", ["scaled", "processed"])
async def test_bias_and_penalties_are_openais_and_logprobs_follow_the_mode(tiny_model, tiny_tokenizer, prompt, mode):
    favourite = tiny_tokenizer.encode("a", add_special_tokens=False)[0]
    bias, presence, frequency = {favourite: 4.0}, 0.7, 0.4
    engine = HFTokenEngine(tiny_model, tiny_tokenizer, logprobs_mode=mode)
    sampling = SamplingParams(temperature=0.8, max_tokens=16, seed=5, extra={
        LOGIT_BIAS: bias, PRESENCE_PENALTY: presence, FREQUENCY_PENALTY: frequency, TOP_LOGPROBS: 4})
    out = await engine.generate(prompt, sampling, request_id="r")
    tables = forced_tables(tiny_model, prompt, out.token_ids, 0.8, bias, presence, frequency)
    for (policy, processed), token, logprob, top in zip(tables, out.token_ids, out.logprobs, out.top_logprobs,
                                                       strict=True):
        table = policy if mode == "scaled" else processed
        assert logprob == pytest.approx(float(table[token]), abs=1e-4)
        values, ids = table.topk(4)
        assert sorted(top) == sorted(ids.tolist())
        assert [top[i] for i in ids.tolist()] == pytest.approx(values.tolist(), abs=1e-4)


async def test_the_stream_is_the_generation(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer, batch_window_s=0)
    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=3, extra={TOP_LOGPROBS: 2})
    whole = await engine.generate(prompt, sampling, request_id="whole")
    pieces = [p async for p in engine.stream(prompt, sampling, request_id="pieces")]
    assert len(pieces) >= len(whole.token_ids) and pieces[-1].stop_reason == whole.stop_reason
    assert [t for p in pieces for t in p.token_ids] == whole.token_ids
    assert [lp for p in pieces for lp in p.logprobs] == pytest.approx(whole.logprobs, abs=1e-6)
    assert [t for p in pieces for t in p.top_logprobs] == [t for t in whole.top_logprobs]


class GatedEngine:
    """Hands over the first half of its planned ids, then waits until the test opens the gate: a
    client that got text before the gate opened got it while the engine was still sampling."""

    def __init__(self, ids: list[int]):
        self.ids = ids
        self.gate = asyncio.Event()

    async def generate(self, prompt_ids, sampling, *, request_id):
        return TokenOutput(self.ids, [-0.1] * len(self.ids), "stop", 0)

    async def stream(self, prompt_ids, sampling, *, request_id):
        half = len(self.ids) // 2
        for i, token in enumerate(self.ids):
            if i == half:
                await self.gate.wait()
            yield TokenOutput([token], [-0.1], "stop" if i == len(self.ids) - 1 else None, 0)


@pytest.mark.parametrize("api", ["chat/completions", "responses"])
async def test_streaming_is_incremental(tiny_tokenizer, api):
    text = "The weather in Paris is sunny and warm today.<|im_end|>"
    engine = GatedEngine(tiny_tokenizer.encode(text, add_special_tokens=False))
    llm = qwen_llm(engine, tiny_tokenizer)
    from aworld_core.gateway import Gateway, GatewayServer

    server = await GatewayServer(Gateway(llm)).astart()
    try:
        body = {"stream": True, **({"messages": [{"role": "user", "content": "hi"}]} if api.startswith("chat")
                                   else {"input": "hi"})}
        received = []
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream("POST", f"{server.session_base_url('inc')}/{api}", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    delta = (event["choices"][0]["delta"].get("content") if api.startswith("chat") and event["choices"]
                             else event.get("delta") if event.get("type") == "response.output_text.delta" else None)
                    if delta:
                        received.append((delta, engine.gate.is_set()))
                        engine.gate.set()  # the engine goes on only once text has arrived
        assert received and received[0][1] is False  # text before the engine finished sampling
        assert "".join(d for d, _ in received) == "The weather in Paris is sunny and warm today."
    finally:
        await server.astop()
    view = llm.finish_session("inc")
    assert [t for t, m in zip(view.response_ids, view.response_mask, strict=True) if m] == engine.ids


async def test_tool_choice_none_bans_the_call_opener(tiny_model, tiny_tokenizer):
    tools = [tool_schema("calc", {"expr": {"type": "string"}})]
    opener = tiny_tokenizer.convert_tokens_to_ids("<tool_call>")
    favour_calls = {str(opener): 100}  # the policy would open a call every token
    server = start_gateway(qwen_llm(HFTokenEngine(tiny_model, tiny_tokenizer), tiny_tokenizer))
    scripted = start_gateway(qwen_llm(ScriptedTokenEngine(ToolPolicy(tiny_tokenizer, plan=[])), tiny_tokenizer))
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 6,
                    "logit_bias": favour_calls, "logprobs": True}
            r = await http.post(f"{server.session_base_url('free')}/chat/completions", json=body)
            assert r.json()["choices"][0]["logprobs"]["content"][0]["token"] == "<tool_call>"
            r = await http.post(f"{server.session_base_url('none')}/chat/completions",
                                json={**body, "tool_choice": "none"})
            tokens = [c["token"] for c in r.json()["choices"][0]["logprobs"]["content"]]
            assert r.status_code == 200 and "<tool_call>" not in tokens
            r = await http.post(f"{scripted.session_base_url('none')}/chat/completions",
                                json={"messages": [{"role": "user", "content": "hi"}], "tools": tools,
                                      "tool_choice": "none"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    finally:
        server.stop()
        scripted.stop()


async def test_a_call_that_breaks_a_strict_schema_is_not_handed_over(tiny_tokenizer):
    strict = tool_schema("calc", {"expr": {"type": "string"}})
    strict["function"]["strict"] = True
    strict["function"]["parameters"]["additionalProperties"] = False
    policy = ToolPolicy(tiny_tokenizer, plan=[[("calc", {"expr": 5})]])  # a number, not a string
    server = start_gateway(qwen_llm(ScriptedTokenEngine(policy), tiny_tokenizer))
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            r = await http.post(f"{server.session_base_url('s')}/chat/completions",
                                json={"messages": [{"role": "user", "content": "hi"}], "tools": [strict]})
        message = r.json()["choices"][0]["message"]
        assert "tool_calls" not in message
        (invalid,) = message["invalid_tool_calls"]
        assert invalid["name"] == "calc" and "strict schema" in invalid["error"]
        view = server.gateway.finish_session("s")
        assert sum(view.response_mask) > 0  # the tokens stay in the episode
    finally:
        server.stop()


def _family_llm(name):
    from aworld_core.testing.templates import FAMILIES, family_template, family_tokenizer
    from aworld_core.tokens import TokenLLM

    fam = FAMILIES[name]
    tok = family_tokenizer(name)
    llm = TokenLLM(ScriptedTokenEngine([], features={LOGIT_BIAS}), tok, chat_template=family_template(name), family=fam.preset,
                   chat_template_kwargs=dict(fam.template_kwargs))
    return fam, tok, llm


FAMILY_NAMES = ["qwen2_5", "qwen3", "qwen3_coder", "mistral_v3", "mistral_v11", "deepseek_v3", "gemma3",
                "hermes2pro", "llama31", "gpt_oss", "glm45"]


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_constrained_turns_in_every_family_follow_the_template_or_are_refused(name):
    """A forced call is the start of what a model trained on the family's template samples for that
    call; a call's closing token and a call's opening token are in such a turn (and the opener in no
    plain answer); a family that cannot be constrained so refuses, naming the field."""
    from aworld_core.testing.templates import model_turn_text
    from aworld_core.tokens.turn import TurnRefused, TurnRequest, plan_turn, reset_turn, set_turn

    fam, tok, llm = _family_llm(name)
    tools = [tool_schema("calc", {"expr": {"type": "string"}})]
    msgs = [{"role": "user", "content": "What is 2+3?"}]
    rendered, _ = llm.renderer.prompt(msgs, tools)
    args = json.dumps({"expr": "1"}) if fam.arguments == "string" else {"expr": "1"}
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"id": "k1l2m3n4o", "type": "function", "function": {"name": "calc", "arguments": args}}]}
    sampled_call = model_turn_text(fam, tok, call, tools)
    sampled_answer = model_turn_text(fam, tok, {"role": "assistant", "content": "It is 5."}, tools)
    outcomes = {}
    for label, turn in (("named", TurnRequest(tool_choice="function", function="calc")),
                        ("required", TurnRequest(tool_choice="required")),
                        ("one", TurnRequest(parallel_tool_calls=False)),
                        ("none", TurnRequest(tool_choice="none"))):
        token = set_turn(turn)
        try:
            forced, sampling = plan_turn(llm, rendered, msgs, tools, SamplingParams())
        except TurnRefused as exc:
            assert exc.param in ("tool_choice", "parallel_tool_calls")
            outcomes[label] = "refused"
            continue
        finally:
            reset_turn(token)
        outcomes[label] = "ok"
        if label in ("named", "required"):
            assert sampled_call.startswith(tok.decode(forced)), (name, label, tok.decode(forced))
        if label == "one":
            for closer in sampling.extra.get("kept_stop_ids", []):
                assert tok.decode([closer]) in sampled_call
        if label == "none":
            banned = [t for t, b in sampling.extra[LOGIT_BIAS].items() if b == -100]
            assert banned and all(tok.decode([t]) in sampled_call and tok.decode([t]) not in sampled_answer
                                  for t in banned)
    if name in ("qwen2_5", "qwen3_coder", "deepseek_v3", "glm45", "hermes2pro"):
        assert set(outcomes.values()) == {"ok"}, outcomes
    if name in ("gemma3",):  # no calls rendered: nothing to force
        assert outcomes["named"] == outcomes["required"] == "refused"


@pytest.mark.parametrize("api", ["chat/completions", "responses"])
async def test_streamed_reasoning_content_and_calls_are_the_final_parse(tiny_tokenizer, api):
    from aworld_core.tokens import TokenLLM

    text = "<think>\nThe user wants 2+3.\n</think>\n\nLet me compute.\n<tool_call>\n" \
           '{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call><|im_end|>'
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    llm = TokenLLM(ScriptedTokenEngine([ids]), tiny_tokenizer, chat_template=load_template("qwen3"), family="qwen3")
    tools = [tool_schema("calc", {"expr": {"type": "string"}})]
    server = start_gateway(llm)
    try:
        chat = api.startswith("chat")
        body = {"stream": True, "tools": tools if chat else [{"type": "function", **tools[0]["function"]}],
                **({"messages": [{"role": "user", "content": "2+3?"}]} if chat else {"input": "2+3?"})}
        reasoning, content, calls = [], [], []
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream("POST", f"{server.session_base_url('think')}/{api}", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if chat and event["choices"]:
                        delta = event["choices"][0]["delta"]
                        reasoning.append(delta.get("reasoning_content") or "")
                        content.append(delta.get("content") or "")
                        calls += delta.get("tool_calls") or []
                    elif not chat:
                        kind = event["type"]
                        if kind == "response.reasoning_text.delta":
                            reasoning.append(event["delta"])
                        elif kind == "response.output_text.delta":
                            content.append(event["delta"])
                        elif kind == "response.output_item.done" and event["item"]["type"] == "function_call":
                            calls.append(event["item"])
        assert "".join(reasoning) == "The user wants 2+3." and len([r for r in reasoning if r]) > 1
        assert "".join(content) == "Let me compute."
        if chat:
            assert calls[0]["function"]["name"] == "calc" and json.loads(calls[1]["function"]["arguments"]) == {"expr": "2+3"}
        else:
            assert calls[0]["name"] == "calc" and json.loads(calls[0]["arguments"]) == {"expr": "2+3"}
    finally:
        server.stop()
