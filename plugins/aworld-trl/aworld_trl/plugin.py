"""aworld-trl's registration: the ``trl`` backend (the default when installed), one object, and
TRL's reward calling convention (``aworld_trl.rewards``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import LaunchPlan
from aworld_core.specs import SAMPLING_FIELDS, Backend, Capabilities, RewardConvention

NAME = "trl"
JOB_FILE = "job.yaml"


@hookimpl
def register_backends() -> list[Backend]:
    return [
        Backend(
            NAME,
            "TRL GRPO in this process, with AWorld rollouts (CPU or one GPU)",
            planner=plan,
            launcher=launch,
            sft_planner=plan_sft,
            sft_launcher=launch,
            framework="trl",
            install_hint="pip install aworld-trl",
            capabilities=Capabilities(
                sampling=SAMPLING_FIELDS, lora=True, resume=True, segments=True, asynchronous=True,
                multi_policy=True,  # LoRA adapters on one base (aworld_trl.multi_policy)
            ),
        )
    ]


@hookimpl
def register_reward_conventions() -> list[RewardConvention]:
    from aworld_trl.rewards import TRL

    return [TRL]


def plan(job: Any, output_dir: Path) -> LaunchPlan:
    """GRPO in-process: bad options, moved keys, ZeRO-3 / FSDP refused before anything starts."""
    from aworld_trl.options import check_section, grpo_arguments

    check_section(job)
    # what GRPOConfig gets: backends.trl with the job's rollout.sampling mapped onto its keys
    return _plan(job, output_dir, {"grpo_config": grpo_arguments(job)})


def plan_sft(job: Any, output_dir: Path) -> LaunchPlan:
    """SFT on collected trajectories: TRL's SFTTrainer (``aworld_trl.sft``)."""
    from aworld_trl.sft import check_sft_section

    check_sft_section(job)
    return _plan(job, output_dir, {"sft_config": job.backend_section(NAME)}, "aworld_trl.sft:train")


def launch(job: Any, plan: LaunchPlan) -> Any:
    """Run the plan in this process with the job the core parsed and validated: the entry point
    gets that object, not the plan's dump of it parsed again (the dump stays the plan's record,
    ``job.yaml`` and what ``--dry-run`` prints, and what a caller of the entry point passes)."""
    from aworld_core.launch import execute_plan

    kwargs = {**plan.entrypoint_kwargs, "job": job}
    return execute_plan(plan.model_copy(update={"entrypoint_kwargs": kwargs}), Path(kwargs["output_dir"]))


def _plan(job: Any, output_dir: Path, config: dict[str, Any],
          entrypoint: str = "aworld_trl.trainer:train") -> LaunchPlan:
    from aworld_core.secrets import public_job_dump

    job_data = public_job_dump(job)  # secrets as {"env": NAME}: the launch exports them first
    return LaunchPlan(
        backend=NAME,
        entrypoint=entrypoint,
        entrypoint_kwargs={"job": job_data, "output_dir": str(output_dir)},
        files={JOB_FILE: yaml.safe_dump(job_data, sort_keys=False)},
        config=config,
    )
