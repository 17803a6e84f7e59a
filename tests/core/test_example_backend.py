"""The example backend that trains (examples/reinforce_backend): its documented command, run as a
user would from the repository root, makes a tiny model whose reward rises and whose weights change.

Real parts throughout: the installed plugin (entry point), the core's CLI and runtime, a tiny HF
model and tokenizer built at run time, the HF token engine, a PyTorch optimizer.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "reinforce_backend"
COMMAND = "python -m aworld_core.run --config examples/reinforce_backend/job.yaml"
OUT = REPO / "runs" / "reinforce-demo"  # the job's output_dir (runs/ is git-ignored)


def _python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def test_the_readme_documents_the_command_and_the_job_writes_to_a_git_ignored_place() -> None:
    assert COMMAND in (EXAMPLE / "README.md").read_text()
    assert "runs/" in (REPO / ".gitignore").read_text().split()
    from aworld_core.config import load_job_config

    job = load_job_config(EXAMPLE / "job.yaml")  # paths relative to the file, whatever the cwd
    assert job.resolved_output_dir() == OUT and Path(job.model.path).parent == OUT


@pytest.mark.slow
def test_the_documented_command_trains_reward_rises_and_weights_change() -> None:
    from safetensors.torch import load_file

    shutil.rmtree(OUT, ignore_errors=True)  # a fresh run: model.build makes the model again
    argv = shlex.split(COMMAND)
    proc = subprocess.run([_python(), *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "done: backend=reinforce" in proc.stdout

    rows = [json.loads(line) for line in (OUT / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(100))
    first = sum(r["reward"] for r in rows[:10]) / 10
    last = sum(r["reward"] for r in rows[-10:]) / 10
    assert last >= 0.75 and last - first >= 0.25, (first, last)  # ignoring the prompt caps it near 0.5
    assert all(r["aworld/trained_rate"] == 1.0 and r["aworld/failed_rate"] == 0.0 for r in rows)
    assert max(r["logprob_gap"] for r in rows) < 1e-3  # trained tokens are the sampled tokens

    summary = json.loads((OUT / "summary.json").read_text())
    assert summary["reward_first"] == pytest.approx(first) and summary["reward_last"] == pytest.approx(last)
    before = load_file(str(OUT / "model" / "model.safetensors"))
    after = load_file(str(OUT / "checkpoint" / "model.safetensors"))
    assert before.keys() == after.keys()
    changed = sum(float((after[k] - before[k]).pow(2).sum()) for k in before) ** 0.5
    assert changed > 0.1 and changed == pytest.approx(summary["param_delta_l2"], rel=1e-3)
