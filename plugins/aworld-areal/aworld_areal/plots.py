"""``metrics.png`` of an AReaL run: the core's plot (``aworld_core.plots``) over AReaL's stat names.

The rows are what ``aworld_areal.run`` wrote to ``metrics.jsonl``: AReaL's committed stats, whose
names differ from TRL's and verl's, so this module only names the panels (training reward with
held-out accuracy before and after, tool-call rate, sampled tokens per episode, the sample
staleness AReaL measured) and which of them is the reward; a panel no step logged is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aworld_core import plots

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
    return plots.plot_metrics(history, path, title=title, accuracy=accuracy, panels=panels, reward_key=REWARD,
                              only_logged=True)
