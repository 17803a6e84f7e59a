"""Resolving a reward by name and scoring finished episodes with it.

A reward name is looked up among the ``RewardSpec``\\ s plugins registered; anything else is an
import reference (``package.module:func`` or ``path/to/file.py:func``, relative files resolved
against the job's directory). Scoring goes through the ``compute_reward`` hook so a plugin can
own a name, and every outcome is explicit: a value is validated and stored, a failure is stored
as text in ``episode.reward_errors`` and counted, and neither is ever turned into 0.
"""

from __future__ import annotations

import contextvars
import inspect
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aworld_core.aio import maybe_await
from aworld_core.errors import UsageError
from aworld_core.imports import import_ref, is_ref
from aworld_core.plugins import get_plugin_manager
from aworld_core.schemas import Episode, EpisodeStatus, Sample

if TYPE_CHECKING:
    from aworld_core.config import RewardSection
    from aworld_core.plugins import PluginManager

PLAIN_SIGNATURE = "(data_source, solution_str, ground_truth, extra_info)"
TRAJECTORY_SIGNATURE = "(episode, sample)"
TRL_SIGNATURE = "(prompts, completions, completion_ids, ground_truth, data_source, extra_info, <extra_info keys>, **kwargs)"


@dataclass(frozen=True)
class _CallOptions:
    base_dir: str | None = None
    trajectory_aware: bool | None = None
    plugin_manager: PluginManager | None = None


# What ``score_episode`` knows and the ``compute_reward`` hook's signature cannot carry: the
# job's directory (for ``file.py:func``), the config's ``trajectory_aware`` flag, and the plugin
# manager whose catalog names the rewards.
_call_options: contextvars.ContextVar[_CallOptions | None] = contextvars.ContextVar(
    "aworld_reward_options", default=None
)


@dataclass(frozen=True)
class ResolvedReward:
    """A reward function and how to call it."""

    name: str
    func: Callable[..., Any]
    trajectory_aware: bool
    source: str  # "plugin <name> (<dist>)" or "import reference"
    trl_style: bool = False  # TRL's (completions, **kwargs) -> list[float], called with a batch of one


