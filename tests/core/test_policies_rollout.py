"""Several policies in one episode (issue 31, M2): one HF engine serves two LoRA adapters of one base
with the adapter chosen per request, and each agent's turns are recorded as its own policy's
segments, token for token (what the other agent said is prompt or tool tokens there, mask 0).

Real parts: the tiny Qwen2 model made at test time with two peft LoRA adapters (random B, so the
adapters really differ), ``HFTokenEngine``, ``TokenLLM`` per policy, the runtime, a real MCP server.
A scripted engine is used once, to force a tool call (a random tiny model almost never makes one).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from aworld_core import Agent, Swarm
from aworld_core.errors import UsageError
from aworld_core.policies import policy_segments
from aworld_core.policy_clients import PolicyClients
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus, SamplingParams
from aworld_core.testing import McpHttpServer, assistant_turn_text, check_segments, load_template
from aworld_core.tokens import HFTokenEngine, ScriptedTokenEngine, TokenLLM, TokenOutput
from aworld_core.tokens.adapter_engine import AdapterEngine
from aworld_core.tokens.engine import ADAPTER

pytest_plugins = ["aworld_core.testing.fixtures"]

POLICIES = ("planner", "answerer")


@pytest.fixture(scope="module")
def lora_model(tiny_model_dir):
    """The tiny model under two LoRA adapters with random (non-zero) weights, in eval mode."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))

    def config() -> Any:
        return LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)

    model = get_peft_model(base, config(), adapter_name=POLICIES[0])
    model.add_adapter(POLICIES[1], config())
    model.eval()
    return model


def teacher_forced(model: Any, adapter: str, prompt: list[int], sampled: list[int]) -> list[float]:
    """log p(sampled | prompt) under ``adapter``, one forward over the whole sequence."""
    ids = torch.tensor([[*prompt, *sampled]])
    with torch.no_grad():
        logits = model(input_ids=ids, adapter_names=[adapter]).logits[0].float()
    logps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logps.gather(-1, torch.tensor(sampled)[:, None]).squeeze(-1).tolist()


