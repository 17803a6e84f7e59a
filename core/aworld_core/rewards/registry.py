"""Resolving a reward by name and scoring finished episodes with it.

A reward name is looked up among the ``RewardSpec``\\ s plugins registered; anything else is an
import reference (``package.module:func`` or ``path/to/file.py:func``, relative files resolved
against the job's directory). Resolution happens once per name, directory and flag (and plugin
set): it gives a :class:`~aworld_core.rewards.conventions.Reward` that already knows its calling
convention. Scoring asks the plugins' ``compute_reward`` hooks first (so a plugin can own a
name), then calls that object; every outcome is explicit: a value is validated and stored, a
failure is stored as text in ``episode.reward_errors`` and counted, and neither is ever turned
into 0.
"""

from __future__ import annotations

import math
import numbers
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aworld_core.aio import maybe_await
from aworld_core.errors import UsageError
from aworld_core.imports import import_ref, is_ref
from aworld_core.plugins import DEFAULT_PLUGINS, get_plugin_manager
from aworld_core.rewards.conventions import (
    PLAIN_SIGNATURE,
    TRAJECTORY_SIGNATURE,
    Reward,
    solution_text,
)
from aworld_core.schemas import Episode, EpisodeStatus, Sample

if TYPE_CHECKING:
    from aworld_core.config import RewardSection
    from aworld_core.plugins import Catalog, PluginManager

__all__ = [
    "PLAIN_SIGNATURE", "TRAJECTORY_SIGNATURE", "Reward", "RewardStats", "check_reward_signature",
    "compute_named_reward", "get_reward_stats", "resolve_reward", "score_episode", "solution_text",
    "validate_reward_value",
]


# reward name -> the distribution of this repository that registers it, for the hint when it is
# missing (the name is the plugin's; the core only knows where to send the user)
PLUGIN_REWARDS: dict[str, str] = {"gaia": "aworld-gaia-env"}


@dataclass
class _Resolved:
    """Per plugin manager: the rewards resolved against its current catalog, and its
    ``compute_reward`` hook without the core's built-in (which :func:`score_episode` replaces
    by calling the resolved reward itself)."""

    catalog: Catalog
    rewards: dict[tuple[str, str | None, bool | None], Reward] = field(default_factory=dict)
    plugin_hook: Any = None


_resolved: weakref.WeakKeyDictionary[PluginManager, _Resolved] = weakref.WeakKeyDictionary()


def _resolved_for(manager: PluginManager) -> _Resolved:
    catalog = manager.catalog()  # a new catalog (plugins registered since) drops what was resolved
    entry = _resolved.get(manager)
    if entry is None or entry.catalog is not catalog:
        core = [p for p in (manager.pm.get_plugin(name) for name in DEFAULT_PLUGINS) if p is not None]
        entry = _Resolved(catalog, plugin_hook=manager.pm.subset_hook_caller("compute_reward", core))
        _resolved[manager] = entry
    return entry


def resolve_reward(
    name: str,
    *,
    base_dir: str | None = None,
    trajectory_aware: bool | None = None,
    plugin_manager: PluginManager | None = None,
) -> Reward:
    """The reward behind ``name`` (a registered reward, else an import reference), resolved once.

    ``trajectory_aware`` overrides what the spec says; for an unflagged import reference a
    function that takes ``episode`` and no ``solution_str`` is trajectory-aware.
    Raises :class:`UsageError` naming the registered rewards when ``name`` is neither.
    """
    entry = _resolved_for(plugin_manager or get_plugin_manager())
    key = (name, base_dir, trajectory_aware)
    reward = entry.rewards.get(key)
    if reward is None:
        reward = entry.rewards[key] = _resolve(name, base_dir, trajectory_aware, entry.catalog)
    return reward


