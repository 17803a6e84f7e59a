"""Segmented episodes on TRL: every segment of an episode is a row of the GRPO batch.

TRL's ``rollout_func`` returns one row per prompt of its batch, and its GRPO statistics run over
those rows (``num_generations`` consecutive rows per prompt). So the rollout hands TRL each
episode's **first** segment as its row (exactly the one-sequence view of old), with the episode's
reward; the episode's later segments travel in the row's extra field :data:`SEGMENTS_FIELD`, which
TRL copies into the batch's inputs. Once TRL has built the batch and its advantages (one per
episode), :func:`add_segment_rows` appends a row per later segment, following the core's rule
(``aworld_core.worker.credit``):

* a segment row is its own prompt (left-padded like TRL's) and its response (sampled ids mask 1,
  with their logprobs; tool/template ids mask 0 in ``tool_mask``);
* its advantage is its episode's, moved by ``(r_s - r) / scale`` when the reward gave the segment
  a reward of its own (``scale``: TRL's divisor, ``std + 1e-4`` of the group or batch, 1 without
  ``scale_rewards``); the group statistics stay one per episode;
* the loss normalization is TRL's token mean (``loss_type`` ``dapo``, ``bnpo``, ``cispo``):
  ``num_items_in_batch`` counts the new rows' sampled tokens; per-sequence loss types are refused
  for a batch with a multi-segment episode;
* the old / reference log-probabilities TRL computed (when it computes them) are computed for the
  new rows too, all rows under one padded layout;
* the row count is padded to a multiple of ``steps_per_generation`` with rows that train nothing
  (TRL's split drops a remainder).

``trainer.aworld_rows`` lists, per output row, the input row it came from (TRL's) or the segment
dict (a later segment, ``aworld_versions`` holding its per-token policy versions), for code that
adds per-row columns after this (asynchronous GRPO).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aworld_core.errors import AworldError
from aworld_core.worker import check_token_mean, episode_segments

SEGMENTS_FIELD = "aworld_segments"  # per TRL row: the episode's later segments and segment rewards
REWARD_FIELD = "aworld_reward"  # the extra field carrying the core's reward to TRL's reward function (rollout's)
TOKEN_MEAN_LOSSES = ("dapo", "bnpo", "cispo")  # TRL loss types that normalize over the batch's sampled tokens
SEGMENT_KEYS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "response_versions")


def segment_plans(groups: Sequence[Any]) -> list[dict[str, Any] | None]:
    """Per TRL row (the members of ``groups`` in order): ``None`` for a member that does not train
    or has one plain segment, else ``{"reward": r, "first_reward": r_0 | None, "later": [...]}``
    with each later segment's ids, mask, logprobs, versions and own reward."""
    plans: list[dict[str, Any] | None] = []
    for group in groups:
        for episode, trained in zip(group.episodes, group.trained(), strict=True):
            segments = episode_segments(episode) if trained else []
            if len(segments) <= 1 and (not segments or segments[0].reward is None):
                plans.append(None)
                continue
            plans.append({
                "reward": episode.reward,
                "first_reward": segments[0].reward,
                "later": [{**{k: list(getattr(s, k)) for k in SEGMENT_KEYS}, "reward": s.reward} for s in segments[1:]],
            })
    return plans


