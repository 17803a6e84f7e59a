"""Fidelity property: trained tokens are exactly the sampled tokens, whatever the episode does.

Hundreds of seeded random multi-turn episodes (tool calls, several calls per turn, tool errors,
malformed calls, user follow-ups, length stops, empty completions, reasoning blocks, garbage ids,
response budgets) on three template families, through the direct ``TokenLLM`` path and through
the OpenAI-compatible gateway over HTTP. For every episode:

* the mask-1 runs of the training view are exactly the engine's outputs, in order (the last one
  cut at the budget when the episode was truncated), with their logprobs and versions;
* env tokens carry logprob 0.0 and version -1;
* every engine call's prompt is a prefix of the final sequence;
* the decoded sequence holds the whole conversation in order, and where the template can
  reproduce it (no stripped reasoning, every turn ended by the model) it is exactly the
  template's rendering of the conversation.

A subset runs the real tiny model through ``HFTokenEngine`` and checks the recorded logprobs
against a teacher-forced forward pass over the final sequence.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from types import SimpleNamespace

import aiohttp
import pytest

from aworld_core.gateway import Gateway, GatewayServer
from aworld_core.schemas import SamplingParams, TrainingView
from aworld_core.testing import assistant_turn_text, load_template
from aworld_core.tokens import LENGTH, STOP, HFTokenEngine, ScriptedTokenEngine, TokenLLM, TokenOutput

pytest_plugins = ["aworld_core.testing.fixtures"]  # the tiny model fixtures

FAMILIES = {"qwen2_5": "hermes", "qwen3": "hermes", "llama3": "llama3_json"}
WORDS = "the weather in paris is mild today and tokyo looks rainy while the sum is seven or eight".split()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}},
        },
    }
    for name in ("search", "calc", "weather")
]


def words(rng: random.Random, low: int = 1, high: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


@dataclass
class Planner:
    """Plans what the 'model' samples next: a TokenEngine script with a random mix of behaviours."""

    tok: object
    family: str
    seed: int
    canonical: dict[str, bool] = field(default_factory=dict)  # per session: every turn template-shaped

    def __post_init__(self) -> None:
        self.template = load_template(self.family)
        self.rngs: dict[str, random.Random] = {}
        self.eot = self.tok.convert_tokens_to_ids("<|eot_id|>" if self.family == "llama3" else "<|im_end|>")
        specials = set(self.tok.all_special_ids)
        self.plain_ids = [i for i in range(len(self.tok)) if i not in specials]

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def assistant(self, rng: random.Random) -> dict:
        calls = []
        if rng.random() < 0.55:
            for _ in range(1 if self.family == "llama3" else rng.randint(1, 3)):
                args = {"q": words(rng, 1, 3)} if rng.random() < 0.7 else {"q": words(rng), "n": rng.randint(0, 99)}
                calls.append({"type": "function", "function": {"name": rng.choice(TOOLS)["function"]["name"], "arguments": args}})
        content = "" if calls and (self.family == "llama3" or rng.random() < 0.4) else words(rng).capitalize() + "."
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        if self.family == "qwen3" and rng.random() < 0.5:
            message["reasoning_content"] = words(rng, 2, 6)
        return message

    def __call__(self, prompt_ids: list[int], sampling: SamplingParams, request_id: str) -> TokenOutput:
        rng = self.rngs.setdefault(request_id, random.Random(f"{self.seed}/{request_id}"))
        text = assistant_turn_text(self.tok, self.template, self.assistant(rng), TOOLS)
        kind = rng.random()
        if kind < 0.62:
            ids = self.encode(text)  # what a model trained on the template writes
        elif kind < 0.72:  # a length stop inside the turn
            ids = self.encode(text)[: max(1, len(self.encode(text)) // 2)]
            self.canonical[request_id] = False
            return self.output(rng, ids, LENGTH)
        elif kind < 0.8:
            ids = [self.eot]  # an empty completion
        elif kind < 0.9:  # a malformed tool call
            bad = '{"name": "calc", "parameters": {"q": oops}' if self.family == "llama3" else (
                '<tool_call>\n{"name": "calc", "arguments": {"q": }\n</tool_call>'
            )
            ids = self.encode(bad) + [self.eot]
            self.canonical[request_id] = False
        else:  # garbage ids, maybe never closed
            ids = [rng.choice(self.plain_ids) for _ in range(rng.randint(1, 25))]
            self.canonical[request_id] = False
            if rng.random() < 0.5:
                return self.output(rng, ids, LENGTH)
            ids.append(self.eot)
        return self.output(rng, ids, STOP)

    def output(self, rng: random.Random, ids: list[int], reason: str) -> TokenOutput:
        logprobs = [-rng.random() * 5 for _ in ids]
        version: int | list[int] = rng.randint(0, 3) if rng.random() < 0.5 else [rng.randint(0, 3) for _ in ids]
        return TokenOutput(ids, logprobs, reason, version)


def next_messages(rng: random.Random, assistant: dict, tool_calls: list[dict]) -> list[dict] | None:
    """What the agent sends after an assistant turn; ``None`` ends the episode."""
    new: list[dict] = []
    for call in tool_calls:
        if call.get("error"):
            new.append({"role": "tool", "tool_call_id": call["id"], "content": f"Error: {call['error']}"})
        elif rng.random() < 0.2:
            new.append({"role": "tool", "tool_call_id": call["id"], "content": "Error: tool failed: timeout"})
        else:
            new.append({"role": "tool", "tool_call_id": call["id"], "content": words(rng, 1, 12)})
    if not new:
        if rng.random() < 0.35:
            return None
        new.append({"role": "user", "content": words(rng, 2, 10).capitalize() + "?"})
    return new


@dataclass
class Recorded:
    session: str
    view: TrainingView
    messages: list[dict]
    family: str


def check_episode(rec: Recorded, calls: list, tok, canonical: bool, budget: int | None) -> set[str]:
    """Assert the fidelity properties; return what the episode exercised (to check coverage)."""
    view = rec.view
    outputs = [c.output for c in calls]
    n = len(view.response_ids)
    assert len(view.response_mask) == len(view.response_logprobs) == len(view.response_versions) == n
    full = [*view.prompt_ids, *view.response_ids]

    # mask-1 runs are exactly the sampled outputs, in order
    runs, current, start = [], [], None
    for i, m in enumerate(view.response_mask):
        if m:
            if start is None:
                start = i
            current.append(i)
        elif current:
            runs.append(current)
            current, start = [], None
    if current:
        runs.append(current)
    sampled = [o for o in outputs if o.token_ids]
    assert len(runs) == len(sampled), (rec.session, len(runs), len(sampled))
    for k, (run, out) in enumerate(zip(runs, sampled, strict=True)):
        ids = [view.response_ids[i] for i in run]
        if view.truncated and k == len(runs) - 1:
            assert ids == out.token_ids[: len(ids)]
        else:
            assert ids == out.token_ids
        assert [view.response_logprobs[i] for i in run] == out.logprobs[: len(ids)]
        assert [view.response_versions[i] for i in run] == out.versions()[: len(ids)]
    for i, m in enumerate(view.response_mask):
        if not m:
            assert view.response_logprobs[i] == 0.0 and view.response_versions[i] == -1
    if budget is not None:
        assert n <= budget and view.truncated == (n == budget)

    # every prompt the engine saw is a prefix of the final sequence
    for call in calls:
        assert full[: len(call.prompt_ids)] == call.prompt_ids

    eot = tok.convert_tokens_to_ids("<|eot_id|>" if rec.family == "llama3" else "<|im_end|>")
    seen = {"turns>1"} if len(outputs) > 1 else set()
    seen |= {"length_stop"} if any(o.stop_reason == LENGTH for o in outputs[:-1]) else set()
    seen |= {"empty"} if any(o.token_ids == [eot] for o in outputs) else set()
    seen |= {"tool_error"} if any(str(m.get("content", "")).startswith("Error:") for m in rec.messages) else set()
    seen |= {"multi_call"} if any(len(m.get("tool_calls") or []) > 1 for m in rec.messages) else set()
    if view.truncated:
        return seen | {"truncated"}  # the budget cut the conversation short; the checks above hold
    # the decoded sequence holds the conversation in order...
    text = tok.decode(full)
    pos = 0
    for message in rec.messages:
        content = message.get("content") or ""
        if message["role"] in ("user", "tool") and content:
            at = text.find(content, pos)
            assert at >= 0, (rec.session, content)
            pos = at + len(content)
    # ...and is exactly the template's rendering when the template can reproduce it
    closed = all(o.token_ids and o.token_ids[-1] == eot for o in outputs)
    if canonical and closed and rec.family != "qwen3":
        rendered = tok.apply_chat_template(rec.messages, tools=TOOLS, chat_template=load_template(rec.family), tokenize=False)
        assert rendered.startswith(text) and rendered[len(text) :].strip() == "", rec.session
        seen.add("template_exact")
    return seen


async def run_direct(llm: TokenLLM, session: str, rng: random.Random, max_turns: int) -> list[dict]:
    messages = [{"role": "user", "content": words(rng, 3, 10).capitalize() + "?"}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": "You are " + words(rng, 2, 5) + "."})
    for turn in range(max_turns):
        sampling = SamplingParams(max_tokens=rng.choice([None, None, 40]))
        response = await llm.chat(messages, TOOLS, sampling, session_id=session)
        if llm.session(session).exhausted:
            break
        messages.append(response.message())
        if turn == max_turns - 1:
            break
        calls = [{"id": c.id, "error": c.error} for c in response.tool_calls]
        new = next_messages(rng, messages[-1], calls)
        if new is None:
            break
        messages.extend(new)
    return messages


async def run_http(http: aiohttp.ClientSession, base: str, session: str, rng: random.Random, max_turns: int) -> list[dict]:
    """An OpenAI-API agent: echoes the assistant message the way SDK clients do."""
    url = f"{base}/sessions/{session}/v1/chat/completions"
    messages = [{"role": "user", "content": words(rng, 3, 10).capitalize() + "?"}]
    for turn in range(max_turns):
        body = {"model": "policy", "messages": messages, "tools": TOOLS}
        if rng.random() < 0.3:
            body["max_tokens"] = 40
        async with http.post(url, json=body) as r:
            assert r.status == 200, await r.text()
            out = await r.json()
        choice = out["choices"][0]
        message = choice["message"]
        if choice["finish_reason"] == "length" and message["content"] is None:
            break  # the budget is spent
        echo = {"role": "assistant", "content": message["content"] or (None if rng.random() < 0.5 else "")}
        if message.get("tool_calls"):
            echo["tool_calls"] = []
            for call in message["tool_calls"]:
                args = call["function"]["arguments"]
                if rng.random() < 0.5:  # re-serialized by the client
                    args = json.dumps(json.loads(args), separators=(",", ":"))
                echo["tool_calls"].append({"id": call["id"], "type": "function",
                                           "function": {"name": call["function"]["name"], "arguments": args}})
        messages.append(echo)
        if turn == max_turns - 1:
            break
        calls = [{"id": c["id"]} for c in message.get("tool_calls", [])]
        calls += [{"id": c["id"], "error": c["error"]} for c in message.get("invalid_tool_calls", [])]
        new = next_messages(rng, echo, calls)
        if new is None:
            break
        messages.extend(new)
    return messages


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_direct_token_llm_episodes_are_exact(tiny_tokenizer, family):
    tok = tiny_tokenizer
    planner = Planner(tok, family, seed=1)
    engine = ScriptedTokenEngine(planner)
    seen: list[str] = []
    for batch in range(4):
        budget = [None, 250, 120, 60][batch]
        llm = TokenLLM(engine, tok, chat_template=load_template(family), tool_parser=FAMILIES[family],
                       max_response_tokens=budget)
        sessions = [f"{family}-{batch}-{i}" for i in range(25)]
        rngs = {s: random.Random(s) for s in sessions}
        # episodes run concurrently, as rollouts do
        all_messages = await asyncio.gather(*[run_direct(llm, s, rngs[s], 6) for s in sessions])
        for session, messages in zip(sessions, all_messages, strict=True):
            view = llm.finish_session(session)
            calls = [c for c in engine.calls if c.request_id == session]
            seen += check_episode(Recorded(session, view, messages, family), calls, tok,
                                  planner.canonical.get(session, True), budget)
        assert llm.session_ids() == []
    wanted = {"turns>1", "length_stop", "empty", "tool_error", "truncated", "template_exact"}
    wanted |= {"multi_call"} if family != "llama3" else set()
    if family == "qwen3":
        wanted.discard("template_exact")  # Qwen3 strips earlier reasoning: never reproducible
    assert wanted <= set(seen), wanted - set(seen)


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_gateway_episodes_are_exact(tiny_tokenizer, family):
    tok = tiny_tokenizer
    planner = Planner(tok, family, seed=2)
    engine = ScriptedTokenEngine(planner)
    budget = 200
    llm = TokenLLM(engine, tok, chat_template=load_template(family), tool_parser=FAMILIES[family],
                   max_response_tokens=budget)
    sessions = [f"gw-{family}-{i}" for i in range(40)]
    seen: list[str] = []
    with GatewayServer(Gateway(llm)) as server:
        async with aiohttp.ClientSession() as http:
            all_messages = await asyncio.gather(
                *[run_http(http, f"http://{server.address}", s, random.Random(s), 6) for s in sessions]
            )
        for session, messages in zip(sessions, all_messages, strict=True):
            view = server.gateway.finish_session(session)
            assert view is not None and not view.history_rewritten, session
            calls = [c for c in engine.calls if c.request_id == session]
            # echoed messages are re-serialized, so compare text only by content order
            seen += check_episode(Recorded(session, view, messages, family), calls, tok, False, budget)
    assert {"turns>1", "length_stop", "empty", "tool_error", "truncated"} <= set(seen)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_5", "llama3"])
async def test_real_model_episodes_are_exact_and_logprobs_recompute(tiny_model, tiny_tokenizer, family):
    import torch

    tok = tiny_tokenizer

    class Recording:
        """Keeps what the HF engine sampled, per episode, to compare with the view."""

        def __init__(self, inner):
            self.inner, self.calls = inner, []

        async def generate(self, prompt_ids, sampling, *, request_id):
            out = await self.inner.generate(prompt_ids, sampling, request_id=request_id)
            self.calls.append(SimpleNamespace(request_id=request_id, prompt_ids=prompt_ids, output=out))
            return out

    engine = Recording(HFTokenEngine(tiny_model, tok, batch_window_s=0.01))
    llm = TokenLLM(engine, tok, chat_template=load_template(family), tool_parser=FAMILIES[family], max_response_tokens=80)
    sessions = [f"hf-{family}-{i}" for i in range(6)]

    async def episode(session: str) -> list[dict]:
        rng = random.Random(session)
        messages = [{"role": "user", "content": words(rng, 3, 8) + "?"}]
        for turn in range(3):
            sampling = SamplingParams(temperature=0.8, max_tokens=rng.randint(1, 12), seed=rng.randint(0, 999))
            response = await llm.chat(messages, TOOLS, sampling, session_id=session)
            if llm.session(session).exhausted:
                break
            messages.append(response.message())
            if turn < 2:
                messages.append({"role": "user", "content": words(rng, 1, 6)})
        return messages

    all_messages = await asyncio.gather(*[episode(s) for s in sessions])
    for session, messages in zip(sessions, all_messages, strict=True):
        view = llm.finish_session(session)
        calls = [c for c in engine.calls if c.request_id == session]
        check_episode(Recorded(session, view, messages, family), calls, tok, False, 80)
        # the trainer's recomputation over the final sequence gives the recorded logprobs
        full = torch.tensor([view.prompt_ids + view.response_ids])
        with torch.no_grad():
            logp = torch.log_softmax(tiny_model(input_ids=full).logits[0].float() / 0.8, dim=-1)
        offset = len(view.prompt_ids) - 1
        for i, (token, mask) in enumerate(zip(view.response_ids, view.response_mask, strict=True)):
            if mask:
                assert float(logp[offset + i, token]) == pytest.approx(view.response_logprobs[i], abs=2e-3)
    assert engine.inner.largest_batch > 1  # concurrent episodes shared forward passes