def _resolve(name: str, base_dir: str | None, trajectory_aware: bool | None, catalog: Catalog) -> Reward:
    conventions = [provided.spec for provided in catalog.items("reward_convention").values()]
    provided = catalog.get("reward", name)
    if provided is not None:
        spec = provided.spec
        func = import_ref(spec.func, base_dir) if isinstance(spec.func, str) else spec.func
        aware = spec.trajectory_aware if trajectory_aware is None else trajectory_aware
        return Reward.of(name, func, aware, f"plugin '{provided.plugin}' ({provided.distribution})", conventions)
    if is_ref(name):
        return Reward.of(name, import_ref(name, base_dir), trajectory_aware, "import reference", conventions)
    registered = ", ".join(sorted(catalog.items("reward"))) or "none"
    if name in PLUGIN_REWARDS:
        raise UsageError(
            f"reward '{name}' is provided by the {PLUGIN_REWARDS[name]} plugin, which is not installed (or is "
            f"disabled); install it with: pip install {PLUGIN_REWARDS[name]}. Registered rewards: {registered}"
        )
    raise UsageError(
        f"unknown reward '{name}'. Registered rewards: {registered}. "
        f"Or give an import reference: 'package.module:func' or 'path/to/file.py:func' "
        f"(a relative file is looked up beside the job config)"
    )


def check_reward_signature(reward: Reward) -> None:
    """``UsageError`` (with the fix) when ``reward`` cannot take the keywords it will be called
    with: what a run would find at its first scored episode, found before anything starts."""
    reward.check()


def compute_named_reward(
    name: str,
    episode: Episode,
    sample: Sample,
    *,
    base_dir: str | None = None,
    trajectory_aware: bool | None = None,
    plugin_manager: PluginManager | None = None,
) -> Any:
    """Call the reward ``name`` on one episode: a number, or an awaitable for async rewards.

    The value is returned as the function gave it; :func:`score_episode` validates it. This is
    what the core's ``compute_reward`` hook answers with (so with no job directory and the
    process's plugins), and what backends that score outside ``score_episode`` call.
    """
    reward = resolve_reward(name, base_dir=base_dir, trajectory_aware=trajectory_aware,
                            plugin_manager=plugin_manager)
    return reward.call(episode, sample)


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


@dataclass
class _Tally:
    count: int = 0
    total: float = 0.0
    failures: int = 0

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass
class RewardStats:
    """Running reward metrics: values scored, their mean, failed rewards, skipped episodes.

    ``count``/``mean`` cover episodes whose reward was computed; ``failures`` counts episodes
    with a failed reward (kept out of the mean); ``skipped`` counts episodes not scored because
    they did not succeed. Per reward name the same tallies are kept in ``by_name``.
    """

    count: int = 0
    total: float = 0.0
    failures: int = 0
    skipped: int = 0
    by_name: dict[str, _Tally] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def record_value(self, name: str, value: float) -> None:
        with self._lock:
            tally = self.by_name.setdefault(name, _Tally())
            tally.count += 1
            tally.total += value

    def record_failure(self, name: str) -> None:
        with self._lock:
            self.by_name.setdefault(name, _Tally()).failures += 1

    def record_episode(self, reward: float | None, failed: bool) -> None:
        with self._lock:
            if failed:
                self.failures += 1
            elif reward is not None:
                self.count += 1
                self.total += reward

    def record_skip(self) -> None:
        with self._lock:
            self.skipped += 1

    def as_metrics(self, prefix: str = "reward") -> dict[str, float | int | None]:
        """Flat names for loggers: ``reward/mean``, ``reward/gsm8k/failures``, ..."""
        with self._lock:
            metrics: dict[str, float | int | None] = {
                f"{prefix}/count": self.count,
                f"{prefix}/mean": self.mean,
                f"{prefix}/failures": self.failures,
                f"{prefix}/skipped": self.skipped,
            }
            for name, tally in sorted(self.by_name.items()):
                metrics[f"{prefix}/{name}/count"] = tally.count
                metrics[f"{prefix}/{name}/mean"] = tally.mean
                metrics[f"{prefix}/{name}/failures"] = tally.failures
            return metrics

    def reset(self) -> None:
        with self._lock:
            self.count, self.total, self.failures, self.skipped = 0, 0.0, 0, 0
            self.by_name.clear()


