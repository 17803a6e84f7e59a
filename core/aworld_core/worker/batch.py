"""Training segments to the padded, shifted tensors one policy-gradient step needs.

A segment (``TrainingSegment``; a one-segment ``TrainingView``) is ``prompt_ids`` then
``response_ids`` (sampled tokens with mask 1, tool/environment tokens with mask 0). Row ``b`` of
the batch is that sequence, right-padded to the longest row. An episode of several segments is
several rows (:func:`episodes_to_batch`, with the credit rule of ``aworld_core.worker.credit``).
Position ``t`` of the shifted tensors (length ``T - 1``) is the prediction of token ``t + 1``
from the logits at ``t``, which is what ``model(input_ids).logits[:, :-1]`` gives:

* ``targets``: ``input_ids[:, 1:]``;
* ``loss_mask``: 1 exactly where the target is a sampled response token;
* ``old_logprobs``: the sampling logprobs of those tokens (0.0 elsewhere);
* ``versions``: the policy version each was sampled with (-1 elsewhere).

Tokens are never re-tokenized or re-ordered: ``input_ids`` holds the view's ids as they are.
torch is imported when a batch is made, not when this module is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, TrainingSegment, TrainingView
from aworld_core.worker.credit import segment_rows


def views_to_batch(
    views: Sequence[TrainingSegment],
    *,
    pad_id: int = 0,
    rewards: Sequence[float] | None = None,
    advantages: Sequence[float] | None = None,
    max_length: int | None = None,
    device: Any = None,
) -> dict[str, Any]:
    """The batch of ``views``, one row each (see the module docstring for each tensor).

    Each is one segment: a ``TrainingSegment``, or a ``TrainingView`` of one segment. A view with
    later segments is refused (its rows and credit are :func:`episodes_to_batch`'s), never cut to
    its first segment. ``rewards`` / ``advantages`` (one per row) come back as float tensors
    ``[B]``. ``max_length`` refuses (never cuts) a longer sequence: cutting would train a
    different sequence from the one sampled.
    """
    import torch

    if not views:
        raise UsageError("views_to_batch needs at least one TrainingView")
    for name, values in (("rewards", rewards), ("advantages", advantages)):
        if values is not None and len(values) != len(views):
            raise UsageError(f"{name} has {len(values)} values for {len(views)} views")
    rows = []
    for index, view in enumerate(views):
        if not isinstance(view, TrainingSegment):
            view = TrainingView.model_validate(view)
        if isinstance(view, TrainingView) and view.later_segments:
            raise UsageError(
                f"view {index} has {view.num_segments} segments; one row holds one segment: build the batch of "
                "whole episodes with episodes_to_batch (or pass view.segments() with their advantages)"
            )
        n = len(view.response_ids)
        if not (len(view.response_mask) == len(view.response_logprobs) == len(view.response_versions) == n):
            raise UsageError(
                f"view {index} is inconsistent: {n} response ids but {len(view.response_mask)} mask, "
                f"{len(view.response_logprobs)} logprobs and {len(view.response_versions)} versions"
            )
        if not view.prompt_ids:
            raise UsageError(f"view {index} has no prompt ids; the first response token needs a prompt to predict it from")
        rows.append(view)
    length = max(len(v.prompt_ids) + len(v.response_ids) for v in rows)
    if max_length is not None and length > max_length:
        raise UsageError(f"a sequence is {length} tokens, over max_length={max_length}; raise it or cap the episode")
    batch_size = len(rows)
    input_ids = torch.full((batch_size, length), int(pad_id), dtype=torch.long)
    attention = torch.zeros((batch_size, length), dtype=torch.long)
    loss_mask = torch.zeros((batch_size, length - 1), dtype=torch.float32)
    old_logprobs = torch.zeros((batch_size, length - 1), dtype=torch.float32)
    versions = torch.full((batch_size, length - 1), -1, dtype=torch.long)
    for b, view in enumerate(rows):
        p, r = len(view.prompt_ids), len(view.response_ids)
        input_ids[b, : p + r] = torch.tensor([*view.prompt_ids, *view.response_ids], dtype=torch.long)
        attention[b, : p + r] = 1
        if r:
            # response token j sits at p + j and is predicted at shifted position p + j - 1
            loss_mask[b, p - 1 : p - 1 + r] = torch.tensor(view.response_mask, dtype=torch.float32)
            old_logprobs[b, p - 1 : p - 1 + r] = torch.tensor(view.response_logprobs, dtype=torch.float32)
            versions[b, p - 1 : p - 1 + r] = torch.tensor(view.response_versions, dtype=torch.long)
    old_logprobs = old_logprobs * loss_mask
    batch: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "targets": input_ids[:, 1:].clone(),
        "loss_mask": loss_mask,
        "old_logprobs": old_logprobs,
        "versions": versions,
    }
    if rewards is not None:
        batch["rewards"] = torch.tensor([float(x) for x in rewards], dtype=torch.float32)
    if advantages is not None:
        batch["advantages"] = torch.tensor([float(x) for x in advantages], dtype=torch.float32)
    if device is not None:
        batch = {k: v.to(device) for k, v in batch.items()}
    return batch


def episodes_to_batch(
    episodes: Sequence[Episode],
    advantages: Sequence[float],
    *,
    pad_id: int = 0,
    scales: Sequence[float] | float = 1.0,
    max_length: int | None = None,
    device: Any = None,
) -> dict[str, Any]:
    """The batch of trained ``episodes``: one row per segment (``worker.credit.segment_rows``),
    each with its credited advantage (``advantages``: one per episode, from the estimator;
    ``scales``: what it divided by, for per-segment rewards). ``episode_index`` ``[B]`` says which
    episode each row belongs to. :func:`policy_gradient_loss` normalizes over the sampled tokens of
    all rows, so an episode weighs the same however many segments it has."""
    import torch

    rows = segment_rows(episodes, advantages, scales=scales)
    batch = views_to_batch(
        [r.segment for r in rows], pad_id=pad_id, advantages=[float(r.advantage or 0.0) for r in rows],
        max_length=max_length,
    )
    batch["episode_index"] = torch.tensor([r.episode for r in rows], dtype=torch.long)
    if device is not None:
        batch = {k: v.to(device) for k, v in batch.items()}
    return batch


def group_advantages(
    rewards: Sequence[float | None], group_size: int, *, scale: bool = True, eps: float = 1e-6
) -> list[float]:
    """GRPO advantages: each reward minus its group's mean (divided by the group's std when
    ``scale``), over consecutive groups of ``group_size``. ``None`` members (failed, masked) are
    left out of their group's statistics and get advantage 0."""
    out: list[float] = []
    for r, (mean, divisor) in zip(rewards, group_statistics(rewards, group_size, scale=scale, eps=eps), strict=True):
        out.append(0.0 if r is None else (float(r) - mean) / divisor)
    return out


