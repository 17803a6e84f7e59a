"""Evaluation: run an agent over a dataset concurrently, score it, write the trajectories.

Used by ``python -m aworld_core.run --eval`` and ``AgentTrainer.evaluate()``. Episodes run
through the ``rollout`` hook (the same path training uses) against the agent's own
OpenAI-compatible endpoint, or the ``llm`` given. A failed or timed-out episode counts as wrong
and stays in the output with its status.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_core.schemas import Episode, Sample, SamplingParams


@dataclass
class EvalReport:
    """What an evaluation measured."""

    n: int
    accuracy: float
    mean_reward: float | None
    statuses: dict[str, int]
    reward_failures: int
    duration_s: float
    trajectories: str | None = None
    episodes: list[Episode] = field(default_factory=list, repr=False)

    def summary(self) -> str:
        mean = "n/a" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        states = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        where = f"; trajectories: {self.trajectories}" if self.trajectories else ""
        return (
            f"evaluated {self.n} tasks in {self.duration_s:.1f}s: accuracy {self.accuracy:.3f}, "
            f"mean reward {mean}, reward failures {self.reward_failures} ({states}){where}"
        )


def tool_use_rate(episodes: Sequence[Episode]) -> float:
    """Share of episodes in which the model called at least one tool (0.0 for none): what each
    backend reports beside held-out accuracy (``eval_<when>/tool_use_rate``)."""
    if not episodes:
        return 0.0
    return sum(1 for e in episodes if any(s.exp_data.actions for s in e.steps)) / len(episodes)


async def evaluate(
    agent: Any,
    samples: Sequence[Sample],
    reward: Any,
    *,
    llm: Any = None,
    concurrency: int = 8,
    output: str | Path | None = None,
    progress: bool = True,
    timeout: float | None = None,
    max_steps: int | None = None,
    base_dir: str | None = None,
    accuracy_threshold: float = 1.0,
    sampling: SamplingParams | None = None,
) -> EvalReport:
    """Run ``agent`` on every sample (at most ``concurrency`` at once) and score each episode.

    ``accuracy`` is the share of samples whose reward reaches ``accuracy_threshold`` (1.0: full
    credit); failed episodes and failed rewards count as wrong. Trajectories are appended to
    ``output`` (JSONL) as episodes finish, so an interrupted run keeps what it did. ``sampling``
    overrides the trained agents' sampling (e.g. greedy decoding for a held-out evaluation).
    """
    from aworld_core.export import JsonlEpisodeWriter
    from aworld_core.schemas import RolloutContext
    from aworld_core.worker.episodes import EpisodeRunner

    runner = EpisodeRunner(agent, llm, reward=reward, base_dir=base_dir, timeout=timeout, max_steps=max_steps,
                           concurrency=max(1, concurrency))
    writer = JsonlEpisodeWriter(output, append=False) if output else None
    bar = _progress_bar(len(samples), progress)
    started = time.perf_counter()

    async def one(sample: Sample) -> Episode:
        episode = await runner.run(sample, RolloutContext(sampling=sampling) if sampling is not None else None)
        if writer is not None:
            writer.write(episode)
        if bar is not None:
            bar.update(1)
        return episode

    try:
        episodes = list(await asyncio.gather(*(one(sample) for sample in samples)))
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    rewards = [e.reward for e in episodes if e.reward is not None]
    correct = sum(1 for e in episodes if e.reward is not None and e.reward >= accuracy_threshold)
    return EvalReport(
        n=len(episodes),
        accuracy=correct / len(episodes) if episodes else 0.0,
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        statuses=dict(Counter(e.status.value for e in episodes)),
        reward_failures=sum(1 for e in episodes if e.reward_errors),
        duration_s=time.perf_counter() - started,
        trajectories=str(output) if output else None,
        episodes=episodes,
    )


def _progress_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="evaluating", unit="task")
