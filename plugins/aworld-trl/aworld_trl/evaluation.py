"""Held-out evaluation inside the trl backend: greedy decoding, the full tool loop, fresh episodes.

Episodes run through the worker kit's ``EpisodeRunner`` with the agent and token client training
uses (the token engine over the model in this process), so before and after are measured exactly
as the policy trains, only with temperature 0. Every episode comes back finished and scored;
failed ones count as wrong.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aworld_core.evaluate import EvalReport
from aworld_core.schemas import Episode, RolloutContext, Sample, SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def report(episodes: Sequence[Episode], duration_s: float, path: str | Path | None,
           accuracy_threshold: float = 1.0) -> EvalReport:
    """The ``EvalReport`` of finished, scored ``episodes`` (failed ones count as wrong)."""
    rewards = [e.reward for e in episodes if e.reward is not None]
    correct = sum(1 for e in episodes if e.reward is not None and e.reward >= accuracy_threshold)
    return EvalReport(
        n=len(episodes),
        accuracy=correct / len(episodes) if episodes else 0.0,
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        statuses=dict(Counter(e.status.value for e in episodes)),
        reward_failures=sum(1 for e in episodes if e.reward_errors),
        duration_s=duration_s,
        trajectories=str(path) if path else None,
        episodes=list(episodes),
    )


def evaluate_greedy(runner: Any, loop: Any, samples: Sequence[Sample], *, tag: str,
                    output: str | Path | None = None, model: Any = None) -> EvalReport:
    """Run every sample once, greedily, through ``runner`` (the kit's ``EpisodeRunner``; its
    ``concurrency`` bounds the episodes in flight) on ``loop``; write the episodes to ``output``."""
    from aworld_core.export import write_jsonl

    async def run_all() -> list[Episode]:
        contexts = [RolloutContext(episode_id=f"ep-{tag}-{i}", sampling=GREEDY) for i in range(len(samples))]
        return list(await asyncio.gather(*(runner.run(s, c) for s, c in zip(samples, contexts, strict=True))))

    was_training = bool(getattr(model, "training", False))
    if model is not None:
        model.eval()
    started = time.perf_counter()
    try:
        episodes = loop.run(run_all())
    finally:
        if model is not None and was_training:
            model.train()
    duration = time.perf_counter() - started
    if output is not None:
        write_jsonl(episodes, output)
    return report(episodes, duration, output)
