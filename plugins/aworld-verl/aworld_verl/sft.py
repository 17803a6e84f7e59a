"""SFT on collected trajectories with verl's own SFT trainer (a job with an ``sft:`` section).

verl 0.9.1's trainer is ``verl.trainer.sft_trainer`` (hydra config ``sft_trainer_engine``; the
older ``fsdp_sft_trainer`` is gone), started with ``torchrun``. It reads parquet through
``MultiTurnSFTDataset``: a ``messages`` column (every assistant turn trained) and a ``tools``
column. The plan (``--dry-run``)::

    torchrun --standalone --nnodes=1 --nproc_per_node=<trainer.n_gpus_per_node> -m verl.trainer.sft_trainer
        data.train_files=[<out>/verl/sft/train.parquet] data.val_files=... data.messages_key=messages
        data.tools_key=tools model.path=<model.path> trainer.default_local_dir=<out>/checkpoints ...

``backends.verl`` (nested or dotted) wins over these. Launching converts ``sft.train``/``sft.val``
(episodes) to that parquet with ``aworld_verl.sft_rows`` first. verl renders the
messages with the model's chat template, so the token-exact form is refused here (use trl).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aworld_core.config import flatten_dotted
from aworld_core.errors import UsageError
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_verl.launch import BACKEND, _lookup, _merge, _pythonpath, hydra_value, run_with_datasets

TRAIN_PARQUET = "verl/sft/train.parquet"
VAL_PARQUET = "verl/sft/val.parquet"
ENTRY = "verl.trainer.sft_trainer"


def _check(job: Any) -> None:
    if job.sft.format == "tokens":
        raise UsageError(
            "sft.format: tokens is not available on verl: its SFT trainer renders messages with the chat template "
            "(MultiTurnSFTDataset). Use sft.format: messages (or auto), or the trl backend for token-exact SFT"
        )
    if job.model is not None and job.model.chat_template:
        raise UsageError(
            "model.chat_template is not passed to verl's SFT trainer (it renders with the tokenizer's own "
            "template); remove it, or set backends.verl.model.custom_chat_template yourself"
        )


def sft_overrides(job: Any, output_dir: Path) -> dict[str, Any]:
    out = output_dir.resolve()
    overrides: dict[str, Any] = {
        "data.train_files": [str(out / TRAIN_PARQUET)],
        "data.val_files": [str(out / VAL_PARQUET)] if job.sft.val else None,
        "data.messages_key": "messages",
        "data.tools_key": "tools",
        "data.truncation": "error",
        "trainer.default_local_dir": str(out / "checkpoints"),
        "trainer.project_name": "aworld",
        "trainer.experiment_name": job.name,
        "trainer.logger": ["console", *[r for r in job.logging.report_to if r != "console"]],
        "trainer.seed": job.seed,
    }
    if job.model is not None:
        overrides["model.path"] = job.resolve_path(job.model.path)
    return overrides


def build_sft_plan(job: Any, output_dir: Path) -> LaunchPlan:
    _check(job)
    overrides = _merge(sft_overrides(job, output_dir), flatten_dotted(job.backend_section(BACKEND)))
    gpus = _lookup(overrides, "trainer.n_gpus_per_node", 1)
    nodes = _lookup(overrides, "trainer.nnodes", 1)
    command = ["torchrun", "--standalone", f"--nnodes={nodes}", f"--nproc_per_node={gpus}", "-m", ENTRY]
    command += [f"{key}={hydra_value(value)}" for key, value in overrides.items()]
    out = output_dir.resolve()
    notes = [
        f"launch writes {out / TRAIN_PARQUET}" + (f" and {out / VAL_PARQUET}" if job.sft.val else "")
        + " from the sft: episode files (rows: messages, tools, data_source, task_id)",
        "every assistant turn is trained (verl's MultiTurnSFTDataset); filter the episodes first "
        "(python -m aworld_core.trajectories filter)",
    ]
    if job.model is None and _lookup(overrides, "model.path") is None:
        notes.insert(0, "the job lacks model.path (the model to fine-tune): set it before launching")
    if not job.sft.tools:
        notes.append("no sft.tools: the prompts are rendered without the agent's tool list")
    return LaunchPlan(backend=BACKEND, command=command, cwd=str(out),
                      env={"HYDRA_FULL_ERROR": "1", **_pythonpath(job)},
                      config=overrides, notes=notes)


def write_sft_datasets(job: Any, output_dir: Path) -> dict[str, str]:
    """The sft: episode files as verl multi-turn SFT parquet; returns what was written.

    Tool-call arguments stay dicts (chat templates render them with tojson); arrow stores them as
    one struct per file, so a key another tool uses reads back as null in this one.
    """
    from aworld_core.trajectories import write_job_sft_data
    from aworld_verl.sft_rows import sft_rows

    return write_job_sft_data(job, output_dir, sft_rows, {"train": TRAIN_PARQUET, "val": VAL_PARQUET})


def launch_sft(job: Any, plan: LaunchPlan) -> TrainResult:
    if job.model is None and plan.config.get("model.path") is None:
        raise UsageError("the verl backend cannot launch this SFT job: set model.path")
    return run_with_datasets(job, plan, write_sft_datasets)
