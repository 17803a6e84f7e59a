"""The kit's ``scorer=`` for AReaL: the job's reward off the rollout loop, then the turn discount.

AReaL's rollout worker runs hundreds of episodes on one event loop, so rewards can run in a
process pool, as AReaL's own ``AsyncRewardWrapper`` does: the kit's ``PoolScorer``
(``workflow.reward_processes``, ``workflow.reward_timeout_s``). The difference from AReaL's is what
happens when one fails: a timed-out, raising or dying reward is recorded on the episode
(``reward_errors``), so it never trains, never with a made-up 0 (see
``aworld_core.worker.scoring``). What is AReaL's here: the turn discount, applied once, and
``workflow.reject_truncated``.
"""

from __future__ import annotations

from aworld_areal.tensors import discounted
from aworld_core.config import RewardSection
from aworld_core.errors import UsageError
from aworld_core.rewards import RewardStats
from aworld_core.schemas import Episode, EpisodeStatus, Sample
from aworld_core.worker import UNTRAINED, PoolScorer, shutdown_pools

__all__ = ["TRUNCATED", "UNDISCOUNTED", "RewardScorer", "shutdown_pools"]

# metadata keys the scorer writes on an episode
UNDISCOUNTED = "reward_undiscounted"
TRUNCATED = "truncated"  # why a successful episode is not trained (workflow.reject_truncated)


class RewardScorer:
    """``await scorer(episode, sample)``: the job's reward (the kit's ``PoolScorer``: in this process
    with ``processes=0``, else in a pool, ``timeout_s`` each), then
    ``reward * turn_discount ** (turns - 1)``, once.

    The discounted value is the episode's ``reward`` (what AReaL trains on and ``on_episode_end``
    sees); the undiscounted one is kept in ``metadata["reward_undiscounted"]``. With
    ``reject_truncated`` an episode cut by the length budget is failed instead of scored.
    """

    def __init__(
        self,
        reward: RewardSection | list[RewardSection],
        *,
        base_dir: str | None = None,
        processes: int = 0,
        timeout_s: float = 60.0,
        turn_discount: float = 1.0,
        reject_truncated: bool = False,
        stats: RewardStats | None = None,
    ):
        if not 0.0 < turn_discount <= 1.0:
            raise UsageError(f"workflow.turn_discount must be in (0, 1], got {turn_discount}")
        self.score = PoolScorer(reward, base_dir=base_dir, processes=processes, timeout_s=timeout_s, stats=stats,
                                prefix="workflow.")
        self.turn_discount = float(turn_discount)
        self.reject_truncated = reject_truncated

    async def __call__(self, episode: Episode, sample: Sample) -> None:
        view = episode.training
        if self.reject_truncated and episode.status.trainable and view is not None and view.any_truncated:
            episode.finish(EpisodeStatus.FAILED, "the episode was cut by the length budget (workflow.reject_truncated)")
            episode.training = None
            episode.metadata[UNTRAINED] = TRUNCATED
        await self.score(episode, sample)
        if episode.reward is not None and view is not None and episode.training is not None:
            episode.metadata[UNDISCOUNTED] = episode.reward
            turns = sum(s.num_turns for s in view.segments())  # every segment's turns
            episode.reward = discounted(episode.reward, turns, self.turn_discount)
