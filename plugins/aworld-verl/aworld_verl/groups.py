"""verl's GRPO groups as they reach the agent loop: which rows form a group under V0 and V1, and
the checks that a group closed whole in one worker.

The kit's ``Rendezvous`` forms the group from the members verl starts together; these checks say
when verl did not start a group's members together (V1: a session's position differs from its
``session_id``; V0: the batch was cut across agent-loop workers), so its group was decided in
parts. Each warns once per process.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("aworld_verl.agent_loop")


_warned_split = False


def warn_split(uid: str) -> None:
    """verl started a prompt's sessions apart (not in one stretch): each part was decided alone."""
    global _warned_split
    if not _warned_split:
        _warned_split = True
        logger.warning(
            "the sessions of prompt %s did not start together in this worker, so its GRPO group was decided "
            "in parts (a failed member's neutral reward comes from its part); this verl version runs "
            "AgentLoopWorkerTQ._run_prompt differently from 0.9.1", uid,
        )


_warned_v0_group = False
_SAMPLING_KEYS = ("temperature", "top_p", "top_k")


def expected_group_sizes(rollout_config: Any, sampling: dict[str, Any] | None) -> set[int]:
    """The group sizes a V0 batch of this phase has: ``rollout.n`` when ``sampling`` is the training
    settings, ``val_kwargs.n`` when it is validation's (V0 passes the loop no other sign of the
    phase); both when the two agree, none (nothing to check) when it is neither (REMAX's greedy
    baseline) or the config lacks them."""
    if not sampling or rollout_config is None:
        return set()

    def same(settings: Any) -> bool:
        try:
            return all(float(sampling[key]) == float(settings.get(key))
                       for key in _SAMPLING_KEYS if key in sampling and settings.get(key) is not None)
        except (TypeError, ValueError):
            return False

    sizes: set[int] = set()
    try:
        val_kwargs = rollout_config.get("val_kwargs") or {}
        if same(rollout_config):
            sizes.add(int(rollout_config.get("n") or 1))
        if same(val_kwargs):
            sizes.add(int(val_kwargs.get("n") or 1))
    except (AttributeError, TypeError, ValueError):
        return set()
    return sizes


def check_v0_group_size(members: int, expected: set[int], uid: str) -> bool:
    """Warn once when a V0 group closed with another member count than the batch's ``n``: verl cut
    the prompt's rows across agent-loop workers (``DataProto.chunk``), and each worker decided its
    part alone. ``True`` when the size is as expected (or unknown)."""
    global _warned_v0_group
    if not expected or members in expected:
        return True
    if not _warned_v0_group:
        _warned_v0_group = True
        logger.warning(
            "GRPO group %s closed in this worker with %d members, expected %s: verl's V0 trainer cut the "
            "batch into one chunk per agent-loop worker across the prompt's rows, so each part of the group "
            "was decided alone (a part whose members all failed gets 0.0 placeholders; drop_group drops only "
            "a part). Make data.train_batch_size (and data.val_batch_size, the test set size with "
            "val_kwargs.n > 1) a multiple of actor_rollout_ref.rollout.agent.num_workers, or use "
            "trainer.use_v1=true", uid, members, " or ".join(str(n) for n in sorted(expected)),
        )
    return False


def is_v1(row: dict[str, Any]) -> bool:
    """verl's V1 trainer (TransferQueue worker) passes ``uid`` and ``session_id``; it accepts a
    list of outputs (several trained sessions)."""
    return "uid" in row and "session_id" in row

