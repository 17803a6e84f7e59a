"""``scripts/gpu_check.py --cpu-tiny``: the one-GPU check's whole path on the CPU (no timing checked).

The script builds a model here, runs the demo's job through ``python -m aworld_core.run`` (real
calculator MCP server, TRL's trainer, HF engine, LoRA) and reads the run's figures; on a machine
without CUDA the default (GPU) mode refuses with exit 2 rather than measuring the CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


@pytest.mark.slow
def test_cpu_tiny_runs_the_embedded_default_and_prints_the_figures(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu-tiny", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for line in ("step time (median", "sampled tokens/s", "trained tokens/s", "peak process memory"):
        assert line in done.stdout, done.stdout[-3000:]
    figures = json.loads((tmp_path / "gpu_check.json").read_text())
    assert figures["steps"] == 2 and figures["lora"] is True and figures["dtype"] == "fp32"
    assert figures["step_time_s"] > 0 and figures["sampled_tokens_per_s"] > 0 and figures["peak_rss_gib"] > 0


def test_gpu_mode_refuses_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the GPU mode would run")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "no CUDA device" in done.stderr
