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
from aworld_swift.launch import BACKEND, ROLLOUT_KEY, SWIFT_OUTPUT, _config_model_type, _merge, command_line
from aworld_swift.runtime import OPTIONS_KEY

TRAIN_FILE = "swift_sft_train.jsonl"
VAL_FILE = "swift_sft_val.jsonl"


def sft_args(job: Any, output_dir: Path) -> dict[str, Any]:
    out = output_dir.resolve()
    defaults: dict[str, Any] = {
        "model": job.resolve_path(job.model.path) if job.model is not None else None,
        "check_model": False,  # ms-swift would contact the ModelScope hub at every start
        "fp16": False,  # ms-swift turns fp16 on even for a float32 model on the CPU
        "dataset": str(out / TRAIN_FILE),
        "val_dataset": str(out / VAL_FILE) if job.sft.val else None,
        "output_dir": str(out / SWIFT_OUTPUT),
        "add_version": False,
        "seed": job.seed,
        "report_to": list(job.logging.report_to) or ["none"],
    }
    user = job.backend_section(BACKEND)
    user.pop(OPTIONS_KEY, None)
    user.pop(ROLLOUT_KEY, None)
    args = _merge(defaults, user, "backends.swift")
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
    model_dir = Path(str(args.get("model", "")))
    if model_dir.is_dir() and not {"model_type", "template"} <= set(args):
        notes.append(
            "ms-swift needs backends.swift.model_type and backends.swift.template for a local model directory "
            f"(e.g. model_type: qwen2, template: qwen2_5); the config's model_type is {_config_model_type(model_dir)!r}"
        )
    notes.append(f"launch writes {out / TRAIN_FILE}" + (f" and {out / VAL_FILE}" if job.sft.val else "")
                 + " from the sft: episode files (messages with tool_call/tool_response roles and per-message "
                   "loss, tools as JSON text)")
    if not job.sft.tools:
        notes.append("no sft.tools: the rows carry no tool list")
    return LaunchPlan(backend=BACKEND, command=command_line(args, "sft"), cwd=str(out),
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
    output_dir = Path(plan.cwd) if plan.cwd else Path(job.resolved_output_dir())
    output_dir.mkdir(parents=True, exist_ok=True)
    datasets = write_sft_datasets(job, output_dir)
    result = execute_plan(plan, output_dir)
    result.artifacts.update(datasets)
    return result
