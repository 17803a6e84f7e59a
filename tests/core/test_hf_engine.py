"""HFTokenEngine on a real tiny Qwen2 model: logprobs, sampling settings, stops, batching."""

from __future__ import annotations

import asyncio

import pytest

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.testing import load_template
from aworld_core.tokens import LENGTH, STOP, HFTokenEngine, TokenEngine

pytest_plugins = ["aworld_core.testing.fixtures"]  # the tiny model fixtures


@pytest.fixture
def prompt(tiny_tokenizer) -> list[int]:
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the weather in paris?"}],
        chat_template=load_template("qwen2_5"),
        add_generation_prompt=True,
        tokenize=False,
    )
    return tiny_tokenizer.encode(text, add_special_tokens=False)


def teacher_forced_logprobs(model, prompt_ids, response_ids, temperature=1.0):
    """The logprobs a trainer computes for ``response_ids`` after ``prompt_ids`` (logits / T)."""
    import torch

    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids) - 1
    return [float(logp[start + i, t]) for i, t in enumerate(response_ids)]


def test_it_is_a_token_engine(tiny_model, tiny_tokenizer):
    assert isinstance(HFTokenEngine(tiny_model, tiny_tokenizer), TokenEngine)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_scaled_logprobs_match_what_a_trainer_recomputes(tiny_model, tiny_tokenizer, prompt, temperature):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    out = await engine.generate(prompt, SamplingParams(temperature=temperature, max_tokens=12, seed=3), request_id="r")
    assert len(out.token_ids) == len(out.logprobs) > 0
    expected = teacher_forced_logprobs(tiny_model, prompt, out.token_ids, temperature)
    assert out.logprobs == pytest.approx(expected, abs=1e-4)
    assert out.version == 0


async def test_raw_logprobs_are_the_policy_at_temperature_one(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer, logprobs_mode="raw")
    out = await engine.generate(prompt, SamplingParams(temperature=0.5, max_tokens=8, seed=1), request_id="r")
    assert out.logprobs == pytest.approx(teacher_forced_logprobs(tiny_model, prompt, out.token_ids, 1.0), abs=1e-4)


async def test_processed_logprobs_follow_the_truncated_distribution(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer, logprobs_mode="processed")
    out = await engine.generate(prompt, SamplingParams(top_k=1, max_tokens=6), request_id="r")
    assert out.logprobs == pytest.approx([0.0] * len(out.token_ids), abs=1e-6)  # top-1 leaves one choice
    # and per request, overriding the engine's mode
    scaled = await engine.generate(
        prompt, SamplingParams(top_k=1, max_tokens=6, extra={"logprobs_mode": "scaled"}), request_id="r"
    )
    assert scaled.token_ids == out.token_ids and max(scaled.logprobs) < 0


async def test_top_k_one_and_temperature_zero_are_greedy(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    greedy = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=10), request_id="r")
    top1 = await engine.generate(prompt, SamplingParams(top_k=1, max_tokens=10, seed=5), request_id="r")
    assert greedy.token_ids == top1.token_ids
    raw = teacher_forced_logprobs(tiny_model, prompt, greedy.token_ids)
    assert greedy.logprobs == pytest.approx(raw, abs=1e-4)


async def test_a_seed_repeats_a_sample_and_different_seeds_differ(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    sampling = SamplingParams(temperature=1.5, max_tokens=16, seed=11)
    a = await engine.generate(prompt, sampling, request_id="a")
    b = await engine.generate(prompt, sampling, request_id="b")
    assert a.token_ids == b.token_ids
    others = [
        (await engine.generate(prompt, sampling.model_copy(update={"seed": s}), request_id="c")).token_ids
        for s in range(12, 16)
    ]
    assert any(o != a.token_ids for o in others)


async def test_top_p_keeps_only_the_nucleus(tiny_model, tiny_tokenizer, prompt):
    import torch

    engine = HFTokenEngine(tiny_model, tiny_tokenizer, logprobs_mode="raw")
    out = await engine.generate(prompt, SamplingParams(top_p=0.3, max_tokens=1, seed=0), request_id="r")
    with torch.no_grad():
        probs = torch.softmax(tiny_model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
    ordered, order = torch.sort(probs, descending=True)
    nucleus = order[: int((ordered.cumsum(0) < 0.3).sum()) + 1].tolist()
    assert out.token_ids[0] in nucleus


async def test_max_tokens_is_a_length_stop(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    out = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=4), request_id="r")
    assert len(out.token_ids) == 4 and out.stop_reason == LENGTH


async def test_stops_on_a_stop_token_and_keeps_it(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    greedy = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=12), request_id="r")
    target = greedy.token_ids[3]
    first = greedy.token_ids.index(target)
    stopped = await engine.generate(
        prompt, SamplingParams(temperature=0, max_tokens=12, extra={"stop_token_ids": [target]}), request_id="r"
    )
    assert stopped.token_ids == greedy.token_ids[: first + 1] and stopped.stop_reason == STOP
    configured = HFTokenEngine(tiny_model, tiny_tokenizer, stop_token_ids=[target])
    again = await configured.generate(prompt, SamplingParams(temperature=0, max_tokens=12), request_id="r")
    assert again.token_ids == stopped.token_ids


