"""verl's agent loop on a real vLLM engine: V0 (``AgentLoopWorker``) and V1 (``PPOTrainerSync`` over
``AgentLoopWorkerTQ``) with every model call answered by a real vLLM server process.

verl's vLLM replica needs GPUs and Ray placement, and vLLM's CPU build cannot live in this
environment (its transformers pin), so the bridge is at the server-manager boundary: the object
verl hands an agent loop, ``generate(request_id, *, prompt_ids, sampling_params, **kw) -> TokenOutput``
(``LLMServerClient``), here ``VllmServerManager``, which does what verl 0.9.1's ``vLLMHttpServer.generate``
does with the request (the ``max_tokens`` default and clamp, ``logprobs`` to 0/None, its stop reasons)
and posts it as token ids to the vLLM server from ``.venvs/vllm`` (``support.vllm_server``).

Token fidelity: the rows verl builds hold exactly the ids and logprobs vLLM returned, and a
teacher-forced forward pass of the same weights in this process (HF transformers) gives the same
logprobs within 0.02 (vLLM serves ``raw_logprobs``: ``log_softmax`` of the logits).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

from verl_testkit import PROMPT_LENGTH, RESPONSE_LENGTH, ServedCall, verl_row

from support.vllm_server import VllmServer, completion_payload, make_vllm_model_dir

pytestmark = pytest.mark.slow

OURS = {"name": "aworld_plain", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:plain_agent"}
REWARDED = {**OURS, "reward": "verl_testkit:exact_answer_reward"}
TEACHER_FORCED_TOLERANCE = 0.02
MAX_MODEL_LEN = PROMPT_LENGTH + RESPONSE_LENGTH


class VllmServerManager:
    """verl's ``LLMServerClient`` boundary, answered by a real vLLM server over loopback."""

    def __init__(self, server: VllmServer, *, version: int = 0):
        self.server = server
        self.version = version
        self.calls: list[ServedCall] = []
        self.seconds = 0.0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        import httpx
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        call = ServedCall(request_id, list(prompt_ids), dict(sampling_params), dict(kwargs))
        self.calls.append(call)
        # verl's vLLMHttpServer.generate: the response budget capped by the context left, at least 1
        room = MAX_MODEL_LEN - len(prompt_ids)
        default = min(RESPONSE_LENGTH, PROMPT_LENGTH + RESPONSE_LENGTH - len(prompt_ids))
        max_tokens = max(1, min(int(params.pop("max_tokens", params.pop("max_new_tokens", default))), room))
        want_logprobs = bool(params.pop("logprobs", False))
        top_k = params.pop("top_k", -1)
        payload = completion_payload(
            prompt_ids, max_tokens=max_tokens, temperature=float(params.pop("temperature", 1.0)),
            top_p=float(params.pop("top_p", 1.0)), top_k=-1 if top_k is None else int(top_k),
            stop_token_ids=params.pop("stop_token_ids", None),
        )
        payload["return_token_ids"] = True
        payload.update(params)  # what else verl sends (repetition_penalty, seed, ...) goes to vLLM as is
        started = time.perf_counter()
        async with httpx.AsyncClient(timeout=120) as client:
            resp = await client.post(f"{self.server.base_url}/v1/completions", json=payload)
        self.seconds += time.perf_counter() - started
        resp.raise_for_status()
        choice = resp.json()["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        assert [int(t.split(":", 1)[1]) for t in choice["logprobs"]["tokens"]] == ids
        reason = {"abort": "aborted", "stop": "completed", "length": "completed"}.get(choice["finish_reason"],
                                                                                   choice["finish_reason"])
        call.token_ids, call.log_probs, call.stop_reason = ids, logprobs, reason
        return TokenOutput(token_ids=ids, log_probs=logprobs if want_logprobs else None, stop_reason=reason,
                           num_preempted=0, extra_fields={"global_steps": self.version})


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_vllm_model_dir(tmp_path_factory.mktemp("vllm-model") / "tiny")


@pytest.fixture(scope="module")
def vllm_server(vllm_model_dir: Path) -> Any:
    server = VllmServer(vllm_model_dir, max_model_len=MAX_MODEL_LEN).start()
    print(f"\nvLLM server up in {server.startup_s:.1f} s")
    yield server
    server.stop()


def _max_teacher_forced_diff(model_dir: Path, calls: list[ServedCall]) -> float:
    """The largest |HF log_softmax(logits) - vLLM logprob| over every sampled token of ``calls``."""
    import torch
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    worst = 0.0
    with torch.no_grad():
        for call in calls:
            ids = torch.tensor([call.prompt_ids + call.token_ids])
            logits = model(input_ids=ids).logits[0, len(call.prompt_ids) - 1 : -1]
            hf = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(call.token_ids)[:, None])[:, 0]
            worst = max(worst, float((hf - torch.tensor(call.log_probs)).abs().max()))
    return worst