def group_statistics(
    rewards: Sequence[float | None], group_size: int, *, scale: bool = True, eps: float = 1e-6
) -> list[tuple[float, float]]:
    """Per member, its group's ``(baseline, divisor)`` as :func:`group_advantages` uses them (the
    divisor is ``std + eps``, or 1 without ``scale``): the ``scales`` of :func:`episodes_to_batch`
    for per-segment rewards."""
    if group_size < 1 or len(rewards) % group_size:
        raise UsageError(f"{len(rewards)} rewards cannot be split into groups of {group_size}")
    out: list[tuple[float, float]] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        present = [float(r) for r in group if r is not None]
        mean = sum(present) / len(present) if present else 0.0
        std = math.sqrt(sum((r - mean) ** 2 for r in present) / (len(present) - 1)) if len(present) > 1 else 0.0
        out.extend([(mean, std + eps if scale else 1.0)] * len(group))
    return out


def token_logprobs(model: Any, batch: dict[str, Any]) -> Any:
    """Log-probabilities ``[B, T-1]`` of ``batch["targets"]`` under ``model`` (a causal LM)."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return torch.gather(logprobs, -1, batch["targets"].unsqueeze(-1)).squeeze(-1)


def policy_gradient_loss(logprobs: Any, batch: dict[str, Any]) -> Any:
    """REINFORCE with a per-row advantage: ``-mean over the batch's sampled tokens of A * log p``
    (the token mean of ``worker.credit``: segments of one episode weigh as one row would)."""
    if "advantages" not in batch:
        raise UsageError("the batch has no 'advantages'; pass advantages= to views_to_batch")
    mask = batch["loss_mask"]
    weighted = logprobs * mask * batch["advantages"].unsqueeze(-1)
    return -weighted.sum() / mask.sum().clamp(min=1.0)
