"""examples/sft_from_trajectories, run with its documented command (shortened: fewer problems and
SFT steps): three real task servers and one client collect the teacher's episodes over a real MCP
calculator, the filter keeps the correct ones, TRL's SFTTrainer fine-tunes a fresh student on the
CPU, and held-out accuracy rises from 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "sft_from_trajectories" / "run.py"


def test_the_documented_command_collects_filters_and_improves_the_student(tmp_path):
    pytest.importorskip("aworld_cpu_grpo_demo")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--problems", "400", "--run-dir", str(tmp_path),
         "backends.trl.max_steps=200", "backends.trl.eval_steps=100", "backends.trl.aworld.progress=false",
         "backends.trl.aworld.targets=null"],
        capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    collect = result["collect"]
    assert collect["episodes"] == 800 and len(collect["per_host"]) == 3  # every server ran some
    assert collect["statuses"] == {"success": 800}
    # the teacher's guesses (reward 0) and the second attempts are dropped, each under its reason
    assert set(result["dropped"]) == {"reward below 1", "not among the best 1 of its task"}
    assert 0.8 * 400 < result["kept"]["episodes"] <= 400
    metrics = result["sft"]
    assert metrics["sft/format"] == "tokens" and metrics["steps"] == 200
    assert metrics["loss/end"] < 0.2 * metrics["loss/start"] and metrics["eval_loss/last"] < metrics["eval_loss/first"]
    assert metrics["eval_before/accuracy"] == 0.0
    assert metrics["eval_after/accuracy"] >= 0.3, metrics
    assert (tmp_path / "sft" / "metrics.png").stat().st_size > 0
    assert "held-out accuracy 0.00 ->" in done.stdout
