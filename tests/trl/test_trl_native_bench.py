"""``benchmarks/trl_native_vs_aworld.py --quick`` runs end to end (no timing or accuracy checked).

Both sides really run: aworld-trl's rollout over the real MCP calculator, and TRL 1.16's
``GRPOTrainer(tools=[calc])`` with the response template the benchmark sets; a change in TRL's
tool-calling API or in ours breaks this before the benchmark is next run by hand.
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
    lines = done.stdout.splitlines()
    assert any(line.startswith("aworld ") for line in lines), done.stdout
    assert any(line.startswith("trl ") for line in lines), done.stdout
    assert "time to 0.8" in done.stdout
