"""Seed 004's example on a CPU: ``examples/gsm8k_areal/job_cpu.yaml`` through its documented command.

``python -m aworld_core.run --config examples/gsm8k_areal/job_cpu.yaml`` builds the tiny local model
(``tiny_model.py``, nothing downloaded), starts plain vLLM from ``.venvs/vllm`` itself (the managed
server: spawned by ``aworld_areal.train``, stopped when the run ends), and trains a few steps of
GRPO with AReaL's own trainer on the example's GSM8K-format files. The model is random: this is the
pipeline (AReaL's trainer, the weight updates, the outputs), not learning.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "examples" / "gsm8k_areal" / "job_cpu.yaml"
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_gsm8k_example_trains_a_few_steps_on_a_cpu_and_stops_its_server(tmp_path):
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON.parent.parent} (make test builds it)")
    out = tmp_path / "run"
    args = [f"output_dir={out}", f"model.path={tmp_path / 'model'}", "backends.areal.total_train_steps=2",
            "backends.areal.train_dataset.batch_size=2", "backends.areal.gconfig.n_samples=2",
            "backends.areal.gconfig.max_new_tokens=24"]
    dry = subprocess.run([sys.executable, "-m", "aworld_core.run", "--config", str(JOB), "--dry-run", *args],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "-m vllm.entrypoints.openai.api_server" in dry.stdout and "AREAL_SPMD_MODE=1" in dry.stdout
    assert not out.exists() and not (tmp_path / "model").exists()  # a dry run writes and builds nothing

    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", "--config", str(JOB), *args],
                          capture_output=True, text=True, timeout=1500, cwd=tmp_path, env={**os.environ})
    (tmp_path / "run.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "model" / "config.json").exists()  # model.build made it
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["ppo_actor/n_seqs"] == 4 for r in rows)  # 2 prompts x 2 episodes, whole groups
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["vllm_start_seconds"] > 0 and "eval_after/accuracy" in summary["metrics"]
    assert (out / "checkpoint" / "model.safetensors").exists() and (out / "metrics.png").exists()
    spec = json.loads((out / "vllm_server.json").read_text())
    assert "vLLM server up after" in proc.stdout and not _listening(spec["port"])  # stopped with the run