def reward_scales(trainer: Any, rewards: list[float | None]) -> list[float]:
    """TRL's advantage divisor per row (its ``scale_rewards``): the group's (or batch's) std + 1e-4."""
    import torch
    from trl.trainer.utils import nanstd

    if getattr(trainer, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        raise AworldError(
            "per-segment rewards need TRL's multi_objective_aggregation='sum_then_normalize' (the advantage is "
            "then (reward - mean) / scale, which a segment's own reward can follow); remove the setting or "
            "give the episode one reward"
        )
    mode = getattr(trainer, "scale_rewards", "group")
    values = torch.tensor([float("nan") if r is None else float(r) for r in rewards])
    if mode in (False, "none"):
        return [1.0] * len(rewards)
    if mode == "batch":
        std = nanstd(values).item() if values.numel() > 1 else 0.0
        return [std + 1e-4] * len(rewards)
    n = group_size(trainer, trainer.model.training)
    stds = nanstd(values.view(-1, n), dim=1) if n > 1 else torch.zeros(len(rewards) // n)
    return [float(s) + 1e-4 for s in stds.repeat_interleave(n).tolist()]


def group_size(trainer: Any, train: bool) -> int:
    """TRL's group size: ``num_generations`` in training, ``num_generations_eval`` (when set) in an evaluation."""
    return int(trainer.num_generations if train else (getattr(trainer, "num_generations_eval", None)
                                                      or trainer.num_generations))


def add_segment_rows(trainer: Any, output: dict[str, Any], inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """TRL's batch ``output`` with a row per later segment of its episodes (see the module docstring)."""
    trainer.aworld_rows = list(inputs)
    plans = [row.get(SEGMENTS_FIELD) for row in inputs]
    if not any(plans):
        return output
    for key in ("num_images", "pixel_values", "image_grid_thw", "importance_sampling_ratio"):
        if key in output:
            raise AworldError(f"segmented episodes on TRL cannot carry the batch's '{key}' (multimodal inputs or "
                              "TRL's own vLLM importance sampling) into their extra rows")
    multi = any(p and p["later"] for p in plans)
    check_token_mean(str(trainer.loss_type), token_mean=TOKEN_MEAN_LOSSES, multi_segment=multi,
                     setting="backends.trl.loss_type")
    advantages = output["advantages"].clone()
    episode_adv = output["advantages"].tolist()
    scales = None
    if any(p and (p["first_reward"] is not None or any(s["reward"] is not None for s in p["later"])) for p in plans):
        scales = reward_scales(trainer, [row.get(REWARD_FIELD) for row in inputs])
    new: list[dict[str, Any]] = []
    for i, plan in enumerate(plans):
        if not plan:
            continue
        r = plan["reward"]
        if plan["first_reward"] is not None and scales is not None:
            advantages[i] += (plan["first_reward"] - r) / scales[i]
        for segment in plan["later"]:
            credit = episode_adv[i]
            if segment["reward"] is not None and scales is not None:
                credit += (segment["reward"] - r) / scales[i]
            new.append({**segment, "advantage": credit, "aworld_versions": segment["response_versions"]})
    output["advantages"] = advantages
    if not new:
        return output
    merged = merge_rows(trainer, output, inputs, new, advantages)
    if "old_per_token_logps" in output or "ref_per_token_logps" in output:
        _recompute_logps(trainer, output, merged, merged["completion_ids"].shape[1])
    trainer._metrics["train" if trainer.model.training else "eval"]["aworld/segment_rows"].append(float(len(new)))
    return {**output, **merged}


def merge_rows(trainer: Any, output: dict[str, Any], inputs: list[dict[str, Any]], new: list[dict[str, Any]],
               old_advantages: Any = None) -> dict[str, Any]:
    """The columns of TRL's batch ``output`` (rows ``inputs``) with the rows of ``new`` appended
    (:func:`new_rows`), padded in training to a multiple of ``steps_per_generation`` (TRL's split drops
    a remainder), all under one padded layout; sets ``trainer.aworld_rows``. ``old_advantages``: the
    old rows' (segment rows); ``None``: the old rows are placeholders that train nothing (tool mask 0,
    advantage 0: per-policy rows)."""
    import torch

    old_rows = output["prompt_ids"].shape[0]
    filler = (-(old_rows + len(new))) % int(trainer.args.steps_per_generation) if trainer.model.training else 0
    train_old = old_advantages is not None
    rows = new_rows(trainer, output, new, filler, tool_fill=int(train_old))
    width_p, width_c, pad_id, device = rows["width_p"], rows["width_c"], rows["pad_id"], output["prompt_ids"].device
    old_tool = output.get("tool_mask")
    if old_tool is None:
        old_tool = torch.ones_like(output["completion_mask"])
    if not train_old:
        old_tool, old_advantages = torch.zeros_like(old_tool), torch.zeros_like(output["advantages"])
    merged = {
        "prompt_ids": pad_left(output["prompt_ids"], width_p, pad_id),
        "prompt_mask": pad_left(output["prompt_mask"], width_p, 0),
        "completion_ids": pad_right(output["completion_ids"], width_c, pad_id),
        "completion_mask": pad_right(output["completion_mask"], width_c, 0),
        "tool_mask": pad_right(old_tool, width_c, int(train_old)),
        "advantages": old_advantages,
    }
    if output.get("sampling_per_token_logps") is not None:
        merged["sampling_per_token_logps"] = pad_right(output["sampling_per_token_logps"], width_c, 0.0)
    merged = {key: torch.cat([old, rows[key].to(device)]) for key, old in merged.items()}
    merged["num_items_in_batch"] = (merged["completion_mask"] * merged["tool_mask"]).sum()
    trainer.aworld_rows = [*inputs, *new, *([{}] * filler)]
    return merged


def pad_left(t: Any, width: int, value: float) -> Any:
    import torch

    return torch.nn.functional.pad(t, (width - t.shape[1], 0), value=value)


def pad_right(t: Any, width: int, value: float) -> Any:
    import torch

    return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)


def new_rows(trainer: Any, output: dict[str, Any], new: list[dict[str, Any]], filler: int,
             tool_fill: int) -> dict[str, Any]:
    """Rows to append to TRL's batch ``output``, in its layout (prompts left-padded, completions
    right-padded to the batch's widths or wider): one per entry of ``new`` (``prompt_ids``,
    ``response_ids``, ``response_mask``, ``response_logprobs``, ``advantage``: the sampled tokens
    mask 1 with their logprobs, the rest mask 0), then ``filler`` rows of one padding token that
    are attended to and never trained (a batch a multiple of ``steps_per_generation``). A
    completion cut at the length budget trains nothing when TRL's ``mask_truncated_completions``
    says so. Shared by segment rows (this module) and per-policy rows (:mod:`aworld_trl.multi_policy`);
    ``tool_fill`` is the tool mask past a row's completion (never trained either way)."""
    import torch

    pad_id = trainer._tokenizer.pad_token_id  # the id TRL pads with
    eos_and_pad = [*trainer.eos_token_ids, pad_id]
    prompts = [s["prompt_ids"] for s in new] + [[pad_id]] * filler
    completions = [s["response_ids"] for s in new] + [[pad_id]] * filler
    width_p = max([output["prompt_ids"].shape[1], *(len(p) for p in prompts)])
    width_c = max([output["completion_ids"].shape[1], *(len(c) for c in completions)])
    n = len(prompts)
    prompt_ids = torch.full((n, width_p), pad_id, dtype=output["prompt_ids"].dtype)
    prompt_mask = torch.zeros((n, width_p), dtype=output["prompt_mask"].dtype)
    completion_ids = torch.full((n, width_c), pad_id, dtype=output["completion_ids"].dtype)
    completion_mask = torch.zeros((n, width_c), dtype=output["completion_mask"].dtype)
    tool_mask = torch.full((n, width_c), tool_fill, dtype=torch.long)
    sampling = torch.zeros((n, width_c), dtype=torch.float32)  # the sampled tokens' logprobs
    advantages = torch.zeros(n, dtype=output["advantages"].dtype)
    for j, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        prompt_ids[j, width_p - len(prompt):] = torch.tensor(prompt)
        completion_ids[j, : len(completion)] = torch.tensor(completion)
        if j < len(new):
            row = new[j]
            prompt_mask[j, width_p - len(prompt):] = 1
            cut = trainer.mask_truncated_completions and completion[-1] not in eos_and_pad
            completion_mask[j, : len(completion)] = 0 if cut else 1
            tool_mask[j, : len(completion)] = torch.tensor(row["response_mask"])
            sampling[j, : len(completion)] = torch.tensor(row["response_logprobs"], dtype=torch.float32)
            advantages[j] = row["advantage"]
        else:  # filler: one padding token, attended to but never trained
            prompt_mask[j, -1] = 1
            tool_mask[j, 0] = 0
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "tool_mask": tool_mask, "sampling_per_token_logps": sampling,
            "advantages": advantages, "width_p": width_p, "width_c": width_c, "pad_id": pad_id}


def _recompute_logps(trainer: Any, output: dict[str, Any], merged: dict[str, Any], width_c: int) -> None:
    """The old / reference log-probabilities TRL computed, for every row under the merged layout
    (a wider left padding moves the old rows' positions, so they are computed again with the new)."""
    import torch
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import use_adapter

    ids = torch.cat([merged["prompt_ids"], merged["completion_ids"]], dim=1)
    attention = torch.cat([merged["prompt_mask"], merged["completion_mask"]], dim=1)
    mode = "train" if trainer.model.training else "eval"
    batch_size = trainer.args.per_device_train_batch_size if mode == "train" else trainer.args.per_device_eval_batch_size
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        if "old_per_token_logps" in output:
            merged["old_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, width_c, batch_size=batch_size)
        if "ref_per_token_logps" in output:
            if trainer.ref_model is not None:
                merged["ref_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.ref_model, ids, attention, width_c, batch_size=batch_size)
            else:
                model = trainer.accelerator.unwrap_model(trainer.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    merged["ref_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                        trainer.model, ids, attention, width_c, batch_size=batch_size)
