"""``metrics.png`` of an AReaL run: the core's plot over AReaL's stat names (``aworld_areal.run.PLOT``,
what ``ArealRun`` passes to ``aworld_core.run_summary``).

Fast: matplotlib only. The figure's axes are read back as drawn (titles, lines, held-out marks).
"""

from __future__ import annotations

import pytest

from aworld_areal.run import PANELS, PLOT, REWARD
from aworld_core import plots


def plot_metrics(history, path, **kwargs):
    """The core's plot as an AReaL run draws it."""
    return plots.plot_metrics(history, path, **kwargs, **PLOT)


TOOLS, TOKENS, STALENESS = (key for key, _ in PANELS[1:])


@pytest.fixture
def figures(monkeypatch):
    """Each saved figure as ``[(title, [line points], [scatter points], y limits)]``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    saved: list[list[tuple]] = []
    original = Figure.savefig

    def record(self, *args, **kwargs):
        saved.append([(ax.get_title(), [line.get_xydata().tolist() for line in ax.get_lines()],
                       [c.get_offsets().tolist() for c in ax.collections], ax.get_ylim()) for ax in self.axes])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return saved


def test_every_logged_stat_is_a_panel_and_held_out_accuracy_marks_the_reward(tmp_path, figures):
    rows = [{"step": s, REWARD: s / 10, TOOLS: 0.5, TOKENS: 30.0 + s, STALENESS: 1.0, "epoch": 1} for s in (1, 2, 3)]
    path = plot_metrics(rows, tmp_path / "metrics.png", title="job", accuracy=(0.0, 0.85))
    assert path == tmp_path / "metrics.png" and path.stat().st_size > 0
    (axes,) = figures
    assert [a[0] for a in axes] == [label for _, label in PANELS]
    title, lines, marks, ylim = axes[0]
    assert lines == [[[1, 0.1], [2, 0.2], [3, 0.3]]]
    assert marks == [[[1, 0.0], [3, 0.85]]]  # before at the first step, after at the last
    assert ylim == (-0.05, 1.05)
    assert all(a[2] == [] for a in axes[1:])  # the marks only on the reward panel


def test_a_stat_no_step_logged_is_left_out_and_nothing_logged_draws_nothing(tmp_path, figures):
    rows = [{"step": 1, REWARD: 0.5, TOOLS: 0.25}, {"step": 2, REWARD: 2.0}, {"no step": 1, TOKENS: 9.0}]
    assert plot_metrics(rows, tmp_path / "a.png") is not None
    (axes,) = figures
    assert [a[0] for a in axes] == [PANELS[0][1], PANELS[1][1]]
    assert axes[0][3] != (-0.05, 1.05)  # a reward outside [0, 1] keeps matplotlib's own limits
    assert plot_metrics([{"step": 1, "other": 1.0}], tmp_path / "b.png") is None
    assert plot_metrics([], tmp_path / "c.png") is None
    assert not (tmp_path / "b.png").exists() and len(figures) == 1
