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

An episode of several training segments (a rewritten or compacted history; a Swarm's other trained
agents) is several rows, one per segment, each token-exact on its own. The group stays whole at
AReaL's stride: its rows come in *layers* of ``n`` rows, layer ``j`` holding every member's
``j``-th segment in member order, or a masked row where a member has fewer segments. Every row of
a member carries that member's reward, so each slice of ``group_size`` rows holds exactly the
group's ``n`` episode rewards: AReaL's group normalization (``actor.reward_norm``) gives each
segment its episode's advantage, the statistics counting each episode once (the core's credit rule,
``aworld_core.worker.credit``). The loss is AReaL's token mean over the loss mask. Per-segment
rewards would change a layer's statistics, so they are refused.
"""

from __future__ import annotations

from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import TrainingSegment
from aworld_core.worker import episode_segments


def check_view(view: TrainingSegment) -> None:
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


def episode_tensors(view: TrainingSegment, reward: float) -> dict[str, Any]:
    """AReaL's trajectory dict for one training segment of an episode (batch dimension 1)."""
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
    ``len(group)`` rows and AReaL's fixed-stride group normalization stays aligned. Members with
    several segments make it ``len(group) * layers`` rows (see the module docstring).
    """
    from areal.utils.data import concat_padded_tensors

    if group.dropped is not None:
        return None
    rewards = group.rewards("mean")
    trained = group.trained()
    segments = [episode_segments(e) if t else [] for e, t in zip(group.episodes, trained, strict=True)]
    for episode, own in zip(group.episodes, segments, strict=True):
        if any(s.reward is not None for s in own):
            raise UsageError(
                f"episode {episode.id}: the reward gave per-segment rewards, which AReaL's group normalization "
                "cannot apply (each slice of group_size rows is normalized on its own); return one reward per "
                "episode on the areal backend"
            )
    layers = max([1, *(len(s) for s in segments)])
    rows = [
        episode_tensors(own[layer], reward) if layer < len(own) else masked_row(reward, pad_id)
        for layer in range(layers)
        for own, reward in zip(segments, rewards, strict=True)
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
