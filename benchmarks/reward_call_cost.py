"""Per-call cost of scoring one episode with a reward, for each calling convention.

Prints microseconds per ``score_episode`` call and per ``compute_named_reward`` call for a plain
(``gsm8k``), a trajectory-aware and a TRL-style reward. The reward functions themselves do almost
nothing, so the figures are the core's overhead: resolving the name, choosing the keywords,
checking the signature, validating the value. Run: ``.venv/bin/python benchmarks/reward_call_cost.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from aworld_core.plugins import PluginManager
from aworld_core.rewards.registry import RewardStats, compute_named_reward, score_episode
from aworld_core.schemas import Episode, EpisodeStatus, Sample

N = int(os.environ.get("N", "5000"))
TRL = "def reward(completions, ground_truth, **kwargs):\n    return [1.0 for _ in completions]\n"
TRAJ = "def reward(episode, sample):\n    return float(len(episode.steps))\n"


def _episode() -> Episode:
    episode = Episode(task_id="t", agent_id="a", final_answer="#### 72",
                      messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 72"}])
    episode.finish(EpisodeStatus.SUCCESS)
    return episode


async def _score(name: str, manager: PluginManager, base_dir: str) -> float:
    episode, sample, stats = _episode(), Sample(id="s", prompt=[{"role": "user", "content": "q"}],
                                                ground_truth="72"), RewardStats()
    await score_episode(episode, sample, name, base_dir=base_dir, plugin_manager=manager, stats=stats, notify=False)
    start = time.perf_counter()
    for _ in range(N):
        await score_episode(episode, sample, name, base_dir=base_dir, plugin_manager=manager, stats=stats,
                            notify=False)
    return (time.perf_counter() - start) / N * 1e6


def _direct(name: str, manager: PluginManager, base_dir: str) -> float:
    episode, sample = _episode(), Sample(id="s", prompt=[{"role": "user", "content": "q"}], ground_truth="72")
    compute_named_reward(name, episode, sample, base_dir=base_dir, plugin_manager=manager)
    start = time.perf_counter()
    for _ in range(N):
        compute_named_reward(name, episode, sample, base_dir=base_dir, plugin_manager=manager)
    return (time.perf_counter() - start) / N * 1e6


def main() -> None:
    import aworld_trl.plugin

    manager = PluginManager(load_entry_points=False)
    manager.register(aworld_trl.plugin, name="trl")  # TRL's reward convention is aworld-trl's
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "trl_reward.py").write_text(TRL)
        Path(tmp, "traj_reward.py").write_text(TRAJ)
        rewards = {"plain (gsm8k)": "gsm8k", "trajectory-aware": "traj_reward.py:reward",
                   "TRL-style": "trl_reward.py:reward"}
        print(f"reward call cost, {N} calls each, python {sys.version.split()[0]}, "
              f"loadavg {open('/proc/loadavg').read().split()[:3]}")
        print(f"{'convention':<20} {'score_episode us':>18} {'compute_named_reward us':>25}")
        for label, name in rewards.items():
            scored = asyncio.run(_score(name, manager, tmp))
            direct = _direct(name, manager, tmp)
            print(f"{label:<20} {scored:>18.1f} {direct:>25.1f}")


if __name__ == "__main__":
    main()
