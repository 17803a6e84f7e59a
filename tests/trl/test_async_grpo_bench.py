"""``benchmarks/async_grpo.py --quick`` runs end to end (no timing or accuracy checked): the
synchronous and the asynchronous aworld-trl runs over the real MCP calculator with a tool latency,
the held-out table at equal samples and the staleness histogram."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "async_grpo.py"


@pytest.mark.slow
def test_quick_mode_runs_sync_and_async_and_prints_the_tables():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    assert any(row[:1] == ["sync"] for row in rows) and any(row[:1] == ["async-s1"] for row in rows), done.stdout
    assert "held-out accuracy at equal samples" in done.stdout
    assert "staleness of trained tokens, async-s1" in done.stdout
    assert "async-s1 / sync: time to 0.8" in done.stdout
