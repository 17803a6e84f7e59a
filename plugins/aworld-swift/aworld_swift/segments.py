"""Segmented episodes in ms-swift's GRPO trainer: one batch row per training segment.

An episode whose conversation was compacted or rewritten is several token-exact segments
(``docs/token-fidelity.md``, "Segments"), each trained on its own prompt. ms-swift 4.6's multi-turn
drivers return one ``RolloutOutput`` per trajectory (``swift.rollout.run_multi_turn`` in colocate
mode, ``MultiTurnScheduler.run`` on a rollout server), so the scheduler sends the segments along in
the trajectory's ``rollout_infos`` entry (``segments``: each one's messages, ids, mask, logprobs)
and the trainer expands them here into one ``RolloutOutput`` per segment, before it builds its
samples.

ms-swift's GRPO trainer already has the bookkeeping for several rows per trajectory (its
``dynamic_num_samples`` mode, which a rollout server that returns more outputs than requests turns
on): every row keeps its trajectory's ``request_id``, and ``_compute_advantages`` then takes
``compute_advantages_dynamic``: one reward per ``request_id`` (it refuses rows of one request with
different rewards), group mean and std over the *trajectories* of each ``prompt_id``, and each
row gets its trajectory's advantage. That is the core's credit rule: statistics over episodes,
every segment with its episode's advantage. Groups are neither broken nor shrunk (an episode's
rows share its ``request_id``; its group is its prompt's).

The seams (ms-swift private API, checked by :func:`check_seams` and ``tests/swift/test_segments.py``):

* ``RolloutTrainerMixin._postprocess_rollout_outputs(self, samples, outputs)``: wrapped. When any
  training process's batch holds a segmented trajectory, every output gets its sample's
  ``request_id`` as ``response.id`` (what ms-swift's dynamic path maps outputs by), segmented ones
  become one output per segment, ``dynamic_num_samples`` is set, and ms-swift's own function runs.
  Otherwise ms-swift's function runs unchanged (and a flag set for an earlier batch is cleared).
* ``GRPOTrainer._compute_loss(self, model, model_inputs, grpo_batch, origin_data=None)``: wrapped.
  In dynamic mode ms-swift splits a micro-batch with more rows than ``per_device_train_batch_size``
  into chunks (to bound memory) and averages their losses weighted by rows, which is not the token
  mean; for a segmented batch the loss is computed on the whole micro-batch instead
  (``_compute_loss_single``), so the policy loss is the mean over the batch's sampled tokens.

What a segmented batch needs, refused otherwise with the setting to change (:func:`check_trainer`):
a token-mean ``loss_type`` (``dapo``, ``bnpo``, ``cispo``: ms-swift's default ``grpo`` averages each
row, which would weigh an episode by its number of segments), no ``dynamic_sample`` (DAPO's
resampling keeps the first ``generation_batch_size`` *rows*, which would cut an episode's
segments), no ``padding_free`` (ms-swift's dynamic mode does not support it), and no per-segment
rewards (ms-swift's advantages take one reward per trajectory).
"""

from __future__ import annotations

import functools
from copy import deepcopy
from typing import Any

from aworld_core.errors import UsageError
from aworld_swift.seams import check
from aworld_swift.trajectory import INFO_KEY

TOKEN_MEAN_LOSSES = ("dapo", "bnpo", "cispo")
SEGMENTED_FLAG = "_aworld_segmented"
# ms-swift settings a batch with a segmented episode cannot train with, and why (refused at launch too)
REFUSED_SETTINGS = {
    "dynamic_sample": "its resampling keeps the first generation_batch_size rows, which would cut an episode's "
                      "segments apart",
    "padding_free": "ms-swift's several-rows-per-trajectory mode does not support it",
}


def segments_of(output: Any) -> list[dict[str, Any]] | None:
    """The segment rows the aworld scheduler sent with a trajectory, if it has several."""
    infos = getattr(output, "rollout_infos", None) or {}
    entry = infos.get(INFO_KEY) if isinstance(infos, dict) else None
    rows = entry.get("segments") if isinstance(entry, dict) else None
    return rows or None


def segment_outputs(output: Any, request_id: str) -> list[Any]:
    """``output`` as ms-swift's rows of its trajectory: one per segment (or itself), each with the
    trajectory's ``request_id`` as ``response.id``."""
    rows = segments_of(output)
    if rows is None:
        output.response.id = request_id
        return [output]
    entry = output.rollout_infos[INFO_KEY]
    expanded = []
    for row in rows:
        messages = [dict(m) for m in row["messages"]]
        if not messages or messages[-1].get("role") != "assistant":
            messages.append({"role": "assistant", "content": list(row["response_token_ids"])})
        else:
            messages[-1]["content"] = list(row["response_token_ids"])
        mask = list(row["response_loss_mask"])
        logprobs = list(row["rollout_logprobs"])
        response = deepcopy(output.response)
        response.id = request_id
        expanded.append(output.model_copy(update={
            "response": response,
            "messages": messages,
            "response_token_ids": [list(row["response_token_ids"])],
            "response_loss_mask": [mask],
            # ms-swift keeps rollout importance sampling only where every label has its logprob
            "rollout_logprobs": [logprobs] if logprobs and len(logprobs) == sum(mask) else [],
            "rollout_infos": {**output.rollout_infos, INFO_KEY: {
                **entry, "segments": None, "segment": row["segment"], "segment_count": len(rows),
                "segment_start": row.get("start"), "mask_runs": row["mask_runs"],
            }},
        }))
    return expanded


