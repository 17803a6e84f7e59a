"""Test-only ms-swift external plugin: what the colocated vLLM engine sampled, and what each sync did.

Loaded in the trainer process after aworld-swift's plugin (so it sees the patched sync). Appends
JSON lines to ``$AWORLD_SWIFT_VLLM_RECORD``:

* ``{"kind": "sample", "prompt_ids", "token_ids"}`` per vLLM output of the rollouts, from the
  ``RequestOutput`` vLLM returned, before ``GRPOVllmEngine`` converts it;
* ``{"kind": "sync", "step", "before", "after"}`` around every ``_move_model_to_vllm``: the max
  absolute difference between the policy's embedding and the vLLM model's (which is tied to its
  head), and vLLM's greedy logprobs of a fixed prompt.

Observation only: the trainer's behaviour is unchanged.
"""

from __future__ import annotations

import json
import os
from typing import Any

from swift.infer_engine import grpo_vllm_engine
from swift.rlhf_trainers import rollout_mixin

_original_response = grpo_vllm_engine.GRPOVllmEngine._create_chat_completion_response
_original_move = rollout_mixin.RolloutTrainerMixin._move_model_to_vllm
PROMPT = [{"role": "user", "content": "What is 1 + 2?"}]
_probing = False


def _write(row: dict[str, Any]) -> None:
    with open(os.environ["AWORLD_SWIFT_VLLM_RECORD"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


def _recording_response(self, result, inputs, request_config, request_id):  # type: ignore[no-untyped-def]
    for output in result.outputs if not _probing else ():
        _write({"kind": "sample", "prompt_ids": [int(i) for i in result.prompt_token_ids],
                "token_ids": [int(i) for i in output.token_ids]})
    return _original_response(self, result, inputs, request_config, request_id)


def _probe(trainer: Any) -> dict[str, Any]:
    global _probing
    import torch
    from swift.infer_engine import RequestConfig

    policy = trainer.accelerator.unwrap_model(trainer.model).get_input_embeddings().weight.detach()
    served = trainer.engine.inner_model.model.embed_tokens.weight.detach()[: policy.shape[0]]  # vLLM pads rows
    _probing = True
    try:
        [output] = trainer.engine.infer([{"messages": PROMPT}], RequestConfig(max_tokens=6, temperature=0.0,
                                                                                logprobs=True), use_tqdm=False)
    finally:
        _probing = False
    response = getattr(output, "response", output)  # GRPOVllmEngine wraps it in a RolloutOutput
    content = response.choices[0].logprobs["content"]
    return {"embed_diff": float(torch.max(torch.abs(policy.float() - served.float()))),
            "greedy_logprobs": [float(entry["logprob"]) for entry in content]}


def _recording_move(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    before = _probe(self)
    out = _original_move(self, *args, **kwargs)
    _write({"kind": "sync", "step": int(self.state.global_step), "before": before, "after": _probe(self)})
    return out


grpo_vllm_engine.GRPOVllmEngine._create_chat_completion_response = _recording_response
rollout_mixin.RolloutTrainerMixin._move_model_to_vllm = _recording_move