class Recorder:
    """A policy's engine that keeps (prompt, output) per call, for ``check_segments``."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.features = engine.features
        self.calls: list[tuple[list[int], TokenOutput]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        out = await self.engine.generate(prompt_ids, sampling, request_id=request_id)
        self.calls.append((list(prompt_ids), out))
        return out


def sequential_swarm(mcp: McpHttpServer | None = None, planner_steps: int = 3) -> Swarm:
    tools = {"mcp_config": {"mcpServers": {"calc": mcp.config()}}} if mcp is not None else {}
    return Swarm(
        Agent("planner", system_prompt="Plan: call add, then state the sum.", conf={"max_steps": planner_steps},
              **tools),
        Agent("answerer", system_prompt="Answer with the number only.", conf={"max_steps": 2}),
    )


@pytest.fixture(scope="module")
def mcp():
    with McpHttpServer(name="calc", tools=["add", "echo"]) as server:
        yield server


# -- the engine: per-request adapters --------------------------------------------------------------


async def test_each_request_samples_from_its_own_adapter_in_one_batch(lora_model, tiny_tokenizer):
    engine = HFTokenEngine(lora_model, tiny_tokenizer, batch_window_s=0.2, max_batch_size=8, max_new_tokens=8)
    engine.set_version(3, adapter="answerer")
    prompt = tiny_tokenizer.encode("the weather in paris is", add_special_tokens=False)
    requests = [(POLICIES[i % 2], seed) for i, seed in enumerate((1, 2, 3, 4))]
    outputs = await asyncio.gather(*(
        engine.generate(prompt, SamplingParams(temperature=1.0, seed=seed, extra={ADAPTER: adapter}),
                        request_id=f"r{seed}")
        for adapter, seed in requests
    ))
    assert engine.batches_run == 1 and engine.largest_batch == 4  # both adapters in one forward batch
    for (adapter, _), out in zip(requests, outputs, strict=True):
        assert out.token_ids and len(out.logprobs) == len(out.token_ids)
        assert out.versions() == [3 if adapter == "answerer" else 0] * len(out.token_ids)
        own = teacher_forced(lora_model, adapter, prompt, out.token_ids)
        other = teacher_forced(lora_model, POLICIES[1 - POLICIES.index(adapter)], prompt, out.token_ids)
        assert out.logprobs == pytest.approx(own, abs=1e-4)  # sampled by its own adapter ...
        assert max(abs(a - b) for a, b in zip(out.logprobs, other, strict=True)) > 1e-2  # ... not the other


async def test_an_adapter_request_is_checked(lora_model, tiny_model, tiny_tokenizer):
    prompt = tiny_tokenizer.encode("hello", add_special_tokens=False)
    engine = HFTokenEngine(lora_model, tiny_tokenizer, max_new_tokens=2)
    with pytest.raises(UsageError, match=r"adapter 'critic' is not one of this engine's LoRA adapters \(answerer, planner\)"):
        await engine.generate(prompt, SamplingParams(extra={ADAPTER: "critic"}), request_id="x")
    plain = HFTokenEngine(tiny_model, tiny_tokenizer, max_new_tokens=2)
    with pytest.raises(UsageError, match=r"the model is not a peft.PeftModel"):
        await plain.generate(prompt, SamplingParams(extra={ADAPTER: "planner"}), request_id="x")
    with pytest.raises(UsageError, match=r"no LoRA adapter 'critic'"):
        AdapterEngine(engine, "critic")
    with pytest.raises(UsageError, match=r"ScriptedTokenEngine cannot select a LoRA adapter per request"):
        AdapterEngine(ScriptedTokenEngine([[1]]), "planner")
    lora_model.train()
    try:
        with pytest.raises(UsageError, match=r"in training mode"):
            await engine.generate(prompt, SamplingParams(extra={ADAPTER: "planner"}), request_id="x")
    finally:
        lora_model.eval()


# -- an episode: each agent's turns are its own policy's segments ----------------------------------


def policy_clients(engine: Any, tokenizer: Any, **kwargs: Any) -> tuple[PolicyClients, dict[str, Recorder]]:
    recorders = {p: Recorder(AdapterEngine(engine, p)) for p in POLICIES}
    clients = {p: TokenLLM(r, tokenizer, chat_template=load_template("qwen2_5"), **kwargs) for p, r in recorders.items()}
    return PolicyClients(clients, {"planner": "planner", "answerer": "answerer"}), recorders


async def test_two_adapters_record_their_own_agents_turns_exactly(lora_model, tiny_tokenizer, mcp):
    engine = HFTokenEngine(lora_model, tiny_tokenizer, max_new_tokens=24)
    engine.set_version(5, adapter="answerer")
    router, recorders = policy_clients(engine, tiny_tokenizer, max_response_tokens=200)
    # a random tiny model rarely ends its turn: a logit bias on the end-of-turn token makes replies
    # short (it changes what is drawn from; the recorded logprobs stay the policy's own, "scaled")
    end = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampling = SamplingParams(temperature=1.0, seed=11, extra={"logit_bias": {end: 6.0}})
    episode = await run_episode(sequential_swarm(mcp), "What is 2+3?", llm=router, sampling=sampling)
    assert episode.status is EpisodeStatus.SUCCESS, episode.error
    assert episode.metadata["stop"] == "final_answer", episode.metadata
    assert {s.exp_meta.agent_id for s in episode.steps} == {"planner", "answerer"}
    for policy, recorder in recorders.items():
        segments = policy_segments(episode, policy)
        assert segments, f"{policy} recorded nothing"
        check_segments(segments, recorder.calls)  # exactly its own sampled tokens train, nothing else
        for prompt, out in recorder.calls:  # and each was sampled by its own adapter
            assert out.logprobs == pytest.approx(teacher_forced(lora_model, policy, prompt, out.token_ids), abs=1e-4)
        sampled = [v for s in segments for v, m in zip(s.response_versions, s.response_mask, strict=True) if m]
        assert set(sampled) == {5 if policy == "answerer" else 0}
    # the answerer saw the planner's answer as its task: prompt tokens (mask 0) of its own segment
    answerer_prompt = policy_segments(episode, "answerer")[0].prompt_ids
    assert recorders["answerer"].calls[0][0] == answerer_prompt
    assert all(s.policy in POLICIES for s in policy_segments(episode, "planner") + policy_segments(episode, "answerer"))


def sampled_turn(tokenizer: Any, message: dict) -> list[int]:
    return tokenizer.encode(assistant_turn_text(tokenizer, load_template("qwen2_5"), message), add_special_tokens=False)


async def test_a_tool_result_and_the_other_agents_words_are_mask_0(tiny_tokenizer, mcp):
    """Forced tool call (scripted engine, one per request's adapter) through a real MCP server."""
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]}
    plans = {
        "planner": [sampled_turn(tiny_tokenizer, call),
                    sampled_turn(tiny_tokenizer, {"role": "assistant", "content": "The sum is 5."})],
        "answerer": [sampled_turn(tiny_tokenizer, {"role": "assistant", "content": "5"})],
    }

    def script(prompt: list[int], sampling: SamplingParams, request_id: str) -> list[int]:
        return plans[sampling.extra[ADAPTER]].pop(0)

    shared = ScriptedTokenEngine(script, features={ADAPTER})
    router, recorders = policy_clients(shared, tiny_tokenizer)
    episode = await run_episode(sequential_swarm(mcp), "What is 2+3?", llm=router)
    assert episode.status is EpisodeStatus.SUCCESS, episode.error
    assert episode.final_answer == "5"
    assert episode.steps[0].exp_data.state.action_result[0].content == "5"  # the real server answered
    planner = policy_segments(episode, "planner")
    answerer = policy_segments(episode, "answerer")
    assert check_segments(planner, recorders["planner"].calls) == [[0, 1]]
    assert check_segments(answerer, recorders["answerer"].calls) == [[0]]
    # the tool's answer sits in the planner's segment with mask 0
    seg = planner[0]
    env = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if not m]
    assert "<tool_response>" in tiny_tokenizer.decode(env)
    # the planner's answer reached the answerer only as its prompt (never sampled by it)
    assert "The sum is 5." in tiny_tokenizer.decode(answerer[0].prompt_ids)
    trained_answerer = [t for t, m in zip(answerer[0].response_ids, answerer[0].response_mask, strict=True) if m]
    assert trained_answerer == recorders["answerer"].calls[0][1].token_ids
    assert episode.training.policy == "planner" and episode.metadata["extra_training"][0]["policy"] == "answerer"


