"""SFT on collected trajectories with ms-swift's own trainer (a job with an ``sft:`` section).

The plan (``--dry-run``)::

    python -m swift.cli.main sft --model <model.path> --check_model false --fp16 false
        --dataset <out>/swift_sft_train.jsonl [--val_dataset <out>/swift_sft_val.jsonl]
        --output_dir <out>/swift --add_version false --seed <seed> --report_to none ...

(``python -m swift.cli.main`` is the ``swift`` command.) The dataset is ms-swift's agent format
(``aworld_swift.sft_rows``): ``messages`` with ``tool_call`` / ``tool_response``
roles and ``loss: true`` on the model's own messages, ``tools`` as JSON text; ms-swift renders it
with ``--template`` / ``--agent_template``. Every key of ``backends.swift`` except ``aworld`` and
``rollout`` is passed as ``--key value`` and wins (secret-carrying arguments are refused).
Launching writes the JSONL from ``sft.train`` / ``sft.val`` first. The token-exact form is refused
here (ms-swift re-renders messages); use the trl backend for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_swift import launch

TRAIN_FILE = "swift_sft_train.jsonl"
VAL_FILE = "swift_sft_val.jsonl"


def sft_args(job: Any, output_dir: Path) -> dict[str, Any]:
    out = output_dir.resolve()
    defaults = launch.base_args(job, out, str(out / TRAIN_FILE), str(out / VAL_FILE) if job.sft.val else None)
    args = launch.merge_args(defaults, launch.user_args(job), "backends.swift")
    return {key: value for key, value in args.items() if value is not None}


def build_sft_plan(job: Any, output_dir: Path) -> LaunchPlan:
    if job.sft.format == "tokens":
        raise UsageError(
            "sft.format: tokens is not available on ms-swift: `swift sft` renders messages with its template. "
            "Use sft.format: messages (or auto), or the trl backend for token-exact SFT"
        )
    out = output_dir.resolve()
    args = sft_args(job, out)
    notes = []
    if "model" not in args:
        notes.append("the job lacks model.path (the model to fine-tune): set it before launching")
    notes += launch.model_dir_notes(args)
    notes.append(f"launch writes {out / TRAIN_FILE}" + (f" and {out / VAL_FILE}" if job.sft.val else "")
                 + " from the sft: episode files (messages with tool_call/tool_response roles and per-message "
                   "loss, tools as JSON text)")
    if not job.sft.tools:
        notes.append("no sft.tools: the rows carry no tool list")
    return LaunchPlan(backend=launch.BACKEND, command=launch.command_line(args, "sft"), cwd=str(out),
                      env={"TRL_EXPERIMENTAL_SILENCE": "1"},
                      config={"swift_args": args}, notes=notes)


def write_sft_datasets(job: Any, output_dir: Path) -> dict[str, str]:
    """The sft: episode files as ms-swift agent-format JSONL; returns what was written."""
    from aworld_core.trajectories import write_job_sft_data
    from aworld_swift.sft_rows import sft_rows

    return write_job_sft_data(job, output_dir, sft_rows, {"train": TRAIN_FILE, "val": VAL_FILE})


def launch_sft(job: Any, plan: LaunchPlan) -> TrainResult:
    from aworld_core.launch import execute_plan

    if "model" not in plan.config.get("swift_args", {}):
        raise UsageError("the swift backend cannot launch this SFT job: set model.path")
    output_dir = launch.output_dir_of(job, plan)
    datasets = write_sft_datasets(job, output_dir)
    result = execute_plan(plan, output_dir)
    result.artifacts.update(datasets)
    return result
