"""Test-only ms-swift external plugin (trainer side, server mode): what the rollout server sampled
against what the policy gives the same tokens, per generation batch.

Wraps ``GRPOTrainer._prepare_batch_inputs`` (after ms-swift computed the policy's teacher-forced
``old_per_token_logps`` on the sampled tokens, before the step's update) and appends one JSON line
per sample to ``$AWORLD_SWIFT_SERVER_RECORD``: the step, the sample's ``rollout_infos``, the
rollout logprobs the server sent (``rollout_logprobs``, nested per turn), and at the positions
the loss trains (``completion_mask``) the server's logprobs as the trainer holds them
(``rollout_per_token_logps``; ``None`` when ms-swift dropped them, which turns rollout importance
sampling off for the batch) and the policy's (``old_per_token_logps``). Observation only.
"""

from __future__ import annotations

import json
import os

from swift.rlhf_trainers import grpo_trainer

_original = grpo_trainer.GRPOTrainer._prepare_batch_inputs


def _positions(values, mask):  # type: ignore[no-untyped-def]
    return None if values is None else [float(v) for v in values[mask.bool()].tolist()]


def _recording_prepare_batch_inputs(self, samples):  # type: ignore[no-untyped-def]
    out = _original(self, samples)
    rows = []
    offset = 0
    for chunk in out:
        batch = chunk["grpo_batch"]
        for index in range(batch.completion_mask.shape[0]):
            sample = samples[offset + index]
            mask = batch.completion_mask[index]
            rollout = batch.rollout_per_token_logps
            rows.append({
                "step": int(self.state.global_step),
                "rollout_infos": sample.rollout_infos,
                "rollout_logprobs": sample.rollout_logprobs,
                "input_ids": [int(i) for i in sample.encoded["input_ids"]],
                "labels": [int(i) for i in sample.encoded["labels"]],
                "is_on": rollout is not None,
                "server": _positions(None if rollout is None else rollout[index], mask),
                "policy": _positions(batch.old_per_token_logps[index], mask),
            })
        offset += batch.completion_mask.shape[0]
    with open(os.environ["AWORLD_SWIFT_SERVER_RECORD"], "a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return out


grpo_trainer.GRPOTrainer._prepare_batch_inputs = _recording_prepare_batch_inputs
