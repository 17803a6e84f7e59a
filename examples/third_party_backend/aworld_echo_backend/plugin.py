"""The whole plugin: one backend object, carrying the function that plans a job on it."""

import json
import sys
from pathlib import Path

from aworld_core import Backend, LaunchPlan, hookimpl


def plan(job, output_dir: Path) -> LaunchPlan:
    """What running ``job`` launches (``--dry-run`` prints it; nothing runs here)."""
    dataset = job.resolve_path(job.train_dataset.path) if job.train_dataset and job.train_dataset.path else None
    payload = {"job": job.model_dump(mode="json"), "dataset": dataset, **job.backend_section("echo")}
    return LaunchPlan(
        backend="echo",
        command=[sys.executable, "-m", "aworld_echo_backend.train", str(output_dir / "echo_job.json")],
        files={"echo_job.json": json.dumps(payload, indent=2)},
    )


@hookimpl
def register_backends():
    # no capabilities declared: a job asking for rollout.sampling, sft: or agent.compaction is
    # refused by validation, naming this backend, instead of being silently ignored
    return [Backend("echo", "counts the training rows and echoes the job (an example backend)", planner=plan)]
