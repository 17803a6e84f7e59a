"""``metrics.png``: training reward, tool-call rate, response length and loss over steps (GRPO);
training and validation loss with the held-out accuracy before and after (SFT).

One plot for every backend that writes the job's ``metrics.jsonl`` (rows ``{"step": N, "reward": ...,
"aworld/tool_call_rate": ..., "completions/mean_length": ..., "loss": ...}``): aworld-trl and
aworld-verl draw it the same way; aworld-areal draws AReaL's own stat names with it (``reward_key``,
``only_logged``). matplotlib is imported when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

PANELS = (
    ("reward", "mean reward"),
    ("aworld/tool_call_rate", "tool-call rate"),
    ("completions/mean_length", "sampled tokens per episode"),
    ("loss", "loss"),
)
ACCURACY = "held-out accuracy"  # a panel of two bars: before and after training
SFT_PANELS = (("loss", "loss (training, validation)"), (ACCURACY, "held-out accuracy"))


def plot_metrics(history: Sequence[dict[str, Any]], path: str | Path, *, title: str = "",
                 accuracy: tuple[float | None, float | None] = (None, None),
                 panels: Sequence[tuple[str, str]] = PANELS, reward_key: str = "reward",
                 only_logged: bool = False) -> Path | None:
    """Write the plot; returns its path, or None when there is nothing to plot.

    ``accuracy`` (before, after) is drawn on the reward panel (the one of ``reward_key``: backends
    name their reward differently) as the held-out accuracy at the first and last step, or as bars
    on an :data:`ACCURACY` panel. The loss panel also draws the validation loss (``eval_loss``)
    when it was logged. ``only_logged`` leaves out the panels no row has a value for (and draws
    nothing when that is all of them): for a backend whose stats depend on its configuration.
    """
    rows = [r for r in history if "step" in r]
    if only_logged:
        panels = [(key, label) for key, label in panels
                  if key == ACCURACY or any(isinstance(r.get(key), (int, float)) for r in rows)]
    if not rows or not panels:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for ax, (key, label) in zip(axes if len(panels) > 1 else [axes], panels, strict=True):
        if key == ACCURACY:
            _accuracy_bars(ax, accuracy, label)
            continue
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if points:
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, linewidth=1.2, label="training")
        if key == "loss":
            val = [(r["step"], r["eval_loss"]) for r in rows if isinstance(r.get("eval_loss"), (int, float))]
            if val:
                ax.plot(*zip(*val, strict=True), marker="o", linewidth=1.2, color="tab:orange", label="validation")
                ax.legend(loc="upper right", fontsize=8)
        if key == reward_key:
            before, after = accuracy
            first, last = rows[0]["step"], rows[-1]["step"]
            marks = [(s, v) for s, v in ((first, before), (last, after)) if v is not None]
            if marks:
                ax.scatter(*zip(*marks, strict=True), color="tab:red", zorder=3, label="held-out accuracy")
            ax.set_ylim(-0.05, 1.05) if all(0 <= v <= 1 for _, v in points) else None
            ax.legend(loc="lower right", fontsize=8)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def _accuracy_bars(ax: Any, accuracy: tuple[float | None, float | None], label: str) -> None:
    names = ["before", "after"]
    values = [v if v is not None else 0.0 for v in accuracy]
    bars = ax.bar(names, values, color=["tab:gray", "tab:green"])
    for bar, value in zip(bars, accuracy, strict=True):
        ax.annotate("n/a" if value is None else f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.set_title(label)