def _batch(rows: list[dict[str, Any]]) -> Any:
    import numpy as np
    from verl.protocol import DataProto

    columns: dict[str, np.ndarray] = {}
    for key in rows[0]:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row[key] for row in rows]
        columns[key] = column
    batch = DataProto.from_dict(non_tensors=columns)
    batch.meta_info["validate"] = False
    return batch


async def test_v0_worker_trains_exactly_what_vllm_sampled(make_worker, vllm_server, vllm_model_dir, close_states):
    manager = VllmServerManager(vllm_server, version=3)
    worker = make_worker([OURS], manager, {"actor_rollout_ref.model.path": str(vllm_model_dir)})
    questions = ["What is 2 + 3?", "Name a city.", "Add two and three.", "Say hello."]
    started = time.perf_counter()
    out = await worker.generate_sequences(_batch([verl_row("aworld_plain", q, i) for i, q in enumerate(questions)]))
    elapsed = time.perf_counter() - started
    b, P = out.batch, PROMPT_LENGTH
    assert len(manager.calls) == 4 and all(c.token_ids for c in manager.calls)
    for i in range(4):
        prompt_len = int(b["attention_mask"][i, :P].sum())
        resp_len = int(b["attention_mask"][i, P:].sum())
        prompt = b["prompts"][i, P - prompt_len :].tolist()
        (call,) = [c for c in manager.calls if c.prompt_ids == prompt]  # vLLM saw exactly this prompt
        assert b["responses"][i, :resp_len].tolist() == call.token_ids
        assert b["response_mask"][i, :resp_len].tolist() == [1] * resp_len
        assert b["rollout_log_probs"][i, :resp_len].tolist() == pytest.approx(call.log_probs, abs=1e-6)
        assert call.sampling_params["temperature"] == pytest.approx(0.7) and call.sampling_params["logprobs"]
    assert list(out.non_tensor_batch["min_global_steps"]) == [3] * 4
    worst = _max_teacher_forced_diff(vllm_model_dir, manager.calls)
    tokens = sum(len(c.token_ids) for c in manager.calls)
    print(f"V0: 4 episodes, {tokens} tokens, {elapsed:.2f} s (vLLM calls summed {manager.seconds:.2f} s); "
          f"max |HF - vLLM| logprob {worst:.2e}")
    assert worst < TEACHER_FORCED_TOLERANCE


async def test_v1_trainer_step_trains_exactly_what_vllm_sampled(make_v1, vllm_server, vllm_model_dir,
                                                               verl_tokenizer, close_states):
    from transformers import AutoTokenizer

    # V1 composes its config from the suite's model path; the vLLM model has the same tokenizer
    assert AutoTokenizer.from_pretrained(str(vllm_model_dir)).get_vocab() == verl_tokenizer.get_vocab()
    manager = VllmServerManager(vllm_server, version=1)
    v1 = make_v1([REWARDED], manager, ["actor_rollout_ref.rollout.n=3"])
    started = time.perf_counter()
    step = await v1.step([verl_row("aworld_plain", "What is 2 + 3?"), verl_row("aworld_plain", "Add 1 and 4.", 1)])
    elapsed = time.perf_counter() - started
    assert len(step.uids()) == 2 and len(step.rows) == 6 and len(manager.calls) == 6
    for row in step.rows:
        assert row.extra["status"] == "success"
        (call,) = [c for c in manager.calls if c.request_id == row.extra["trajectory_id"]]
        sampled = [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m]
        assert sampled == call.token_ids
        trained = [lp for lp, m in zip(row.logprobs, row.response_mask, strict=True) if m]
        assert trained == pytest.approx(call.log_probs, abs=1e-6)
    assert step.metrics["aworld/episodes"] == 6
    worst = _max_teacher_forced_diff(vllm_model_dir, manager.calls)
    print(f"V1: 6 episodes, {sum(len(c.token_ids) for c in manager.calls)} tokens, {elapsed:.2f} s "
          f"(vLLM calls summed {manager.seconds:.2f} s); max |HF - vLLM| logprob {worst:.2e}")
    assert worst < TEACHER_FORCED_TOLERANCE
