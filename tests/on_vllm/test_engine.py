"""``VLLMTokenEngine`` on the real vLLM engine (CPU build): ids and logprobs out, sampling settings
honoured or refused, weight updates in place (from a directory and from tensors) with abort and
resume, versions per token, and the OpenAI-compatible gateway in front of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from teacher_forcing import hf_logprobs

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens import ABORT, LENGTH, STOP, TokenLLM
from aworld_core.tokens.llm import load_tokenizer

pytestmark = pytest.mark.slow
TOLERANCE = 0.03  # |vLLM logprob - HF teacher-forced logprob|, float32 on CPU (measured max ~0.01)


def prompt(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)


def max_diff(model_dir: Path, prompt_ids: list[int], out) -> float:
    expected = hf_logprobs(model_dir, [*prompt_ids, *out.token_ids])[len(prompt_ids) - 1:]
    return max(abs(a - b) for a, b in zip(out.logprobs, expected, strict=True))


def test_ids_logprobs_stops_budget_and_seeds(engine, loop, tool_model_dir):
    tok = load_tokenizer(tool_model_dir)
    ids = prompt(tok, "What is 1234 * 5678?")
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    stop = SamplingParams(temperature=1.0, max_tokens=60, seed=3, extra={"stop_token_ids": [eot]})
    budget = SamplingParams(temperature=1.0, max_tokens=7, seed=4)

    async def run():
        return await asyncio.gather(
            engine.generate(ids, stop, request_id="a"), engine.generate(ids, stop, request_id="b"),
            engine.generate(ids, budget, request_id="c"),
            *[engine.generate(ids, SamplingParams(temperature=1.0, max_tokens=40), request_id=f"d{i}")
              for i in range(16)],
        )

    a, b, c, *many = loop.run(run())
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs  # the same seed samples the same
    assert a.stop_reason == STOP and a.token_ids[-1] == eot  # the stop id is kept
    assert c.stop_reason == LENGTH and len(c.token_ids) == 7
    assert len({tuple(o.token_ids) for o in many}) > 1  # unseeded requests differ
    for out in [a, c, *many]:
        assert len(out.logprobs) == len(out.token_ids) and out.versions() == [0] * len(out.token_ids)
        assert all(isinstance(t, int) for t in out.token_ids)
    worst = max(max_diff(tool_model_dir, ids, out) for out in [a, c, *many[:4]])
    print(f"max |vLLM - HF| logprob over {sum(len(o.token_ids) for o in [a, c, *many[:4]])} tokens: {worst:.2e}")
    assert worst < TOLERANCE


def test_greedy_temperature_and_scaled_logprobs(engine, loop, tool_model_dir):
    tok = load_tokenizer(tool_model_dir)
    ids = prompt(tok, "What is 42 * 17?")
    greedy = SamplingParams(temperature=0.0, max_tokens=20)
    hot = SamplingParams(temperature=0.5, max_tokens=20, seed=1)
    async def run():
        return await asyncio.gather(engine.generate(ids, greedy, request_id="g1"),
                                    engine.generate(ids, greedy, request_id="g2"),
                                    engine.generate(ids, hot, request_id="h"))

    g1, g2, h = loop.run(run())
    assert g1.token_ids == g2.token_ids
    import torch

    # 'scaled': log_softmax(logits / T) of the sampled token, what the trainers recompute
    full = [*ids, *h.token_ids]
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tool_model_dir)).eval()
    with torch.no_grad():
        logits = model(torch.tensor([full])).logits[0, len(ids) - 1:-1].float() / 0.5
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(h.token_ids)[:, None]).squeeze(-1).tolist()
    assert max(abs(a - b) for a, b in zip(h.logprobs, expected, strict=True)) < TOLERANCE


def test_settings_it_cannot_honour_are_refused(engine, loop):
    cases = [
        (SamplingParams(stop=["</tool_call>"]), "stop strings"),
        (SamplingParams(temperature=1.0, top_p=0.9), "scaled"),
        (SamplingParams(top_k=5), "scaled"),
        (SamplingParams(extra={"logprobs_mode": "raw"}), "logprobs_mode='raw'"),
        (SamplingParams(temperature=-1), "temperature"),
    ]
    for sampling, needle in cases:
        with pytest.raises(UsageError, match=needle):
            loop.run(engine.generate([1, 2, 3], sampling, request_id="bad"))
    with pytest.raises(UsageError, match="vocabulary"):
        loop.run(engine.generate([1, 10**6], SamplingParams(), request_id="bad"))
    with pytest.raises(UsageError, match="empty"):
        loop.run(engine.generate([], SamplingParams(), request_id="bad"))


def test_gateway_in_front_of_vllm(engine, tool_model_dir):
    """The gateway serves from its own thread and loop; the engine's calls go to its loop."""
    import httpx

    from aworld_core.gateway import Gateway, GatewayServer

    tok = load_tokenizer(tool_model_dir)
    llm = TokenLLM(engine, tok, max_response_tokens=64)
    with GatewayServer(Gateway(llm)) as server:
        answer = httpx.post(f"http://{server.address}/v1/chat/completions", headers={"X-Session-Id": "gw-1"},
                            json={"model": server.model_name, "messages": [{"role": "user", "content": "What is 2 * 3?"}],
                                  "max_tokens": 40}, timeout=120).json()
        view = server.gateway.finish_session("gw-1")
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert view is not None and sum(view.response_mask) == answer["usage"]["completion_tokens"] > 0
    sampled = [i for i, m in zip(view.response_ids, view.response_mask, strict=True) if m]
    logprobs = [lp for lp, m in zip(view.response_logprobs, view.response_mask, strict=True) if m]
    expected = hf_logprobs(tool_model_dir, [*view.prompt_ids, *view.response_ids])[len(view.prompt_ids) - 1:]
    assert len(sampled) == len(expected)
    assert max(abs(a - b) for a, b in zip(logprobs, expected, strict=True)) < TOLERANCE


