"""``benchmarks/trl_native_vs_aworld.py --quick`` runs end to end (no timing or accuracy checked).

Every side really runs, with a tool latency (gaia-like, 20 ms median): aworld-trl's
rollout over the real MCP calculator (whose calls sleep), synchronous and asynchronous
(``aworld.async_rollout``), and TRL 1.16's
``GRPOTrainer(tools=[calc])`` with a sync and an async tool that sleep, with the response template
the benchmark sets; a change in TRL's tool-calling API or in ours breaks this before the
benchmark is next run by hand.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trl_native_vs_aworld.py"


@pytest.mark.slow
def test_quick_mode_runs_both_sides_and_prints_the_table():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    # one row per (tool latency, side): aworld (sync and async GRPO), TRL with a sync tool, and with an async one
    for latency, side in (("20", "aworld"), ("20", "aworld-async"), ("20", "trl"), ("20", "trl-async")):
        assert any(side in row and latency + " ms" in " ".join(row) for row in rows), done.stdout
    assert "time to held-out 0.8" in done.stdout and "aworld-async/trl" in done.stdout
