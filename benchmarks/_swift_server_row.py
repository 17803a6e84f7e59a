"""ms-swift server mode's row for ``benchmarks/backends_e2e.py``: the demo job through ``swift rollout`` +
``swift rlhf --vllm_mode server`` on vLLM's CPU build, as a user launches it.

:func:`swift_server_row` runs ``python -m aworld_core.run --backend swift`` on the demo's job
(``examples/cpu_grpo_demo/job.yaml``: its model, calculator MCP server, datasets and reward) with
a ``backends.swift`` section for server mode, in ``.venvs/swift-vllm``, and reads back what the
launch and ms-swift logged: start-up (the rollout server's, and the launch to the first step),
seconds per step, the reward curve, the time to a mean reward of 0.6, and held-out accuracy before
and after (ms-swift's evaluation on the job's test set, ``eval_on_start``). Printed, never asserted.

    .venvs/swift-vllm/bin/python benchmarks/_swift_server_row.py [--steps 20] [--workdir DIR] [--model DIR]

The demo model's own chat format is used (``template_backend: jinja``): ms-swift's ``qwen2_5``
template would list the tools in a system block longer than the demo model's 256 positions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEMO_JOB = ROOT / "examples" / "cpu_grpo_demo" / "job.yaml"
TARGET_REWARD = 0.6


def swift_server_section(steps: int, *, port: int, group_port: int) -> dict[str, Any]:
    """``backends.swift`` for the demo in server mode: the demo's GRPO settings (8 prompts x 8
    generations, lr 2e-4, no KL, temperature 1), the rollout server on vLLM's CPU build."""
    return {
        "model_type": "qwen2", "template": "qwen2_5", "template_backend": "jinja", "tuner_type": "full",
        "torch_dtype": "float32", "use_vllm": True, "vllm_mode": "server", "vllm_server_group_port": group_port,
        "num_generations": 8, "per_device_train_batch_size": 64, "max_completion_length": 64,
        "max_steps": steps, "learning_rate": 2.0e-4, "lr_scheduler_type": "linear", "beta": 0.0,
        "temperature": 1.0, "top_p": 1.0, "top_k": 0, "logging_steps": 1, "save_strategy": "no",
        "dataloader_num_workers": 0, "eval_strategy": "steps", "eval_steps": steps, "eval_on_start": True,
        "per_device_eval_batch_size": 64,
        "rollout": {"port": port, "vllm_max_model_len": 256, "vllm_enforce_eager": True},
    }


def _free_port() -> int:
    from aworld_core.vllm_server import free_port

    return free_port()


def write_job(workdir: Path, steps: int, model_dir: Path | None = None) -> Path:
    import yaml

    job = yaml.safe_load(DEMO_JOB.read_text(encoding="utf-8"))
    base = DEMO_JOB.parent
    job["backend"] = "swift"
    job["output_dir"] = str(workdir / "run")
    # the demo's model.build makes it on the first launch; a row beside others passes the shared one
    job["model"]["path"] = str(model_dir or workdir / "model")
    job["rollout"] = {**job.get("rollout", {}), "max_turns": job["agent"].get("max_steps", 3)}
    job["backends"] = {"swift": swift_server_section(steps, port=_free_port(), group_port=_free_port())}
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False), encoding="utf-8")
    # the demo's module references resolve from the example's folder
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(base), os.environ.get("PYTHONPATH", "")) if p)
    return path


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """Seconds of training until the step reward first reaches ``target`` (``None``: never)."""
    return next((elapsed for elapsed, reward in curve if reward >= target), None)


def read_log(log: Path) -> dict[str, Any]:
    steps, evals = [], []
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "eval_reward" in entry:
            evals.append(float(entry["eval_reward"]))
        elif "reward" in entry and "step_time" in entry:
            steps.append((float(entry["step_time"]), float(entry["reward"])))
    elapsed, curve = 0.0, []
    for step_time, reward in steps:
        elapsed += step_time
        curve.append((elapsed, reward))
    return {"curve": curve, "evals": evals}


def swift_server_row(workdir: Path, steps: int = 20, model_dir: Path | None = None,
                     python: str = sys.executable) -> dict[str, Any]:
    """One launch of the demo in ms-swift server mode; its figures (``None`` where not reached)."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = write_job(workdir, steps, model_dir)
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run([python, "-m", "aworld_core.run", "--config", str(job)], capture_output=True, text=True,
                          env=os.environ.copy())
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the ms-swift server-mode launch failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    metrics = dict(line.strip().split(": ", 1) for line in proc.stdout.splitlines() if line.startswith("  ") and ": " in line)
    log = read_log(workdir / "run" / "swift" / "logging.jsonl")
    curve = log["curve"]
    train = curve[-1][0] if curve else 0.0
    step_times = [b[0] - a[0] for a, b in zip([(0.0, 0.0), *curve], curve, strict=False)]
    return {
        "backend": "ms-swift server mode (vLLM CPU)",
        "rollout_server_startup_s": float(metrics.get("rollout_server_startup_s", "nan")),
        "startup_s": wall - train,  # everything but the steps: data, server, trainer start, evaluation
        "s_per_step": sorted(step_times)[len(step_times) // 2] if step_times else None,
        "rewards": [round(reward, 3) for _, reward in curve],
        "time_to_0.6_s": time_to(curve, TARGET_REWARD),
        "heldout_before": log["evals"][0] if log["evals"] else None,
        "heldout_after": log["evals"][-1] if len(log["evals"]) > 1 else None,
        "wall_s": wall,
        "load": (load, os.getloadavg()[0]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--model", type=Path, default=None, help="a built demo model (default: build one)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="swift-server-bench-"))
    row = swift_server_row(workdir, args.steps, args.model)
    for key, value in row.items():
        print(f"{key:>26}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