async def test_stop_strings(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    greedy = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=12), request_id="r")
    text = tiny_tokenizer.decode(greedy.token_ids[:5])
    stop = text[-2:]
    out = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=12, stop=[stop]), request_id="r")
    assert out.stop_reason == STOP and stop in tiny_tokenizer.decode(out.token_ids)
    assert out.token_ids == greedy.token_ids[: len(out.token_ids)] and len(out.token_ids) <= 5


async def test_concurrent_requests_are_batched_with_left_padding(tiny_model, tiny_tokenizer):
    def ids(text):
        return tiny_tokenizer.encode(text, add_special_tokens=False)

    prompts = [ids("hi"), ids("what is the weather in paris today"), ids("a longer question about tokyo and rome")]
    single = HFTokenEngine(tiny_model, tiny_tokenizer, batch_window_s=0)
    alone = [
        (await single.generate(p, SamplingParams(temperature=0, max_tokens=n), request_id="r")).token_ids
        for p, n in zip(prompts, (6, 9, 3), strict=True)
    ]
    batched = HFTokenEngine(tiny_model, tiny_tokenizer, batch_window_s=0.05)
    outs = await asyncio.gather(
        *[
            batched.generate(p, SamplingParams(temperature=0, max_tokens=n), request_id=f"r{i}")
            for i, (p, n) in enumerate(zip(prompts, (6, 9, 3), strict=True))
        ]
    )
    assert batched.batches_run == 1 and batched.largest_batch == 3
    assert [o.token_ids for o in outs] == alone  # each row keeps its own max_tokens
    for prompt_ids, out in zip(prompts, outs, strict=True):
        assert out.logprobs == pytest.approx(teacher_forced_logprobs(tiny_model, prompt_ids, out.token_ids), abs=1e-3)


async def test_different_sampling_settings_are_not_batched_together(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer, batch_window_s=0.05)
    await asyncio.gather(
        engine.generate(prompt, SamplingParams(temperature=0, max_tokens=2), request_id="a"),
        engine.generate(prompt, SamplingParams(temperature=0.9, max_tokens=2, seed=1), request_id="b"),
    )
    assert engine.batches_run == 2


async def test_version_is_stamped_on_samples(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    engine.set_version(7)
    out = await engine.generate(prompt, SamplingParams(max_tokens=2, seed=0), request_id="r")
    assert out.version == 7 and out.versions() == [7, 7]


async def test_bad_requests_are_refused(tiny_model, tiny_tokenizer, prompt):
    engine = HFTokenEngine(tiny_model, tiny_tokenizer)
    with pytest.raises(UsageError, match="prompt_ids is empty"):
        await engine.generate([], SamplingParams(), request_id="r")
    with pytest.raises(UsageError, match="outside the model's vocabulary"):
        await engine.generate([10**6], SamplingParams(), request_id="r")
    with pytest.raises(UsageError, match="top_p"):
        await engine.generate(prompt, SamplingParams(top_p=0), request_id="r")
    with pytest.raises(UsageError, match="logprobs_mode"):
        HFTokenEngine(tiny_model, tiny_tokenizer, logprobs_mode="nope")
    with pytest.raises(UsageError, match="tokenizer"):
        await HFTokenEngine(tiny_model).generate(prompt, SamplingParams(stop=["x"]), request_id="r")


async def test_from_pretrained(tiny_model_dir, prompt):
    engine = HFTokenEngine.from_pretrained(tiny_model_dir)
    out = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=3), request_id="r")
    assert len(out.token_ids) == 3
