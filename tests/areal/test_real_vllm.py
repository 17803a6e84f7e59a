"""``AworldWorkflow`` through AReaL 1.0.4's vLLM client against a real plain vLLM server.

AReaL's ``RemotevLLMEngine`` (``RemoteInfEngine`` with its ``VLLMBackend``) is initialized on a
plain vLLM OpenAI server (the CPU build, started from ``.venvs/vllm`` by
``aworld_core.vllm_server``; AReaL and vLLM's CPU build cannot share an environment); ``submit``
resolves the workflow from its import path for every prompt and its ``WorkflowExecutor`` runs it;
``agenerate`` posts token ids to ``/v1/completions``. A recording pass-through between them keeps
every exchange, so the test sees exactly what vLLM returned. The model is the head-32 tiny Qwen2
fitted to the suite's tool conversation: greedy decoding makes a real ``add`` call on the MCP
server, then answers.

Pause, resume and the disk weight update: AReaL's own ``VLLMBackend`` sends them to routes of its
server extension, which plain vLLM answers with 404 (and the extension does not import against
vLLM 0.32). ``aworld_areal.vllm_engine.ArealVllmEngine`` sends them to plain vLLM's own routes; the
last test runs AReaL's weight-update sequence through it with a request in flight.
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
from support.vllm_server import VLLM_PYTHON, RecordingProxy, make_vllm_model_dir

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


class InFlightProxy(RecordingProxy):
    """The recording pass-through, counting the requests it is forwarding right now."""

    in_flight = 0

    async def _forward(self, request: Any) -> Any:
        self.in_flight += 1
        try:
            return await super()._forward(request)
        finally:
            self.in_flight -= 1


@pytest.fixture(scope="module")
def vllm_proxy(vllm_tool_model_dir: Path) -> Any:
    from aworld_core.vllm_server import VllmServer, VllmServerSpec

    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON.parent.parent} (make test builds it)")
    spec = VllmServerSpec(python=str(VLLM_PYTHON), model=str(vllm_tool_model_dir), served_model_name="tiny",
                          dtype="float32", max_model_len=2048)
    server = VllmServer(spec, log_path=vllm_tool_model_dir.parent / "vllm-server.log").start()
    print(f"\nvLLM server up in {server.startup_s:.1f} s")
    proxy = InFlightProxy(server.base_url).start()
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


def _perturbed(model_dir: Path, target: Path) -> Path:
    """The model with every weight moved by noise, saved as AReaL's FSDP engine saves (``save_pretrained``:
    a tied model without ``lm_head.weight``)."""
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.1 * param.std())
    model.save_pretrained(target)
    return target


def _teacher_forced(model_dir: Path, ids: list[int], start: int) -> list[float]:
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    logps = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    return logps[start - 1:].tolist()


def test_areals_weight_update_runs_on_plain_vllm_and_a_request_in_flight_is_resumed(
        vllm_tool_model_dir, vllm_proxy, tmp_path):
    """AReaL's own sequence around a disk weight update (``FSDPEngine._update_weights_from_disk`` and
    ``PPOTrainer``'s loop): pause the rollout, ``pause_generation``, publish the checkpoint,
    ``update_weights_from_disk``, ``continue_generation``, ``set_version``, resume, through
    ``ArealVllmEngine`` on plain vLLM (AReaL's own ``VLLMBackend`` gets 404 for all three).
    A request in flight when the pause comes is aborted by vLLM with its tokens so far and re-sent
    by AReaL's ``agenerate``: one response, version 0 for the tokens the old weights sampled and 1
    for the rest, each part's logprobs those of its weights (vLLM's = HF's, teacher-forced)."""
    import asyncio
    import threading
    from datetime import datetime

    from areal.api import WeightUpdateMeta
    from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig, NameResolveConfig
    from areal.api.io_struct import ModelRequest
    from areal.engine.vllm_remote import VLLMBackend
    from areal.utils import name_resolve, names

    from aworld_areal.vllm_engine import ArealVllmEngine

    theirs = VLLMBackend()
    assert {theirs.get_pause_request().endpoint, theirs.get_resume_request().endpoint} == {
        "/areal_pause_generation", "/areal_continue_generation"}  # AReaL's extension routes: 404 on plain vLLM

    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path / "name_resolve")))
    config = InferenceEngineConfig(experiment_name="areal-vllm", trial_name="t0", max_concurrent_rollouts=4,
                                   consumer_batch_size=1, request_timeout=120, setup_timeout=60, request_retries=1,
                                   pause_grace_period=0.0)
    engine = ArealVllmEngine(config)
    engine.initialize(addr=vllm_proxy.address, train_data_parallel_size=1)
    new_weights = _perturbed(vllm_tool_model_dir, tmp_path / "v1")
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    gconfig = GenerationHyperparameters(max_new_tokens=160, max_tokens=2048, ignore_eos=True, temperature=1.0)
    result: dict[str, Any] = {}

    def generate() -> None:
        result["response"] = asyncio.run(engine.agenerate(ModelRequest(rid="r1", input_ids=list(prompt), gconfig=gconfig)))

    before = len(vllm_proxy.exchanges)
    try:
        worker = threading.Thread(target=generate)
        worker.start()
        deadline = time.monotonic() + 60
        while not vllm_proxy.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)
        assert vllm_proxy.in_flight, "the generation request never reached vLLM"
        # PPOTrainer: rollout.pause(); FSDPEngine: pause_generation, save, publish, reload, continue
        engine.pause()
        engine.pause_generation()
        name_resolve.add(names.update_weights_from_disk("areal-vllm", "t0", engine.get_version()),
                         str(datetime.now().timestamp()), keepalive_ttl=120)
        meta = WeightUpdateMeta(type="disk", path=str(new_weights), clear_checkpoint_after_load=False)  # kept to compare
        engine.update_weights_from_disk(meta).result(timeout=120)
        engine.continue_generation()
        engine.set_version(1)
        engine.resume()
        worker.join(timeout=120)
    finally:
        engine.destroy()
    response = result["response"]
    assert response.stop_reason == "length" and len(response.output_tokens) == 160
    versions = response.output_versions
    k = versions.index(1)
    assert 0 < k and versions == [0] * k + [1] * (160 - k), versions

    exchanges = [(path, status, req, resp) for _, path, status, req, resp in vllm_proxy.exchanges[before:]]
    paths = [(path, status) for path, status, _, _ in exchanges]
    # the aborted completion and the pause answer at about the same time; the rest is in order
    assert sorted(paths[:2]) == [("/pause", 200), ("/v1/completions", 200)], paths
    assert paths[2:] == [("/collective_rpc", 200), ("/reset_prefix_cache", 200), ("/resume", 200),
                         ("/v1/completions", 200)], paths
    first = next(resp for path, _, _, resp in exchanges[:2] if path == "/v1/completions")["choices"][0]
    assert first["finish_reason"] == "abort" and len(first["logprobs"]["tokens"]) == k  # vLLM's partial answer
    assert exchanges[5][2]["prompt"] == prompt + response.output_tokens[:k]  # AReaL re-sent prompt + tokens so far
    reload = exchanges[2][2]["kwargs"]["weights_path"]
    assert Path(reload).parent == new_weights  # the tied model's head fix, inside the checkpoint

    ids = prompt + response.output_tokens
    old = _teacher_forced(vllm_tool_model_dir, ids, len(prompt))
    new = _teacher_forced(new_weights, ids, len(prompt))
    got = response.output_logprobs
    first_part = max(abs(a - b) for a, b in zip(got[:k], old[:k], strict=True))
    second_part = max(abs(a - b) for a, b in zip(got[k:], new[k:], strict=True))
    second_vs_old = max(abs(a - b) for a, b in zip(got[k:], old[k:], strict=True))
    print(f"abort after {k} tokens; |vLLM - HF(old)| {first_part:.2e} before, |vLLM - HF(new)| {second_part:.2e} "
          f"after (|vLLM - HF(old)| after: {second_vs_old:.2e})")
    assert first_part < TEACHER_FORCED_TOLERANCE and second_part < TEACHER_FORCED_TOLERANCE < second_vs_old
