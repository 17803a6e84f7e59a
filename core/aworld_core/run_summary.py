"""The end of a training run, the same on every backend: the summary line, ``metrics.png`` and
``summary.json``.

Why one module: a user compares runs across backends by their ``summary.json`` keys and their last
printed line, so the windowed start/end means, the held-out accuracy before and after, the timings,
the plot and the targets check are computed here once, and a backend only says what differs (its
stat names, its plot panels, an SFT run's loss headline).

What a run writes (:func:`write_summary`):

* ``metrics``: what the backend measured, plus ``train_seconds`` (since the backend's ``started``
  clock), ``process_seconds`` (this process's age: the whole run as its user waited for it), the
  peak memory of this process when it trained (:func:`memory_metrics`), ``eval_<when>/accuracy`` and
  ``eval_<when>/tool_use_rate`` of each held-out evaluation, ``targets_met`` when targets were set;
  :func:`training_metrics` adds ``steps`` and the ``reward/*`` and ``tool_call_rate/*`` means;
* ``artifacts``: name -> path, ``eval_<when>`` and ``plot`` added, each printed as ``  name: path``;
* one line ``summary: <headline>; held-out accuracy A -> B (N tasks, greedy); Ts in all``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from aworld_core.plots import PANELS

__all__ = [
    "Targets",
    "check_targets",
    "format_value",
    "memory_metrics",
    "print_eval",
    "process_age_s",
    "reward_headline",
    "training_metrics",
    "window_means",
    "write_summary",
]

TOOL_RATE = "aworld/tool_call_rate"  # the job's metrics.jsonl name (the TRL backend's)


class Targets(Protocol):
    """What a run must reach (e.g. aworld-trl's ``backends.trl.aworld.targets``); ``None``: not checked."""

    max_minutes: float | None  # the whole process (process_seconds)
    min_accuracy_gain: float | None  # held-out accuracy after minus before
    min_final_reward: float | None  # reward/end


def format_value(value: float | None) -> str:
    """A metric as the summary prints it: two decimals, ``n/a`` when unmeasured."""
    return "n/a" if value is None else f"{value:.2f}"


def window_means(rows: Sequence[dict[str, Any]], key: str, window: int) -> tuple[float | None, float | None]:
    """The mean of ``key`` over the first and over the last ``window`` rows that logged it
    (``None`` when none did): one step's value is too noisy to compare a run's start and end."""
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    if not values:
        return None, None
    return sum(values[:window]) / len(values[:window]), sum(values[-window:]) / len(values[-window:])


def training_metrics(history: Sequence[dict[str, Any]], window: int, *, reward_key: str = "reward",
                     tool_key: str = TOOL_RATE) -> dict[str, Any]:
    """``steps`` (the rows of ``history``) and the windowed start/end means of the training reward
    (``reward/start``, ``reward/end``) and tool-call rate (``tool_call_rate/start``, ``.../end``)."""
    reward = window_means(history, reward_key, window)
    tools = window_means(history, tool_key, window)
    return {"steps": len(history), "reward/start": reward[0], "reward/end": reward[1],
            "tool_call_rate/start": tools[0], "tool_call_rate/end": tools[1]}


def reward_headline(metrics: dict[str, Any], window: int) -> str:
    """The summary line's start for reinforcement learning (from :func:`training_metrics`)."""
    return (f"summary: training reward {format_value(metrics['reward/start'])} -> "
            f"{format_value(metrics['reward/end'])} (mean of first/last {window} steps)")


def print_eval(report: Any, when: str) -> None:
    """The line printed after one held-out evaluation (an ``EvalReport``) ``before``/``after`` training."""
    from aworld_core.evaluate import tool_use_rate

    print(f"  {when}: {report.summary()}; tool use {tool_use_rate(report.episodes):.2f}", flush=True)


def write_summary(output_dir: str | Path, headline: str, *, history: Sequence[dict[str, Any]],
                  metrics: dict[str, Any], artifacts: dict[str, str], started: float,
                  before: Any = None, after: Any = None, title: str = "", plot: bool = True,
                  panels: Sequence[tuple[str, str]] = PANELS, reward_key: str = "reward",
                  only_logged: bool = False, targets: Targets | None = None, memory: bool = True) -> None:
    """The end of a run: timings, held-out metrics, ``metrics.png``, the summary line and artifact
    lines printed, the targets, ``summary.json``. ``metrics`` and ``artifacts`` are updated in place.

    ``headline``: the line's start (:func:`reward_headline`, or an SFT run's loss); ``before`` /
    ``after``: the held-out ``EvalReport`` s (``eval_<when>.jsonl`` in ``output_dir``) or ``None``;
    ``started``: ``time.perf_counter()`` when the backend started; ``panels``, ``reward_key``,
    ``only_logged``: :func:`aworld_core.plots.plot_metrics`'s; ``memory``: record this process's peak
    memory (``False`` where training runs in other processes, whose memory this one cannot see).
    """
    from aworld_core.evaluate import tool_use_rate

    output = Path(output_dir)
    train_seconds = round(time.perf_counter() - started, 1)
    age = process_age_s()
    metrics.update({"train_seconds": train_seconds,
                    "process_seconds": train_seconds if age is None else round(age, 1),
                    **(memory_metrics() if memory else {})})
    for report, when in ((before, "before"), (after, "after")):
        if report is not None:
            metrics[f"eval_{when}/accuracy"] = report.accuracy
            metrics[f"eval_{when}/tool_use_rate"] = tool_use_rate(report.episodes)
            artifacts[f"eval_{when}"] = str(output / f"eval_{when}.jsonl")
    accuracy = (before.accuracy if before is not None else None, after.accuracy if after is not None else None)
    if plot and history:
        try:
            from aworld_core.plots import plot_metrics

            drawn = plot_metrics(history, output / "metrics.png", title=title, accuracy=accuracy, panels=panels,
                                 reward_key=reward_key, only_logged=only_logged)
            if drawn is not None:
                artifacts["plot"] = str(drawn)
        except ImportError as exc:
            print(f"no metrics.png: {exc} (pip install matplotlib)", flush=True)
    line = headline
    if before is not None or after is not None:
        line += (f"; held-out accuracy {format_value(accuracy[0])} -> {format_value(accuracy[1])} "
                 f"({(after or before).n} tasks, greedy)")
    print(f"{line}; {metrics['process_seconds']:.0f}s in all", flush=True)
    for name, path in artifacts.items():
        print(f"  {name}: {path}", flush=True)
    if targets is not None:
        metrics["targets_met"] = check_targets(targets, metrics)
    (output / "summary.json").write_text(json.dumps({"metrics": metrics, "artifacts": artifacts}, indent=2),
                                         encoding="utf-8")


def check_targets(targets: Targets, metrics: dict[str, Any]) -> bool:
    """Print each target of ``targets`` set (met, MISSED or unmeasured) against ``metrics``
    (``process_seconds``, ``eval_before/accuracy``, ``eval_after/accuracy``, ``reward/end``);
    ``True`` when every one was met (an unmeasured one is not)."""
    checks: list[tuple[str, bool | None]] = []
    if targets.max_minutes is not None:
        minutes = metrics["process_seconds"] / 60
        checks.append((f"whole run {minutes:.1f} min <= {targets.max_minutes:g} min", minutes <= targets.max_minutes))
    if targets.min_accuracy_gain is not None:
        before, after = metrics.get("eval_before/accuracy"), metrics.get("eval_after/accuracy")
        gain = None if before is None or after is None else after - before
        checks.append((f"held-out accuracy gain {format_value(gain)} >= {targets.min_accuracy_gain:g}",
                       None if gain is None else gain >= targets.min_accuracy_gain))
    if targets.min_final_reward is not None:
        end = metrics.get("reward/end")
        checks.append((f"final training reward {format_value(end)} >= {targets.min_final_reward:g}",
                       None if end is None else end >= targets.min_final_reward))
    for text, ok in checks:
        print(f"target: {text}: {'unmeasured' if ok is None else ('met' if ok else 'MISSED')}", flush=True)
    return all(ok for _, ok in checks)


def memory_metrics() -> dict[str, Any]:
    """Peak memory of this process: its resident set, and on CUDA what torch allocated (the device's
    name too). torch is only looked at when something already imported it."""
    import resource

    out: dict[str, Any] = {}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out["peak_rss_gib"] = round(rss / (2**30 if sys.platform == "darwin" else 2**20), 3)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["cuda_device"] = torch.cuda.get_device_name()
        out["cuda_peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        out["cuda_peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 3)
    return out


def process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``; ``None`` elsewhere)."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
