"""``TrainingView``s to the padded, shifted tensors one policy-gradient step needs.

A view is ``prompt_ids`` then ``response_ids`` (sampled tokens with mask 1, tool/environment
tokens with mask 0). Row ``b`` of the batch is that sequence, right-padded to the longest row.
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
from aworld_core.schemas import TrainingView


def views_to_batch(
    views: Sequence[TrainingView],
    *,
    pad_id: int = 0,
    rewards: Sequence[float] | None = None,
    advantages: Sequence[float] | None = None,
    max_length: int | None = None,
    device: Any = None,
) -> dict[str, Any]:
    """The batch of ``views`` (see the module docstring for each tensor).

    ``rewards`` / ``advantages`` (one per view) come back as float tensors ``[B]``.
    ``max_length`` refuses (never cuts) a longer sequence: cutting would train a different
    sequence from the one sampled.
    """
    import torch

    if not views:
        raise UsageError("views_to_batch needs at least one TrainingView")
    for name, values in (("rewards", rewards), ("advantages", advantages)):
        if values is not None and len(values) != len(views):
            raise UsageError(f"{name} has {len(values)} values for {len(views)} views")
    rows = []
    for index, view in enumerate(views):
        if not isinstance(view, TrainingView):
            view = TrainingView.model_validate(view)
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


def group_advantages(
    rewards: Sequence[float | None], group_size: int, *, scale: bool = True, eps: float = 1e-6
) -> list[float]:
    """GRPO advantages: each reward minus its group's mean (divided by the group's std when
    ``scale``), over consecutive groups of ``group_size``. ``None`` members (failed, masked) are
    left out of their group's statistics and get advantage 0."""
    if group_size < 1 or len(rewards) % group_size:
        raise UsageError(f"{len(rewards)} rewards cannot be split into groups of {group_size}")
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        present = [float(r) for r in group if r is not None]
        mean = sum(present) / len(present) if present else 0.0
        std = math.sqrt(sum((r - mean) ** 2 for r in present) / (len(present) - 1)) if len(present) > 1 else 0.0
        for r in group:
            if r is None:
                out.append(0.0)
            else:
                value = float(r) - mean
                out.append(value / (std + eps) if scale else value)
    return out


def token_logprobs(model: Any, batch: dict[str, Any]) -> Any:
    """Log-probabilities ``[B, T-1]`` of ``batch["targets"]`` under ``model`` (a causal LM)."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return torch.gather(logprobs, -1, batch["targets"].unsqueeze(-1)).squeeze(-1)


def policy_gradient_loss(logprobs: Any, batch: dict[str, Any]) -> Any:
    """REINFORCE with a per-sequence advantage: ``-mean over sampled tokens of A * log p``."""
    if "advantages" not in batch:
        raise UsageError("the batch has no 'advantages'; pass advantages= to views_to_batch")
    mask = batch["loss_mask"]
    weighted = logprobs * mask * batch["advantages"].unsqueeze(-1)
    return -weighted.sum() / mask.sum().clamp(min=1.0)