_process_stats = RewardStats()


def get_reward_stats() -> RewardStats:
    """The process-wide stats :func:`score_episode` records into when given none."""
    return _process_stats


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


def _reward_specs(reward: Any) -> list[tuple[str, bool | None, Reward | None]]:
    items = [reward] if isinstance(reward, (str, Reward)) or not isinstance(reward, Sequence) else list(reward)
    if not items:
        raise UsageError("no reward given: pass a reward name, an import reference or a RewardSection")
    specs: list[tuple[str, bool | None, Reward | None]] = []
    for item in items:
        if isinstance(item, str):
            specs.append((item, None, None))
        elif isinstance(item, Reward):  # resolved already (by the caller, once)
            specs.append((item.name, item.trajectory_aware, item))
        elif hasattr(item, "name") and hasattr(item, "trajectory_aware"):
            specs.append((item.name, item.trajectory_aware, None))
        else:
            raise UsageError(
                f"bad reward {item!r}: expected a reward name, an import reference, a RewardSection or a Reward"
            )
    return specs


def validate_reward_value(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real number (not a bool); else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"reward '{name}' returned {value!r} ({type(value).__name__}); a reward must return a "
            f"finite number (int or float). None means no plugin computed it or the function "
            f"returned nothing"
        )
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"reward '{name}' returned {value!r}; a reward must be a finite number")
    return number


async def score_episode(
    episode: Episode,
    sample: Sample,
    reward: str | RewardSection | Reward | Sequence[str | RewardSection | Reward],
    *,
    base_dir: str | None = None,
    stats: RewardStats | None = None,
    plugin_manager: PluginManager | None = None,
    notify: bool = True,
) -> Episode:
    """Score a finished episode in place, then call ``on_episode_end``; returns the episode.

    Only a ``SUCCESS`` episode is scored: a failed, timed-out or cancelled one keeps
    ``reward = None`` (it can never become a training sample, and a 0 would pollute metrics).
    Several rewards are summed into ``episode.reward``; each value is kept in
    ``episode.rewards[name]``. A reward that raises or returns a non-number is stored in
    ``episode.reward_errors[name]`` and leaves ``episode.reward`` None. A misconfigured reward
    (unknown name, bad reference, wrong signature) raises :class:`UsageError`, since it would
    fail every episode alike.
    """
    if episode.status is EpisodeStatus.RUNNING:
        raise UsageError(
            f"episode '{episode.id}' is still running; rewards are computed for finished episodes "
            f"(call episode.finish(...) first)"
        )
    manager = plugin_manager or get_plugin_manager()
    stats = stats if stats is not None else get_reward_stats()
    specs = _reward_specs(reward)
    if not episode.status.trainable:
        episode.reward = None
        stats.record_skip()
    else:
        values: list[float] = []
        failed = False
        plugin_hook = _resolved_for(manager).plugin_hook
        for name, trajectory_aware, resolved in specs:
            episode.rewards.pop(name, None)
            episode.reward_errors.pop(name, None)
            try:
                value = plugin_hook(name=name, episode=episode, sample=sample)  # a plugin may own the name
                if value is None:
                    resolved = resolved or resolve_reward(name, base_dir=base_dir, trajectory_aware=trajectory_aware,
                                                          plugin_manager=manager)
                    value = resolved.call(episode, sample)
                number = validate_reward_value(name, await maybe_await(value))
            except UsageError:
                raise
            except Exception as exc:
                episode.reward_errors[name] = f"{type(exc).__name__}: {exc}"
                stats.record_failure(name)
                failed = True
                continue
            episode.rewards[name] = number
            values.append(number)
            stats.record_value(name, number)
        episode.reward = None if failed else sum(values)
        stats.record_episode(episode.reward, failed)
    if notify:
        for result in manager.hook.on_episode_end(episode=episode):
            await maybe_await(result)
    return episode
