"""A whole episode as the tensors AReaL's PPO actor trains on.

One row per episode, ``[1, L]`` with ``L = len(prompt) + len(response)``: the prompt, then every
turn's sampled tokens and the tool / environment tokens between them, in the exact order the
engine saw them. ``loss_mask`` is 1 only on sampled tokens; ``logprobs`` are the engine's (0.0
elsewhere) and ``versions`` the policy version per sampled token (-1 elsewhere), which is what
AReaL's decoupled loss and staleness filter read. ``rewards`` is ``[1]``: the episode's reward,
discounted once.

A GRPO group is ``n`` such rows, one per member, in member order (:func:`group_tensors`): AReaL
normalizes rewards over consecutive slices of ``group_size`` rows, so a member that does not train
keeps its place as a fully loss-masked row (:func:`masked_row`) carrying the group's neutral reward.
"""

from __future__ import annotations

from typing import Any

from aworld_core.schemas import TrainingView


def check_view(view: TrainingView) -> None:
    """Raise ``ValueError`` naming the mismatch when the view's parts are not aligned."""
    n = len(view.response_ids)
    for name in ("response_mask", "response_logprobs", "response_versions"):
        if len(getattr(view, name)) != n:
            raise ValueError(f"training view has {n} response ids but {len(getattr(view, name))} {name}")
    if any(m not in (0, 1) for m in view.response_mask):
        raise ValueError("training view response_mask must hold only 0 and 1")
    for i, (m, v) in enumerate(zip(view.response_mask, view.response_versions, strict=True)):
        if m == 0 and v != -1:
            raise ValueError(f"training view has version {v} on non-sampled response token {i}; expected -1")


def episode_tensors(view: TrainingView, reward: float) -> dict[str, Any]:
    """AReaL's trajectory dict for one episode (batch dimension 1)."""
    import torch

    check_view(view)
    prompt_len = len(view.prompt_ids)
    sampled = [bool(m) for m in view.response_mask]
    ids = [*view.prompt_ids, *view.response_ids]
    loss_mask = [0] * prompt_len + [int(m) for m in sampled]
    logprobs = [0.0] * prompt_len + [float(lp) if m else 0.0 for lp, m in zip(view.response_logprobs, sampled, strict=True)]
    versions = [-1] * prompt_len + [int(v) if m else -1 for v, m in zip(view.response_versions, sampled, strict=True)]
    return {
        "input_ids": torch.tensor([ids], dtype=torch.int32),
        "attention_mask": torch.ones((1, len(ids)), dtype=torch.bool),
        "loss_mask": torch.tensor([loss_mask], dtype=torch.int32),
        "logprobs": torch.tensor([logprobs], dtype=torch.float32),
        "versions": torch.tensor([versions], dtype=torch.int32),
        "rewards": torch.tensor([float(reward)], dtype=torch.float32),
    }


def masked_row(reward: float, pad_id: int) -> dict[str, Any]:
    """A one-token row that trains nothing (``loss_mask`` 0): a failed member's place in its group."""
    import torch

    return {
        "input_ids": torch.tensor([[int(pad_id)]], dtype=torch.int32),
        "attention_mask": torch.ones((1, 1), dtype=torch.bool),
        "loss_mask": torch.zeros((1, 1), dtype=torch.int32),
        "logprobs": torch.zeros((1, 1), dtype=torch.float32),
        "versions": torch.full((1, 1), -1, dtype=torch.int32),
        "rewards": torch.tensor([float(reward)], dtype=torch.float32),
    }


def group_tensors(group: Any, pad_id: int) -> dict[str, Any] | None:
    """The rows of a kit ``EpisodeGroup`` (``None`` when the group policy dropped it).

    Every member keeps its row: a trained one its episode, any other a :func:`masked_row` with
    the group's neutral reward (``EpisodeGroup.rewards("mean")``), so the group is always
    ``len(group)`` rows and AReaL's fixed-stride group normalization stays aligned.
    """
    from areal.utils.data import concat_padded_tensors

    if group.dropped is not None:
        return None
    rewards = group.rewards("mean")
    rows = [
        episode_tensors(episode.training, reward) if trained else masked_row(reward, pad_id)
        for episode, reward, trained in zip(group.episodes, rewards, group.trained(), strict=True)
    ]
    return concat_padded_tensors(rows)


def discounted(reward: float, num_turns: int, turn_discount: float) -> float:
    """``reward * turn_discount ** (num_turns - 1)``: fewer turns to the same answer score higher.

    Applied once, here, to the whole episode (the seed's integration applied it in the provider
    and again in the workflow).
    """
    if not 0.0 < turn_discount <= 1.0:
        raise ValueError(f"turn_discount must be in (0, 1], got {turn_discount}")
    return float(reward) * turn_discount ** max(num_turns - 1, 0)
