"""``AworldWorkflow`` through AReaL 1.0.4's real vLLM client against a real vLLM server.

AReaL's ``RemotevLLMEngine`` (``RemoteInfEngine`` with its ``VLLMBackend``) is initialized on a
plain vLLM OpenAI server (the CPU build, started from ``.venvs/vllm``: ``support.vllm_server``;
AReaL and vLLM's CPU build cannot share an environment); ``submit`` resolves the workflow from its
import path for every prompt and its ``WorkflowExecutor`` runs it; ``agenerate`` posts token ids to
``/v1/completions``. A recording pass-through between them keeps every exchange, so the test sees
exactly what vLLM returned. The model is the head-32 tiny Qwen2 fitted to the suite's tool
conversation: greedy decoding makes a real ``add`` call on the MCP server, then answers.

What plain vLLM lacks: AReaL's weight update, pause and resume go to endpoints of AReaL's own
server extension (``areal/engine/vllm_ext/areal_vllm_server.py``: ``/areal_update_weights``,
``/areal_pause_generation``, ``/areal_continue_generation``), which a plain vLLM server answers
with 404; the last test pins that (docs/backend-areal.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from areal_sglang_server import submit_all
from areal_tool_model import QUESTION, fit_tool_model, job_dict

from aworld_areal.workflow import close_workflow_states
from support.vllm_server import RecordingProxy, VllmServer, make_vllm_model_dir

pytestmark = pytest.mark.slow

GCONFIG = {"greedy": True, "max_new_tokens": 48, "max_tokens": 2048}
TEACHER_FORCED_TOLERANCE = 0.02


@pytest.fixture(autouse=True)
def fresh_states():
    close_workflow_states()
    yield
    close_workflow_states()


@pytest.fixture(scope="module")
def vllm_tool_model_dir(tmp_path_factory: pytest.TempPathFactory, tool_conversation: Any) -> Path:
    text, _ = tool_conversation
    base = make_vllm_model_dir(tmp_path_factory.mktemp("vllm-base") / "tiny")
    return fit_tool_model(base, tmp_path_factory.mktemp("vllm-tool-model") / "tiny", text)


@pytest.fixture(scope="module")
def vllm_proxy(vllm_tool_model_dir: Path) -> Any:
    server = VllmServer(vllm_tool_model_dir, max_model_len=2048).start()
    print(f"\nvLLM server up in {server.startup_s:.1f} s")
    proxy = RecordingProxy(server.base_url).start()
    yield proxy
    proxy.stop()
    server.stop()


@pytest.fixture(scope="module")
def vllm_engine(vllm_proxy: RecordingProxy) -> Any:
    from areal.api.cli_args import InferenceEngineConfig
    from areal.engine.vllm_remote import RemotevLLMEngine

    config = InferenceEngineConfig(max_concurrent_rollouts=8, consumer_batch_size=4, max_head_offpolicyness=1000,
                                   check_trajectory_format=True, request_timeout=120, setup_timeout=60,
                                   request_retries=1, pause_grace_period=0.0)
    engine = RemotevLLMEngine(config)
    engine.initialize(addr=vllm_proxy.address, train_data_parallel_size=1)
    yield engine
    engine.destroy()


def _completions(proxy: RecordingProxy, start: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(req, resp) for _, path, status, req, resp in proxy.exchanges[start:]
            if path == "/v1/completions" and status == 200]


def test_areal_vllm_client_trains_exactly_what_vllm_returned(vllm_tool_model_dir, mcp_server, vllm_engine,
                                                            vllm_proxy):
    from transformers import Qwen2ForCausalLM

    kwargs = {"job": json.dumps(job_dict(vllm_tool_model_dir, mcp_server)), "gconfig": {**GCONFIG, "n_samples": 1},
              "tokenizer": str(vllm_tool_model_dir), "reward_processes": 0}
    before = len(vllm_proxy.exchanges)
    started = time.perf_counter()
    outs = submit_all(vllm_engine, [{"question": QUESTION, "answer": "5"}] * 2, kwargs)
    elapsed = time.perf_counter() - started
    assert all(out is not None for out in outs), outs
    exchanges = _completions(vllm_proxy, before)
    assert len(exchanges) == 4, [e[0] for e in exchanges]  # per episode: the tool call, then the answer
    for req, _ in exchanges:  # AReaL's VLLMBackend request shape: token ids in, token ids + logprobs out
        assert isinstance(req["prompt"], list) and req["return_tokens_as_token_ids"] and req["temperature"] == 0.0

    model = Qwen2ForCausalLM.from_pretrained(str(vllm_tool_model_dir), dtype=torch.float32).eval()
    worst = 0.0
    for out in outs:
        ids, mask = out["input_ids"][0].tolist(), out["loss_mask"][0].tolist()
        logprobs, versions = out["logprobs"][0].tolist(), out["versions"][0].tolist()
        # both of this episode's calls are prefixes of its row (the greedy episodes are alike: one per prompt)
        mine = list({tuple(req["prompt"]): (req, resp) for req, resp in exchanges
                     if ids[: len(req["prompt"])] == req["prompt"]}.values())
        assert len(mine) == 2
        (first, first_resp), (second, second_resp) = sorted(mine, key=lambda e: len(e[0]["prompt"]))
        for req, resp in ((first, first_resp), (second, second_resp)):
            choice = resp["choices"][0]
            sampled = [int(t.split(":", 1)[1]) for t in choice["logprobs"]["tokens"]]
            returned = choice["logprobs"]["token_logprobs"]
            span = slice(len(req["prompt"]), len(req["prompt"]) + len(sampled))
            assert ids[span] == sampled  # the trained ids are vLLM's, never re-tokenized
            assert mask[span] == [1] * len(sampled) and versions[span] == [0] * len(sampled)
            assert logprobs[span] == pytest.approx(returned, abs=1e-6)
        # the tool result between the turns is the template's render, masked out
        tool_part = slice(len(first["prompt"]) + len(first_resp["choices"][0]["logprobs"]["tokens"]),
                          len(second["prompt"]))
        assert mask[tool_part] == [0] * (tool_part.stop - tool_part.start) and tool_part.stop > tool_part.start
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        hf = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        trained = torch.tensor(mask[1:], dtype=torch.bool)
        worst = max(worst, float((hf[trained] - torch.tensor(logprobs[1:])[trained]).abs().max()))
    print(f"AReaL on vLLM: 2 tool episodes, 4 completions, {elapsed:.2f} s; max |HF - vLLM| logprob {worst:.2e}")
    assert worst < TEACHER_FORCED_TOLERANCE


def test_plain_vllm_lacks_areals_weight_update_and_pause_endpoints(vllm_engine, vllm_proxy, tmp_path):
    """AReaL's client reaches plain vLLM for generation only: the weight update (disk), pause and
    resume requests its ``VLLMBackend`` builds go to AReaL's server extension and get 404 here."""
    import asyncio

    import aiohttp
    from areal.api import WeightUpdateMeta
    from areal.engine.vllm_remote import VLLMBackend
    from areal.infra.utils.http import arequest_with_retry

    backend = VLLMBackend()
    (update,) = backend.build_disk_weight_update_requests(WeightUpdateMeta(type="disk", path=str(tmp_path))).requests
    wanted = {update.endpoint: update, **{r.endpoint: r for r in (backend.get_pause_request(),
                                                                   backend.get_resume_request())}}
    assert set(wanted) == {"/areal_update_weights", "/areal_pause_generation", "/areal_continue_generation"}

    async def send(request: Any) -> None:
        async with aiohttp.ClientSession() as session:
            await arequest_with_retry(session=session, addr=vllm_proxy.address, endpoint=request.endpoint,
                                      payload=request.payload, method=request.method, max_retries=1, timeout=10)

    before = len(vllm_proxy.exchanges)
    for request in wanted.values():
        with pytest.raises(RuntimeError, match=f"Endpoint: {request.endpoint}. Last error: ClientResponseError.*404"):
            asyncio.run(send(request))
    assert [(path, status) for _, path, status, _, _ in vllm_proxy.exchanges[before:]] == [
        (endpoint, 404) for endpoint in wanted]
    with pytest.raises(RuntimeError, match="/areal_pause_generation.*404"):  # AReaL's own pause: the same 404
        vllm_engine.pause_generation()
