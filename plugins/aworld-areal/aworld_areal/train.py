"""The AReaL training entry: ``python -m aworld_areal.train --config areal_config.yaml --job aworld_job.json``.

It is AReaL's single-controller script (what ``examples/math/gsm8k_rl.py`` is upstream): load the
GRPO config with ``load_expr_config`` (extra ``key=value`` arguments are hydra overrides, as in any
AReaL script), turn the job's datasets into HuggingFace datasets, and hand ``PPOTrainer`` the
workflow as an import path with JSON-able kwargs. ``scheduler.type`` (local, ray, slurm) in the
config decides where AReaL starts its rollout and training workers.

``AworldWorkflow`` forms each prompt's GRPO group itself (``gconfig.n_samples`` members, failed ones
kept as masked rows), so ``PPOTrainer`` gets ``gconfig.n_samples = 1`` (and ``eval_gconfig``): AReaL's
``GroupedRolloutWorkflow`` would otherwise run the group ``n_samples`` times and drop failed members.
The workflow's kwargs keep the configured ``n_samples``. ``watch_rollouts`` lets the workflow's
``rollout.max_failed_steps`` stop reach ``PPOTrainer``'s ``RolloutController`` (``aworld_areal.stopping``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

from aworld_areal.config import RUN_OPTIONS_KEY, WORKFLOW_KEY, run_options, workflow_options
from aworld_core.config import JobConfig, load_job_config
from aworld_core.errors import UsageError

WORKFLOW = "aworld_areal.workflow.AworldWorkflow"
TRAJECTORIES = "trajectories.jsonl"


def split_job_arg(argv: list[str]) -> tuple[str, list[str]]:
    """``(job file, the rest)``: ``--job`` is ours, everything else goes to AReaL's parser."""
    rest: list[str] = []
    job: str | None = None
    it = iter(argv)
    for arg in it:
        if arg == "--job":
            job = next(it, None)
            if job is None:
                raise UsageError("--job needs the path of the job file (aworld_job.json)")
        elif arg.startswith("--job="):
            job = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if not job:
        raise UsageError("missing --job <aworld_job.json>: the AWorld job this AReaL run trains")
    return job, rest


def workflow_kwargs(
    job: JobConfig, gconfig: Any, tokenizer_path: str, *, eval: bool = False, groups_per_step: int | None = None
) -> dict[str, Any]:
    """``AworldWorkflow``'s kwargs: plain JSON, so they cross AReaL's RPC to the rollout workers.

    ``gconfig.n_samples`` is the group size the workflow runs; ``groups_per_step`` (the train
    batch size) is what ``rollout.max_failed_steps`` counts as one step.
    """
    options = workflow_options(job, job.backend_section("areal").get(WORKFLOW_KEY) or {})
    eval_temperature = options.pop("eval_temperature", None)
    generation = asdict(gconfig) if not isinstance(gconfig, dict) else dict(gconfig)
    if eval and eval_temperature is not None:
        generation["temperature"] = float(eval_temperature)
    if groups_per_step is not None:
        options["groups_per_step"] = int(groups_per_step)
    return {
        "job": job.model_dump_json(),
        "gconfig": generation,
        "tokenizer": tokenizer_path,
        **{k: v for k, v in options.items() if v is not None},
    }


def check_group_norm(config: Any) -> None:
    """``UsageError`` when a group-level reward/advantage normalization slices by a size other than
    ``gconfig.n_samples`` (each prompt's group is exactly that many consecutive rows)."""
    n = config.gconfig.n_samples
    for name in ("reward_norm", "adv_norm"):
        norm = getattr(config.actor, name, None)
        if norm is None or "group" not in (norm.mean_level, norm.std_level) or norm.group_size == n:
            continue
        raise UsageError(
            f"actor.{name}.group_size is {norm.group_size} but gconfig.n_samples is {n}: AReaL normalizes "
            f"consecutive slices of group_size rows and every prompt's group is gconfig.n_samples rows, so "
            f"the groups would be mixed. Set actor.{name}.group_size to {n} (or drop the override: it "
            f"defaults to ${{gconfig.n_samples}})"
        )


def hand_groups_to_workflow(config: Any) -> None:
    """Give ``PPOTrainer`` ``n_samples = 1`` (train and eval): the workflow runs the group itself."""
    config.gconfig.n_samples = 1
    if getattr(config, "eval_gconfig", None) is not None:
        config.eval_gconfig.n_samples = 1


@dataclass
class Prepared:
    """Everything ``PPOTrainer`` is given, built before any worker starts."""

    config: Any
    train_dataset: Any
    valid_dataset: Any
    workflow_kwargs: dict[str, Any]
    eval_workflow_kwargs: dict[str, Any] | None
    group_size: int  # gconfig.n_samples as configured: the rows per prompt (PPOTrainer's config says 1)
    job: Any = None  # the JobConfig
    test_samples: list[Any] | None = None  # the job's test_dataset (held-out evaluation), if any


def prepare(argv: list[str]) -> Prepared:
    """Load AReaL's config (``load_expr_config``) and the job; build datasets and workflow kwargs."""
    job_path, areal_args = split_job_arg(argv)
    from areal.api.cli_args import GRPOConfig, load_expr_config

    from aworld_areal.config import missing_inputs
    from aworld_areal.data import hf_dataset
    from aworld_core.datasets import load_dataset_section

    config, _ = load_expr_config(areal_args, GRPOConfig)
    job = load_job_config(job_path)
    problems = missing_inputs(job)
    if problems:
        raise UsageError(f"the job in {job_path} cannot train: " + "; ".join(problems))
    check_group_norm(config)
    train = hf_dataset(load_dataset_section(job.train_dataset, job.base_dir))
    valid = None
    test = load_dataset_section(job.test_dataset, job.base_dir) if job.test_dataset is not None else None
    if test is not None and config.valid_dataset is not None:
        valid = hf_dataset(test)
    group_size = config.gconfig.n_samples
    kwargs = workflow_kwargs(job, config.gconfig, config.tokenizer_path, groups_per_step=config.train_dataset.batch_size)
    if run_options(job.backend_section("areal").get(RUN_OPTIONS_KEY))["trajectories"]:
        kwargs["trajectories"] = os.path.abspath(TRAJECTORIES)  # AReaL's processes start in the output directory
    eval_kwargs = workflow_kwargs(job, config.eval_gconfig, config.tokenizer_path, eval=True) if valid is not None else None
    hand_groups_to_workflow(config)
    return Prepared(config, train, valid, kwargs, eval_kwargs, group_size, job=job, test_samples=test)


def main(argv: list[str] | None = None) -> None:
    """Prepare, then run ``PPOTrainer`` with the vLLM server and the job's outputs around it
    (``aworld_areal.run``)."""
    from aworld_core.offline import apply_offline_env

    apply_offline_env()
    prepared = prepare(list(sys.argv[1:] if argv is None else argv))
    from aworld_areal.run import ArealRun

    ArealRun(prepared).run()


if __name__ == "__main__":
    main()
