"""aworld-trl's hooks: the ``trl`` backend, the default when installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import LaunchPlan
from aworld_core.specs import BackendSpec

NAME = "trl"
JOB_FILE = "job.yaml"


@hookimpl
def register_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            NAME,
            "TRL GRPO in this process, with AWorld rollouts (CPU or one GPU)",
            framework="trl",
            install_hint="pip install aworld-trl",
        )
    ]


@hookimpl
def plan_launch(backend: str, job: Any, output_dir: Path) -> LaunchPlan | None:
    if backend != NAME:
        return None
    from aworld_trl.options import check_section, grpo_arguments

    if job.sft is not None:  # SFT on collected trajectories: TRL's SFTTrainer (aworld_trl.sft)
        from aworld_trl.sft import check_sft_section

        check_sft_section(job)
        config = {"aworld_mode": "sft", "sft_config": job.backend_section(NAME)}
    else:
        check_section(job)  # bad options, moved keys, ZeRO-3 / FSDP: refused before anything starts
        # what GRPOConfig gets: backends.trl with the job's rollout.sampling mapped onto its keys
        config = {"grpo_config": grpo_arguments(job)}
    from aworld_core.secrets import public_job_dump

    job_data = public_job_dump(job)  # secrets as {"env": NAME}: the launch exports them first
    return LaunchPlan(
        backend=NAME,
        entrypoint="aworld_trl.trainer:train",
        entrypoint_kwargs={"job": job_data, "output_dir": str(output_dir)},
        files={JOB_FILE: yaml.safe_dump(job_data, sort_keys=False)},
        config=config,
    )
