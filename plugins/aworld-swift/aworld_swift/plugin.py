"""aworld-swift's hooks: the ``swift`` backend (ms-swift multi-turn GRPO).

Planning imports nothing heavy (``--list`` and ``--dry-run`` work without ms-swift installed);
launching converts the data and runs ``swift rlhf`` (see :mod:`aworld_swift.launch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_core.specs import BackendSpec

NAME = "swift"


@hookimpl
def register_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            NAME,
            "ms-swift multi-turn GRPO (runs on a CPU with plain transformers generation)",
            framework="swift",
            install_hint="pip install 'aworld-swift[swift]' (in its own environment: ms-swift pins trl<1.0)",
        )
    ]


@hookimpl
def plan_launch(backend: str, job: Any, output_dir: Path) -> LaunchPlan | None:
    if backend != NAME:
        return None
    if job.sft is not None:  # SFT on collected trajectories (aworld_swift.sft)
        from aworld_swift.sft import build_sft_plan

        return build_sft_plan(job, output_dir)
    from aworld_swift.launch import build_plan

    return build_plan(job, output_dir)


@hookimpl
def launch_trainer(backend: str, job: Any, plan: LaunchPlan) -> TrainResult | None:
    if backend != NAME:
        return None
    if job.sft is not None:
        from aworld_swift.sft import launch_sft

        return launch_sft(job, plan)
    from aworld_swift.launch import launch

    return launch(job, plan)
