"""Carrying out a LaunchPlan: write its files, then call its entry point or run its command."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aworld_core.errors import AworldError
from aworld_core.imports import import_ref
from aworld_core.schemas import LaunchPlan, TrainResult


def write_plan_files(plan: LaunchPlan, output_dir: Path) -> dict[str, str]:
    written = {}
    for relative, text in plan.files.items():
        target = output_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written[relative] = str(target)
    return written


def plan_cwd(plan: LaunchPlan, output_dir: Path) -> Path:
    """Where ``plan.command`` runs: ``plan.cwd`` (a relative one is inside the output directory),
    else the output directory; always absolute."""
    out = Path(output_dir).absolute()
    return out / plan.cwd if plan.cwd else out


@contextlib.contextmanager
def _plan_env_in_process(env: dict[str, str]) -> Iterator[None]:
    """``plan.env`` for an in-process entry point, as a command gets it: set while it runs (the
    telemetry opt-outs among them), what was there before put back after, so a program that
    trains through ``AgentTrainer`` keeps its own environment afterwards."""
    before = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def execute_plan(plan: LaunchPlan, output_dir: Path) -> TrainResult:
    """Run ``plan``; a non-zero exit or an exception in the entry point is reported, not hidden."""
    output_dir = Path(output_dir).absolute()
    output_dir.mkdir(parents=True, exist_ok=True)
    artifacts = write_plan_files(plan, output_dir)
    if plan.entrypoint:
        with _plan_env_in_process(plan.env):  # before the entry point imports its framework
            func = import_ref(plan.entrypoint)
            outcome: Any = func(**plan.entrypoint_kwargs)
        if isinstance(outcome, TrainResult):
            return outcome
        metrics = outcome if isinstance(outcome, dict) else {}
        return TrainResult(backend=plan.backend, output_dir=str(output_dir), metrics=metrics, artifacts=artifacts)
    if plan.command:
        env = {**os.environ, **plan.env}
        cwd = plan_cwd(plan, output_dir)
        cwd.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(plan.command, cwd=cwd, env=env, check=False)
        if proc.returncode != 0:
            raise AworldError(
                f"backend '{plan.backend}' command failed with exit code {proc.returncode}: "
                f"{' '.join(plan.command)}"
            )
        return TrainResult(backend=plan.backend, output_dir=str(output_dir), artifacts=artifacts)
    raise AworldError(f"backend '{plan.backend}' returned a plan with neither a command nor an entry point")
