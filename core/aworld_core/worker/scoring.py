"""Scoring off the rollout loop: the job's reward in a process pool, every failure recorded.

A rollout worker runs many episodes on one event loop; a reward that parses math (or calls a slow
verifier) would stall all of them. :class:`PoolScorer` is an ``EpisodeRunner`` ``scorer=`` that
runs the job's reward in a process pool (``processes=0``: in this process). What a failure does
differs from frameworks that return 0 after a timeout: a timed-out or raising reward is recorded
on the episode (``reward_errors``), so the kit never trains it, never with a made-up 0. A reward
process that dies (OOM kill, segfault) breaks the pool, and one that hangs keeps its worker busy:
either way that episode's reward is recorded as failed and the pool is replaced, so later
episodes score in a fresh one.

The pool's workers resolve the reward again by name or import reference (``module:func``,
``file.py:func``), which is why rewards travel as strings and must be module-level functions.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from aworld_core.config import RewardSection
from aworld_core.errors import UsageError
from aworld_core.rewards.registry import RewardStats, get_reward_stats, score_episode, validate_reward_value
from aworld_core.schemas import Episode, Sample
from aworld_core.worker.credit import episode_segments, set_segment_rewards

_POOLS: dict[int, ProcessPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(processes: int) -> ProcessPoolExecutor:
    # spawn, not fork: the rollout worker holds threads (AReaL's executor, HTTP clients) that a
    # forked child would inherit in an unknown state
    with _POOLS_LOCK:
        pool = _POOLS.get(processes)
        if pool is None:
            pool = _POOLS[processes] = ProcessPoolExecutor(
                max_workers=processes, mp_context=multiprocessing.get_context("spawn")
            )
        return pool


def _replace_pool(processes: int, pool: ProcessPoolExecutor, *, kill_after_s: float | None) -> None:
    """Forget ``pool`` (the next ``_pool`` makes a fresh one) and shut it down without waiting.

    A broken pool has already failed all its futures. A pool with a stuck worker (``kill_after_s``,
    the reward timeout) keeps running what it was given, for the episodes still waiting on it; every
    such call was submitted before now, so after ``kill_after_s`` nobody waits on any of them and the
    pool's processes (the stuck one included) are killed.
    """
    with _POOLS_LOCK:
        if _POOLS.get(processes) is pool:  # another episode may have replaced it already
            del _POOLS[processes]
    processes_of = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=kill_after_s is None)
    if kill_after_s is not None:
        timer = threading.Timer(kill_after_s, _kill, args=(processes_of,))
        timer.daemon = True
        timer.start()


def _kill(processes: list[Any]) -> None:
    for process in processes:
        try:
            process.kill()
        except Exception:  # already gone
            pass


def shutdown_pools(grace_s: float = 2.0) -> None:
    """Stop the reward processes (at shutdown, e.g. from ``atexit``): queued calls are cancelled,
    idle processes exit, and a process still running a reward after ``grace_s`` is killed. It never
    waits on a reward that hangs (its episode's scorer then records ``BrokenProcessPool``), and
    leaves no reward process behind the worker."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    processes: list[Any] = []
    for pool in pools:
        processes += list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    _kill([p for p in processes if p.is_alive()])
    for process in processes:
        process.join(1.0)  # reap the killed ones


def score_in_process(
    rewards: list[tuple[str, bool | None]], base_dir: str | None, episode_json: str, sample_json: str
) -> dict[str, Any]:
    """Runs in a pool process: score one episode, return what scoring wrote on it."""
    episode = Episode.model_validate_json(episode_json)
    sample = Sample.model_validate_json(sample_json)
    sections = [RewardSection(name=name, trajectory_aware=aware) for name, aware in rewards]
    asyncio.run(score_episode(episode, sample, sections, base_dir=base_dir, stats=RewardStats(), notify=False))
    return {"reward": episode.reward, "rewards": episode.rewards, "reward_errors": episode.reward_errors,
            "segment_rewards": [s.reward for s in episode_segments(episode)]}


class PoolScorer:
    """``await scorer(episode, sample)``: the job's reward, in this process with ``processes=0``,
    else in a pool of that many processes (``timeout_s`` each). Only a successful episode is
    scored (a failed one is counted as skipped). ``prefix`` names the settings in errors (e.g.
    ``workflow.``: ``workflow.reward_processes``)."""

    def __init__(
        self,
        reward: RewardSection | list[RewardSection],
        *,
        base_dir: str | None = None,
        processes: int = 0,
        timeout_s: float = 60.0,
        stats: RewardStats | None = None,
        prefix: str = "",
    ):
        if processes < 0:
            raise UsageError(f"{prefix}reward_processes must be >= 0, got {processes}")
        if timeout_s <= 0:
            raise UsageError(f"{prefix}reward_timeout_s must be > 0 seconds, got {timeout_s}")
        self.sections = reward if isinstance(reward, list) else [reward]
        self.base_dir = base_dir
        self.processes = processes
        self.timeout_s = timeout_s
        self.stats = stats if stats is not None else get_reward_stats()

    async def __call__(self, episode: Episode, sample: Sample) -> None:
        if self.processes == 0 or not episode.status.trainable:
            await score_episode(episode, sample, self.sections, base_dir=self.base_dir, stats=self.stats, notify=False)
        else:
            self._apply(episode, await self._in_pool(episode, sample))

    async def _in_pool(self, episode: Episode, sample: Sample) -> dict[str, Any]:
        specs = [(s.name, s.trajectory_aware) for s in self.sections]
        pool = _pool(self.processes)
        try:
            future = asyncio.get_running_loop().run_in_executor(
                pool, score_in_process, specs, self.base_dir, episode.model_dump_json(), sample.model_dump_json(),
            )
            return await asyncio.wait_for(future, timeout=self.timeout_s)
        except UsageError:  # a bad reward reference: every episode would fail alike
            raise
        except TimeoutError:
            _replace_pool(self.processes, pool, kill_after_s=self.timeout_s)  # its worker may be stuck
            why = f"TimeoutError: the reward did not finish within {self.timeout_s:g} s"
        except BrokenProcessPool as exc:  # a reward process died (OOM kill, segfault, os._exit)
            _replace_pool(self.processes, pool, kill_after_s=None)
            why = f"BrokenProcessPool: the reward process died ({exc})"
        except Exception as exc:  # the pool could not run it (e.g. a result it could not pickle)
            why = f"{type(exc).__name__}: {exc}"
        return {"reward": None, "rewards": {}, "reward_errors": {s.name: why for s in self.sections}}

    def _apply(self, episode: Episode, result: dict[str, Any]) -> None:
        episode.rewards = {name: validate_reward_value(name, v) for name, v in result["rewards"].items()}
        episode.reward_errors = dict(result["reward_errors"])
        episode.reward = None if episode.reward_errors else result["reward"]
        segment_values = result.get("segment_rewards") or []
        if any(v is not None for v in segment_values):  # the reward credited segments itself (worker.credit)
            set_segment_rewards(episode, segment_values)
        for name, value in episode.rewards.items():
            self.stats.record_value(name, value)
        for name in episode.reward_errors:
            self.stats.record_failure(name)
        self.stats.record_episode(episode.reward, bool(episode.reward_errors))