def test_weight_updates_abort_resume_and_versions(engine, loop, tool_model_dir, perturbed_model_dir):
    """In-flight generations are aborted by an update and resumed by TokenLLM; every token carries
    the version of the weights that sampled it, and its logprob is that model's (both directions:
    from a checkpoint directory, then back from in-memory tensors)."""
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(tool_model_dir)
    llm = TokenLLM(engine, tok, max_response_tokens=200)
    long = SamplingParams(temperature=1.0, max_tokens=150, seed=None, extra={"stop_token_ids": []})
    messages = [{"role": "user", "content": "What is 9999 * 8888?"}]
    start_version = engine.version

    async def run_and_update():
        llm.renderer.eot_id  # noqa: B018 (the renderer is ready)
        tasks = [asyncio.create_task(llm.chat(messages, sampling=long, session_id=f"u{i}")) for i in range(6)]
        for _ in range(600):  # until generations are in flight in vLLM (a fixed sleep raced a loaded machine)
            if engine.llm is not None and engine.llm.get_num_unfinished_requests() > 0:
                break
            await asyncio.sleep(0.05)
        await engine.update_weights_from_dir(perturbed_model_dir)
        return await asyncio.gather(*tasks)

    aborted = engine.aborted
    loop.run(run_and_update())
    assert engine.version == start_version + 1 and engine.aborted > aborted
    mixed = 0
    for i in range(6):
        view = llm.finish_session(f"u{i}")
        versions = [v for v, m in zip(view.response_versions, view.response_mask, strict=True) if m]
        assert versions == sorted(versions) and set(versions) <= {start_version, start_version + 1}
        mixed += len(set(versions)) == 2
        full = [*view.prompt_ids, *view.response_ids]
        old = hf_logprobs(tool_model_dir, full)[len(view.prompt_ids) - 1:]
        new = hf_logprobs(perturbed_model_dir, full)[len(view.prompt_ids) - 1:]
        for k, (m, v, lp) in enumerate(zip(view.response_mask, view.response_versions, view.response_logprobs,
                                           strict=True)):
            if m:
                assert abs(lp - (old[k] if v == start_version else new[k])) < TOLERANCE, (i, k, v)
    assert mixed > 0  # at least one generation was cut by the update and resumed on the new weights

    # back to the first weights, from in-memory tensors
    model = AutoModelForCausalLM.from_pretrained(str(tool_model_dir))
    loop.run(engine.update_weights(model.state_dict(), version=start_version + 2))
    ids = prompt(tok, "What is 12 * 34?")
    out = loop.run(engine.generate(ids, SamplingParams(temperature=1.0, max_tokens=30), request_id="after"))
    assert out.versions() == [start_version + 2] * len(out.token_ids)
    assert out.stop_reason in (STOP, LENGTH) and out.stop_reason != ABORT
    assert max_diff(tool_model_dir, ids, out) < TOLERANCE
