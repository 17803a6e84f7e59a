"""aworld-verl's hooks: the ``verl`` backend (plan and launch ``verl.trainer.main_ppo``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_core.specs import BackendSpec

NAME = "verl"


@hookimpl
def register_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            NAME,
            "verl PPO/GRPO with AWorld agent loops (Ray; vLLM/SGLang rollouts on GPUs, "
            "a vLLM server of its own on a CPU: backends.verl.aworld.rollout_server)",
            framework="verl",
            install_hint="pip install 'aworld-verl[verl]' (and vLLM: see the plugin README)",
            requires_gpu=False,
        )
    ]


@hookimpl
def plan_launch(backend: str, job: Any, output_dir: Path) -> LaunchPlan | None:
    if backend != NAME:
        return None
    if job.sft is not None:  # SFT on collected trajectories (aworld_verl.sft)
        from aworld_verl.sft import build_sft_plan

        return build_sft_plan(job, output_dir)
    from aworld_verl.launch import build_plan

    return build_plan(job, output_dir)


@hookimpl
def launch_trainer(backend: str, job: Any, plan: LaunchPlan) -> TrainResult | None:
    """Write the verl parquet files from the job's datasets, then run the planned command."""
    if backend != NAME:
        return None
    if job.sft is not None:
        from aworld_verl.sft import launch_sft

        return launch_sft(job, plan)
    from aworld_verl.launch import launch

    return launch(job, plan)
