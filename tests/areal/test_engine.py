"""``ArealTokenEngine``, the episode tensors and the dataset rows, on a real tiny model."""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal_fake_engine import FakeArealEngine

from aworld_areal.data import SAMPLE_COLUMN, hf_dataset, sample_from_row
from aworld_areal.engine import ArealTokenEngine, as_gconfig
from aworld_areal.tensors import discounted, episode_tensors
from aworld_core.errors import DatasetError, LLMError, UsageError
from aworld_core.schemas import Sample, SamplingParams, TrainingView
from aworld_core.tokens.engine import LENGTH, STOP, STOP_TOKEN_IDS


def test_request_gconfig_keeps_areals_sampling_and_adds_the_calls_limits():
    gconfig = GenerationHyperparameters(n_samples=4, temperature=0.7, top_p=0.9, max_new_tokens=100, stop_token_ids=[1])
    engine = ArealTokenEngine(object.__new__(FakeArealEngine), gconfig)
    call = SamplingParams(temperature=0.1, top_p=0.5, max_tokens=30, stop=["</answer>"], extra={STOP_TOKEN_IDS: [7, 1]})
    g = engine.request_gconfig(call)
    assert g.n_samples == 1  # one sequence per request; each group member is its own episode
    assert (g.temperature, g.top_p) == (0.7, 0.9)  # the trainer recomputes logprobs with gconfig's
    assert g.max_new_tokens == 30 and g.stop_token_ids == [1, 7] and g.stop == ["</answer>"]
    assert gconfig.n_samples == 4 and gconfig.max_new_tokens == 100  # the workflow's gconfig is untouched
    assert engine.request_gconfig(SamplingParams()).max_new_tokens == 100


def test_generate_returns_the_engines_tokens_logprobs_and_versions(tool_model_dir):
    fake = FakeArealEngine(tool_model_dir, version=2, interrupt_after=3)
    engine = ArealTokenEngine(fake, {"greedy": True, "max_new_tokens": 8, "max_tokens": 512})
    out = asyncio.run(engine.generate([5, 6, 7, 8], SamplingParams(max_tokens=6), request_id="ep-1"))
    response = fake.responses[0]
    assert fake.requests[0].rid == "ep-1" and fake.requests[0].input_ids == [5, 6, 7, 8]
    assert out.token_ids == response.output_tokens and out.logprobs == response.output_logprobs
    assert out.versions() == [2, 2, 2, 3, 3, 3] and out.stop_reason == LENGTH


def test_a_full_context_ends_the_episode_by_length_without_a_request(tool_model_dir):
    fake = FakeArealEngine(tool_model_dir)
    engine = ArealTokenEngine(fake, {"max_new_tokens": 8, "max_tokens": 4})
    out = asyncio.run(engine.generate([1, 2, 3, 4], SamplingParams(), request_id="ep-2"))
    assert out.token_ids == [] and out.stop_reason == LENGTH and fake.requests == []


def test_misaligned_versions_are_an_error_the_llm_reports(tool_model_dir):
    from aworld_core.tokens.llm import TokenLLM

    class DropsVersions(FakeArealEngine):
        async def agenerate(self, req):
            response = await super().agenerate(req)
            response.output_versions = response.output_versions[:-1]
            return response

    fake = DropsVersions(tool_model_dir)
    llm = TokenLLM(ArealTokenEngine(fake, {"max_new_tokens": 4}), str(tool_model_dir))
    with pytest.raises(LLMError, match="output_versions"):
        asyncio.run(llm.chat([{"role": "user", "content": "hi"}], session_id="ep-3"))


def test_stop_reasons_map_to_the_cores(tool_model_dir):
    fake = FakeArealEngine(tool_model_dir)
    engine = ArealTokenEngine(fake, {"greedy": True, "max_new_tokens": 64, "max_tokens": 512})
    eos = fake.hf.tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = asyncio.run(
        engine.generate([1, 2, 3], SamplingParams(extra={STOP_TOKEN_IDS: [eos]}), request_id="ep-4")
    )
    assert out.stop_reason in (STOP, LENGTH)
    assert (out.stop_reason == STOP) == (out.token_ids[-1] in fake.requests[0].gconfig.stop_token_ids)


def test_bad_engine_or_gconfig_is_a_usage_error():
    with pytest.raises(UsageError, match="agenerate"):
        ArealTokenEngine(object(), {})
    with pytest.raises(UsageError, match="GenerationHyperparameters"):
        as_gconfig({"temprature": 1.0})


def test_episode_tensors_from_a_view():
    view = TrainingView(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5, 6],
        response_mask=[1, 1, 0, 1],
        response_logprobs=[-0.5, -0.25, 0.0, -1.0],
        response_versions=[4, 5, -1, 5],
        num_turns=2,
    )
    out = episode_tensors(view, 0.5)
    assert out["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6]]
    assert out["loss_mask"].tolist() == [[0, 0, 1, 1, 0, 1]]
    assert out["logprobs"].tolist() == [[0.0, 0.0, -0.5, -0.25, 0.0, -1.0]]
    assert out["versions"].tolist() == [[-1, -1, 4, 5, -1, 5]]
    assert out["rewards"].tolist() == [0.5] and out["attention_mask"].dtype == torch.bool
    bad = view.model_copy(update={"response_versions": [4, 5, 3, 5]})
    with pytest.raises(ValueError, match="non-sampled"):
        episode_tensors(bad, 1.0)
    with pytest.raises(ValueError, match="response_mask"):
        episode_tensors(view.model_copy(update={"response_mask": [1, 1, 0]}), 1.0)


def test_discount():
    assert discounted(1.0, 1, 0.5) == 1.0
    assert discounted(1.0, 3, 0.5) == 0.25
    with pytest.raises(ValueError, match="turn_discount"):
        discounted(1.0, 2, 0.0)


def test_dataset_rows_round_trip_through_a_hf_dataset():
    samples = [
        Sample(id="a", prompt=[{"role": "user", "content": "q1"}], ground_truth={"answer": 3}, extra_info={"k": [1]}),
        Sample(id="b", prompt=[{"role": "user", "content": "q2"}], ground_truth="7", data_source="gsm8k"),
    ]
    dataset = hf_dataset(samples)
    assert dataset.column_names == ["id", SAMPLE_COLUMN] and len(dataset) == 2
    assert [sample_from_row(row) for row in dataset] == samples
    with pytest.raises(DatasetError, match="empty"):
        hf_dataset([])
    with pytest.raises(DatasetError, match="dict row"):
        sample_from_row(["not", "a", "row"])