async def test_an_unmapped_agent_stops_the_episode_before_it_runs(tiny_tokenizer):
    router = PolicyClients({"planner": TokenLLM(ScriptedTokenEngine([]), tiny_tokenizer)}, {"planner": "planner"})
    with pytest.raises(UsageError, match=r"agent\(s\) \['answerer'\] of 'swarm' are mapped to no policy"):
        await run_episode(sequential_swarm(), "hi", llm=router)


async def test_an_endpoint_policy_serves_its_agent_and_records_nothing(tiny_tokenizer):
    """The answerer is a fixed endpoint (a stub OpenAI server on loopback): not recorded, not trained."""
    from support.openai_stub import OpenAIStub, reply

    plans = [sampled_turn(tiny_tokenizer, {"role": "assistant", "content": "The sum is 5."})]
    engine = ScriptedTokenEngine(plans)
    with OpenAIStub() as stub:
        stub.set_script(lambda request: reply("5"))
        from aworld_core.policies import PolicyEndpoint

        router = PolicyClients(
            {"planner": TokenLLM(engine, tiny_tokenizer, chat_template=load_template("qwen2_5"))},
            {"planner": "planner", "answerer": "judge"},
            endpoints={"judge": PolicyEndpoint(base_url=stub.base_url, model_name="judge")},
        )
        episode = await run_episode(sequential_swarm(planner_steps=1), "What is 2+3?", llm=router)
        await router.aclose()
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "5"
    check_segments(policy_segments(episode, "planner"), engine.calls)
    assert "extra_training" not in episode.metadata  # the endpoint's turns are nobody's segments