def _looks_trl_style(func: Callable[..., Any]) -> bool:
    """A TRL reward function: it takes ``completions`` (and neither ``solution_str`` nor ``episode``)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return "completions" in params and "solution_str" not in params and "episode" not in params


def solution_text(episode: Episode) -> str:
    """What a plain reward scores: the episode's final answer, else the last assistant text.

    The final answer is the model's full final reply as the runtime recorded it (tags such as
    ``<answer>`` included); episodes that ended without one fall back to the last assistant
    message, then to the last model call's content, so a reward always sees what the model said.
    """
    if episode.final_answer is not None:
        return episode.final_answer
    for message in reversed(episode.messages):
        if message.get("role") == "assistant" and message.get("content"):
            return _content_text(message["content"])
    for step in reversed(episode.steps):
        call = step.exp_data.llm_call
        if call is not None and call.content:
            return call.content
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return str(content)


def _looks_trajectory_aware(func: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return "episode" in params and "solution_str" not in params


def resolve_reward(
    name: str,
    *,
    base_dir: str | None = None,
    trajectory_aware: bool | None = None,
    plugin_manager: PluginManager | None = None,
) -> ResolvedReward:
    """Find the function behind ``name``: a registered reward, else an import reference.

    ``trajectory_aware`` overrides what the spec says; for an unflagged import reference a
    function that takes ``episode`` and no ``solution_str`` is trajectory-aware.
    Raises :class:`UsageError` naming the registered rewards when ``name`` is neither.
    """
    manager = plugin_manager or get_plugin_manager()
    catalog = manager.catalog()
    provided = catalog.get("reward", name)
    if provided is not None:
        spec = provided.spec
        func = import_ref(spec.func, base_dir) if isinstance(spec.func, str) else spec.func
        aware = spec.trajectory_aware if trajectory_aware is None else trajectory_aware
        source = f"plugin '{provided.plugin}' ({provided.distribution})"
    elif is_ref(name):
        func = import_ref(name, base_dir)
        aware = _looks_trajectory_aware(func) if trajectory_aware is None else trajectory_aware
        source = "import reference"
    else:
        registered = ", ".join(sorted(catalog.items("reward"))) or "none"
        raise UsageError(
            f"unknown reward '{name}'. Registered rewards: {registered}. "
            f"Or give an import reference: 'package.module:func' or 'path/to/file.py:func' "
            f"(a relative file is looked up beside the job config)"
        )
    if not callable(func):
        raise UsageError(f"reward '{name}' resolves to {func!r}, which is not callable")
    return ResolvedReward(name, func, aware, source, trl_style=not aware and _looks_trl_style(func))


def reward_call_keywords(reward: ResolvedReward, episode: Episode, sample: Sample) -> tuple[dict[str, Any], str]:
    """The keywords ``reward`` is called with for one episode, and the signature they form."""
    if reward.trajectory_aware:
        return {"episode": episode, "sample": sample}, TRAJECTORY_SIGNATURE
    if reward.trl_style:
        return _trl_keywords(episode, sample), TRL_SIGNATURE
    return {
        "data_source": sample.data_source,
        "solution_str": solution_text(episode),
        "ground_truth": sample.ground_truth,
        "extra_info": dict(sample.extra_info),
    }, PLAIN_SIGNATURE


def _trl_keywords(episode: Episode, sample: Sample) -> dict[str, Any]:
    """TRL's reward keywords for a batch of one, as TRL passes them for a conversational dataset:
    ``prompts`` the prompt messages, ``completions`` the messages the episode added after them
    (assistant turns, tool calls and tool results; the final answer is the last assistant one),
    ``completion_ids`` the sampled token ids when the episode kept them, and every dataset column:
    ``ground_truth``, ``data_source``, ``extra_info`` and each ``extra_info`` key on its own."""
    prompt = [dict(m) for m in sample.prompt]
    messages = [dict(m) for m in episode.messages]
    completion = messages[len(prompt):] if messages[: len(prompt)] == prompt else [
        m for m in messages if m.get("role") not in ("system", "user")
    ]
    if not completion:
        completion = [{"role": "assistant", "content": solution_text(episode)}]
    ids: list[int] = []
    for step in episode.steps:
        data = step.exp_data.llm_call.token_data if step.exp_data.llm_call is not None else None
        if data is not None:
            ids.extend(data.response_ids)
    columns = {k: v for k, v in sample.extra_info.items() if isinstance(k, str) and k.isidentifier()}
    keywords: dict[str, Any] = {key: [value] for key, value in columns.items()}
    keywords.update({
        "prompts": [prompt],
        "completions": [completion],
        "completion_ids": [ids],
        "ground_truth": [sample.ground_truth],
        "data_source": [sample.data_source],
        "extra_info": [dict(sample.extra_info)],
        "trainer_state": None,
    })
    return keywords


def check_reward_signature(reward: ResolvedReward) -> None:
    """``UsageError`` (with the fix) when ``reward`` cannot take the keywords it will be called
    with: what a run would find at its first scored episode, found before anything starts."""
    episode = Episode(task_id="check", agent_id="check")
    sample = Sample(id="check", prompt=[{"role": "user", "content": "?"}])
    kwargs, expected = reward_call_keywords(reward, episode, sample)
    if reward.trl_style:  # the dataset's own columns vary: only TRL's fixed names are required
        kwargs = {k: kwargs[k] for k in ("prompts", "completions", "completion_ids", "ground_truth",
                                         "data_source", "extra_info", "trainer_state")}
        try:
            params = inspect.signature(reward.func).parameters.values()
        except (TypeError, ValueError):
            return
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            named = {p.name for p in params}
            kwargs = {k: v for k, v in kwargs.items() if k in named}
            missing = [p.name for p in params if p.default is inspect.Parameter.empty
                       and p.kind is not inspect.Parameter.VAR_POSITIONAL and p.name not in kwargs]
            if missing:
                raise UsageError(
                    f"reward '{reward.name}' ({reward.source}) looks like a TRL reward function (it takes "
                    f"completions) but also requires {missing}, which the core does not pass; TRL-style rewards "
                    f"get {TRL_SIGNATURE}: add **kwargs and read dataset columns from it (or extra_info)"
                )
    _check_signature(reward, kwargs, expected)


def _trl_value(reward: ResolvedReward, value: Any) -> Any:
    """The one number a TRL-style reward returned for its batch of one."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return value[0]
    raise ValueError(
        f"reward '{reward.name}' is a TRL-style reward (it takes completions), called with a batch of one "
        f"completion; it must return a list of one number, got {value!r}"
    )


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

    The value is returned as the function gave it; :func:`score_episode` validates it.
    ``base_dir``, ``trajectory_aware`` and ``plugin_manager`` default to what the surrounding
    ``score_episode`` set.
    """
    options = _call_options.get() or _CallOptions()
    reward = resolve_reward(
        name,
        base_dir=base_dir if base_dir is not None else options.base_dir,
        trajectory_aware=trajectory_aware if trajectory_aware is not None else options.trajectory_aware,
        plugin_manager=plugin_manager or options.plugin_manager,
    )
    kwargs, expected = reward_call_keywords(reward, episode, sample)
    if reward.trl_style:
        try:
            params = inspect.signature(reward.func).parameters.values()
        except (TypeError, ValueError):
            params = []
        if params and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            named = {p.name for p in params}
            kwargs = {k: v for k, v in kwargs.items() if k in named}
    _check_signature(reward, kwargs, expected)
    value = reward.func(**kwargs)
    if reward.trl_style:
        if inspect.isawaitable(value):
            return _awaited_trl_value(reward, value)
        return _trl_value(reward, value)
    return value


async def _awaited_trl_value(reward: ResolvedReward, value: Any) -> Any:
    return _trl_value(reward, await value)


def _check_signature(reward: ResolvedReward, kwargs: dict[str, Any], expected: str) -> None:
    try:
        signature = inspect.signature(reward.func)
    except (TypeError, ValueError):  # builtins without a signature: let the call speak
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        other = "trajectory_aware=false" if reward.trajectory_aware else "trajectory_aware=true"
        raise UsageError(
            f"reward '{reward.name}' ({reward.source}) has signature {reward.func.__name__}{signature}, "
            f"but is called with keywords {expected}: {exc}. Rename its parameters, or set "
            f"reward.{other} if it is the other kind (a TRL-style reward takes completions and **kwargs "
            f"and returns a list of floats)"
        ) from None


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


def _reward_specs(reward: Any) -> list[tuple[str, bool | None]]:
    items = [reward] if isinstance(reward, str) or not isinstance(reward, Sequence) else list(reward)
    if not items:
        raise UsageError("no reward given: pass a reward name, an import reference or a RewardSection")
    specs: list[tuple[str, bool | None]] = []
    for item in items:
        if isinstance(item, str):
            specs.append((item, None))
        elif hasattr(item, "name") and hasattr(item, "trajectory_aware"):
            specs.append((item.name, item.trajectory_aware))
        else:
            raise UsageError(
                f"bad reward {item!r}: expected a reward name, an import reference or a RewardSection"
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
    reward: str | RewardSection | Sequence[str | RewardSection],
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
        for name, trajectory_aware in specs:
            episode.rewards.pop(name, None)
            episode.reward_errors.pop(name, None)
            token = _call_options.set(_CallOptions(base_dir, trajectory_aware, manager))
            try:
                value = await maybe_await(manager.hook.compute_reward(name=name, episode=episode, sample=sample))
                number = validate_reward_value(name, value)
            except UsageError:
                raise
            except Exception as exc:
                episode.reward_errors[name] = f"{type(exc).__name__}: {exc}"
                stats.record_failure(name)
                failed = True
                continue
            finally:
                _call_options.reset(token)
            episode.rewards[name] = number
            values.append(number)
            stats.record_value(name, number)
        episode.reward = None if failed else sum(values)
        stats.record_episode(episode.reward, failed)
    if notify:
        for result in manager.hook.on_episode_end(episode=episode):
            await maybe_await(result)
    return episode
