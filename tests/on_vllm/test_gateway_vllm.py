"""What OpenAI clients ask of a turn, on the real vLLM engine (CPU build): logit bias, penalties,
top logprobs, token streaming and structured output (a JSON schema enforced by vLLM's grammar
backend), through ``VLLMTokenEngine`` and through the gateway with LangChain unmodified."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.testing import check_segments
from aworld_core.tokens import TokenLLM
from aworld_core.tokens.engine import (
    FREQUENCY_PENALTY,
    LOGIT_BIAS,
    PRESENCE_PENALTY,
    STRUCTURED_OUTPUT,
    TOP_LOGPROBS,
    TokenOutput,
)
from aworld_core.tokens.llm import load_tokenizer
from support.gateway_clients import RecordingEngine

pytestmark = pytest.mark.slow
ENGINE_OPTIONS = {"dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.05, "enforce_eager": True}


def prompt(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)


@pytest.fixture(scope="module")
def raw_engine(tool_model_dir, loop):
    """An engine reporting the policy's raw logprobs, with structured outputs (tokenizer loaded)."""
    from aworld_core.tokens.vllm_engine import VLLMTokenEngine

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    eng = VLLMTokenEngine(tool_model_dir, logprobs_mode="raw", structured_outputs=True, **ENGINE_OPTIONS)
    loop.run(eng.start())
    try:
        yield eng
    finally:
        loop.run(eng.aclose())


def test_bias_penalties_and_top_logprobs(raw_engine, loop, tool_model_dir):
    tok = load_tokenizer(tool_model_dir)
    ids = prompt(tok, "What is 2 * 3?")
    favourite = tok.encode("7", add_special_tokens=False)[0]
    out = loop.run(raw_engine.generate(
        ids, SamplingParams(temperature=1.0, max_tokens=5, seed=1,
                            extra={LOGIT_BIAS: {favourite: 100.0}, TOP_LOGPROBS: 3}), request_id="bias"))
    assert out.token_ids == [favourite] * 5  # the bias took effect
    assert len(out.top_logprobs) == 5 and all(len(top) == 3 for top in out.top_logprobs)
    for top, token, logprob in zip(out.top_logprobs, out.token_ids, out.logprobs, strict=True):
        assert max(top.values()) >= logprob  # raw logprobs: the policy's, not the biased draw's
        if token in top:
            assert top[token] == pytest.approx(logprob)
    params = raw_engine._params(ids, SamplingParams(extra={PRESENCE_PENALTY: 1.5, FREQUENCY_PENALTY: 0.5}))
    assert params.presence_penalty == 1.5 and params.frequency_penalty == 0.5
    penalized = loop.run(raw_engine.generate(
        ids, SamplingParams(temperature=0, max_tokens=8, extra={FREQUENCY_PENALTY: 2.0}), request_id="pen"))
    assert len(penalized.token_ids) > 0


def test_scaled_logprobs_refuse_what_changes_the_distribution(engine, loop):
    for extra in ({LOGIT_BIAS: {5: 1.0}}, {PRESENCE_PENALTY: 0.5}, {STRUCTURED_OUTPUT: {"json_object": True}}):
        with pytest.raises(UsageError):
            loop.run(engine.generate([1, 2, 3], SamplingParams(extra=extra), request_id="scaled"))


def test_streamed_pieces_are_the_generation(raw_engine, loop, tool_model_dir):
    tok = load_tokenizer(tool_model_dir)
    ids = prompt(tok, "What is 3 + 4?")
    sampling = SamplingParams(temperature=0, max_tokens=12)
    whole = loop.run(raw_engine.generate(ids, sampling, request_id="whole"))

    async def pieces() -> list[TokenOutput]:
        return [p async for p in raw_engine.stream(ids, sampling, request_id="pieces")]

    got = loop.run(pieces())
    assert len(got) > 1 and got[-1].stop_reason == whole.stop_reason
    assert [t for p in got for t in p.token_ids] == whole.token_ids
    assert [lp for p in got for lp in p.logprobs] == pytest.approx(whole.logprobs)


def test_structured_output_and_streaming_through_the_gateway(raw_engine, tool_model_dir):
    langchain_openai = pytest.importorskip("langchain_openai")
    from pydantic import BaseModel, ConfigDict

    from aworld_core.gateway import Gateway, GatewayServer

    class Sky(BaseModel):
        model_config = ConfigDict(extra="forbid")
        sky: bool

    tok = load_tokenizer(tool_model_dir)
    recording = RecordingEngine(raw_engine)
    llm = TokenLLM(recording, tok, max_response_tokens=64)
    with GatewayServer(Gateway(llm)) as server:
        chat = langchain_openai.ChatOpenAI(model="m", base_url=server.session_base_url("so"), api_key="x",
                                           max_tokens=24)
        report = chat.with_structured_output(Sky, method="json_schema").invoke("Is the sky clear?")
        assert isinstance(report, Sky)
        view = server.gateway.finish_session("so")
        check_segments(view, recording.calls["so"])
        text = tok.decode(recording.calls["so"][0][1].token_ids, skip_special_tokens=True)
        assert json.loads(text) == report.model_dump()

        streamed: list[Any] = list(
            langchain_openai.ChatOpenAI(model="m", base_url=server.session_base_url("st"), api_key="x",
                                        max_tokens=12, temperature=0).stream("What is 3 + 4?")
        )
        view = server.gateway.finish_session("st")
        check_segments(view, recording.calls["st"])
    assert "".join(c.content for c in streamed) == llm.parse(recording.calls["st"][0][1].token_ids).content