def check_trainer(trainer: Any, outputs: list[Any]) -> None:
    """Refuse what would train a segmented batch wrongly (see the module docstring)."""
    where = "set it in backends.swift of the job"
    loss_type = getattr(trainer, "loss_type", None)
    if loss_type not in TOKEN_MEAN_LOSSES:
        raise UsageError(
            f"a batch holds an episode of several training segments (its conversation was compacted or rewritten) "
            f"and ms-swift's loss_type is {loss_type!r}, which averages each row: an episode would weigh as much as "
            f"its number of segments. Use a token-mean loss_type ({', '.join(TOKEN_MEAN_LOSSES)}; {where}: "
            f"loss_type: dapo)"
        )
    for key, owner in (("dynamic_sample", getattr(trainer, "args", None)), ("padding_free", getattr(trainer, "template", None))):
        if getattr(owner, key, False):
            raise UsageError(f"a batch holds an episode of several training segments and ms-swift's {key} is on "
                             f"({REFUSED_SETTINGS[key]}); {where}: {key}: false")
    for output in outputs:
        for row in segments_of(output) or []:
            if row.get("reward") is not None:
                entry = output.rollout_infos[INFO_KEY]
                raise UsageError(
                    f"episode {entry['episode_id']} has per-segment rewards (set_segment_rewards): ms-swift 4.6's "
                    "advantages take one reward per trajectory (GRPOTrainer._compute_advantages refuses rows of one "
                    "request with different rewards), so every segment gets the episode's advantage on the swift "
                    "backend; give the episode one reward, or train on trl"
                )


def _any_process(flag: bool) -> bool:
    from accelerate.utils import gather_object

    return any(gather_object([flag]))


def install() -> None:
    """Wrap ms-swift's two seams (idempotent)."""
    from swift.rlhf_trainers.grpo_trainer import GRPOTrainer
    from swift.rlhf_trainers.rollout_mixin import RolloutTrainerMixin

    check_seams()
    postprocess = RolloutTrainerMixin._postprocess_rollout_outputs
    if not getattr(postprocess, "_aworld", False):

        @functools.wraps(postprocess)
        def _postprocess_rollout_outputs(self: Any, samples: list[Any], outputs: list[Any]) -> list[Any]:
            segmented = _any_process(any(segments_of(o) for o in outputs))
            if not segmented:
                if getattr(self, SEGMENTED_FLAG, False):  # set for an earlier batch: ms-swift's own mode again
                    setattr(self, SEGMENTED_FLAG, False)
                    self.dynamic_num_samples = False
                return postprocess(self, samples, outputs)
            check_trainer(self, outputs)
            if len(samples) != len(outputs):
                raise UsageError(
                    f"ms-swift handed {len(outputs)} rollout outputs for {len(samples)} samples with a segmented "
                    "episode among them: the aworld scheduler returns one output per trajectory"
                )
            expanded = [row for sample, output in zip(samples, outputs, strict=True)
                        for row in segment_outputs(output, sample.request_id)]
            setattr(self, SEGMENTED_FLAG, True)
            self.dynamic_num_samples = True
            return postprocess(self, samples, expanded)

        _postprocess_rollout_outputs._aworld = True  # type: ignore[attr-defined]
        RolloutTrainerMixin._postprocess_rollout_outputs = _postprocess_rollout_outputs

    compute_loss = GRPOTrainer._compute_loss
    if not getattr(compute_loss, "_aworld", False):

        @functools.wraps(compute_loss)
        def _compute_loss(self: Any, model: Any, model_inputs: Any, grpo_batch: Any, origin_data: Any = None) -> Any:
            if getattr(self, SEGMENTED_FLAG, False):
                return self._compute_loss_single(model, model_inputs, grpo_batch)
            return compute_loss(self, model, model_inputs, grpo_batch, origin_data)

        _compute_loss._aworld = True  # type: ignore[attr-defined]
        GRPOTrainer._compute_loss = _compute_loss


def check_seams() -> None:
    """Fail loudly (``SeamChanged``) when ms-swift moved or reshaped what :func:`install` relies on."""
    from swift.rl_core import advantage
    from swift.rlhf_trainers.grpo_trainer import GRPOTrainer
    from swift.rlhf_trainers.rollout_mixin import RolloutTrainerMixin

    for owner, name, params, lines in (
        (RolloutTrainerMixin, "_postprocess_rollout_outputs", ["self", "samples", "outputs"], [
            "if not self.dynamic_num_samples:", "request_id = output.response.id",
            "sample.apply_rollout_output(rollout_output=output)"]),
        (GRPOTrainer, "_compute_loss", ["self", "model", "model_inputs", "grpo_batch", "origin_data"], [
            "should_chunk = self.dynamic_num_samples", "self._compute_loss_single(model, model_inputs, grpo_batch)"]),
        (GRPOTrainer, "_compute_loss_single", ["self", "model", "model_inputs", "grpo_batch"], []),
        (GRPOTrainer, "_compute_advantages", ["self", "samples", "rewards_per_func", "batch_encoded_inputs"], [
            "if not self.dynamic_num_samples:", "compute_advantages_dynamic(",
            "request_ids = gather_object([s.request_id for s in samples])"]),
        (advantage, "compute_advantages_dynamic", [
            "rewards_per_func", "reward_weights", "prompt_ids", "request_ids", "advantage_estimator",
            "scale_rewards", "kl_in_reward", "beta", "kl_values"], [
            "prompt_to_indices.setdefault(pid, []).append(idx)", "advantages = request_advantages[indices_in_unique]"]),
    ):
        check(owner, name, "segments", params, lines, exact=True)
