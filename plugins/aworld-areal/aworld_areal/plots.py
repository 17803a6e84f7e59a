"""``metrics.png`` of an AReaL run: training reward (with held-out accuracy before and after),
tool-call rate, sampled tokens per episode and the sample staleness AReaL measured, per step.

The rows are what ``aworld_areal.run`` wrote to ``metrics.jsonl``: AReaL's committed stats, whose
names differ from TRL's, hence this small plot of its own beside ``aworld_trl.plots``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

# the reward of the rows each step trained (AReaL's own stat; a failed member's masked row carries its
# group's mean, so it does not move it). rollout/aworld/reward is per group as it completes, which in
# asynchronous training need not be the step that trains it (a step can complete none).
REWARD = "ppo_actor/task_reward/avg"
PANELS = (
    (REWARD, "mean reward of the trained batch"),
    ("rollout/aworld/tool_call_rate", "tool-call rate"),
    ("rollout/aworld/sampled_tokens", "sampled tokens per episode"),
    ("ppo_actor/update/version_stats/sample_staleness_theta_avg", "sample staleness (versions)"),
)


def plot_metrics(history: Sequence[dict[str, Any]], path: str | Path, *, title: str = "",
                 accuracy: tuple[float | None, float | None] = (None, None),
                 panels: Sequence[tuple[str, str]] = PANELS) -> Path | None:
    """Write the plot; ``None`` when no step has any of the panels' values."""
    rows = [r for r in history if "step" in r]
    drawn = [(key, label) for key, label in panels if any(isinstance(r.get(key), (int, float)) for r in rows)]
    if not drawn:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(drawn), figsize=(5 * len(drawn), 3.6), squeeze=False)
    for ax, (key, label) in zip(axes[0], drawn, strict=True):
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        steps, values = zip(*points, strict=True)
        ax.plot(steps, values, linewidth=1.2, label="training")
        if key == REWARD:
            before, after = accuracy
            marks = [(s, v) for s, v in ((rows[0]["step"], before), (rows[-1]["step"], after)) if v is not None]
            if marks:
                ax.scatter(*zip(*marks, strict=True), color="tab:red", zorder=3, label="held-out accuracy")
            if all(0 <= v <= 1 for v in values):
                ax.set_ylim(-0.05, 1.05)
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
