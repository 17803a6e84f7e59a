"""Running a job: choose its backend, plan the launch, and launch it.

Shared by the CLI (``aworld_core.run``) and ``AgentTrainer``, so both behave the same.
"""

from __future__ import annotations

import asyncio
import shlex
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_core.errors import AworldError, UsageError

if TYPE_CHECKING:  # config pulls pydantic and the agent model: imported when used, not here
    from aworld_core.config import JobConfig
    from aworld_core.schemas import LaunchPlan

def choose_backend(requested: str | None, job: JobConfig) -> str:
    from aworld_core.plugins import backend_install_hint, get_plugin_manager
    from aworld_core.settings import get_settings

    name = requested or job.backend
    catalog = get_plugin_manager().catalog()
    if name is None:
        default = get_settings().default_backend
        if default not in catalog.items("backend"):
            installed = ", ".join(sorted(catalog.items("backend"))) or "none"
            raise UsageError(
                f"no backend given (--backend or 'backend:' in the config) and the default backend "
                f"'{default}' is not installed; {backend_install_hint(default)}, or "
                f"pick one of the installed backends: {installed}"
            )
        name = default
    catalog.backend(name)  # raises UnknownBackendError / PluginConflictError
    return name


def format_plan(plan: LaunchPlan, job: JobConfig, output_dir: Path) -> str:
    import yaml

    from aworld_core.launch import plan_cwd
    from aworld_core.secrets import mask, mask_value, public_job_dump, register_job_secrets

    register_job_secrets(job)

    lines = [f"backend: {plan.backend}", f"output directory: {output_dir}"]
    if plan.command:
        lines.append("command line:")
        lines.append("  " + shlex.join(plan.command))
        lines.append(f"  (in {plan_cwd(plan, output_dir)})")
    if plan.entrypoint:
        lines.append(f"entry point (in-process): {plan.entrypoint}")
    if plan.env:
        lines.append("environment:")
        lines += [f"  {k}={mask_value(k, v)}" for k, v in sorted(plan.env.items())]
    for note in plan.notes:
        lines.append(f"note: {note}")
    for relative, text in plan.files.items():
        lines.append(f"--- file {output_dir / relative} ---")
        lines.append(text.rstrip("\n"))
    lines.append("--- resolved job config ---")
    lines.append(yaml.safe_dump(public_job_dump(job), sort_keys=False).rstrip("\n"))
    if plan.config:
        lines.append("--- resolved backend config ---")
        lines.append(yaml.safe_dump(plan.config, sort_keys=False).rstrip("\n"))
    # a secret that reached the plan anyway (a backend section, a plugin's file) is masked too
    return mask("\n".join(lines) + "\n")


def plan_job(backend: str, job: JobConfig) -> tuple[LaunchPlan, Path]:
    """The backend's ``LaunchPlan`` (its planner's, or its SFT planner's for a job with ``sft:``)
    and the job's output directory (always absolute)."""
    from aworld_core.plugins import get_plugin_manager
    from aworld_core.schemas import LaunchPlan
    from aworld_core.settings import get_settings

    output_dir = Path(job.resolved_output_dir(get_settings().output_root)).absolute()
    plan = get_plugin_manager().catalog().backend(backend).plan(job, output_dir)
    if not isinstance(plan, LaunchPlan):
        raise AworldError(
            f"backend '{backend}''s planner returned {type(plan).__name__}, not a LaunchPlan; "
            f"this is a bug in the plugin that registers it"
        )
    _add_offline_env(plan, job)
    return plan, output_dir


def _add_offline_env(plan: LaunchPlan, job: JobConfig) -> None:
    """Telemetry and (for a job on local paths) hub lookups off in what the plan launches, for
    every backend alike, so ``--dry-run`` shows them (``aworld_core.offline``)."""
    import os

    from aworld_core.offline import job_offline_env, plan_note

    added = job_offline_env(job, {**os.environ, **plan.env})
    plan.env = {**added, **plan.env}
    plan.notes.append(plan_note(job, added))


def launch_job(backend: str, job: JobConfig, plan: LaunchPlan) -> Any:
    """Check the framework, build the model if asked, start the job's environment, launch.

    Returns what the backend's launcher returned (its result object, or an exit code)."""
    from aworld_core.aio import maybe_await
    from aworld_core.imports import import_ref
    from aworld_core.offline import offline_env_applied
    from aworld_core.plugins import get_plugin_manager
    from aworld_core.settings import get_settings
    from aworld_core.validation import require_framework

    spec = get_plugin_manager().catalog().backend(backend)
    require_framework(backend)
    with offline_env_applied(job):  # the model build, the environment and an in-process trainer
        if job.model is not None and job.model.build and not Path(job.resolve_path(job.model.path)).exists():
            import_ref(job.model.build, job.base_dir)(job.resolve_path(job.model.path))
        _export_secrets(job)
        with job_environment(job):
            output_dir = Path(job.resolved_output_dir(get_settings().output_root)).absolute()
            result = spec.launch(job, plan, output_dir)
            return asyncio.run(maybe_await(result)) if asyncio.iscoroutine(result) else result


def job_environment(job: JobConfig) -> AbstractContextManager[Any]:
    """A context that runs the job's ``environment:`` (its serve command, its output in this
    process's log) while a training or evaluation runs; a no-op for a job without one."""
    import contextlib

    if job.environment is None:
        return contextlib.nullcontext()
    from aworld_core.environments import running_environment
    from aworld_core.plugins import get_plugin_manager
    from aworld_core.validation import environment_command

    command = environment_command(job)  # refuses an unknown environment
    spec = get_plugin_manager().catalog().get("environment", job.environment.name).spec
    return running_environment(
        command,
        servers=job.environment.servers,
        startup_timeout_s=job.environment.startup_timeout_s,
        name=job.environment.name,
        release=spec.release,
    )


def _export_secrets(job: JobConfig) -> None:
    """The job's secrets reach the backend's processes through their environment, never argv or
    a file: ``agent.llm_api_key`` as ``LLM_API_KEY``, MCP tokens as the variables their references
    in the plan files name (``aworld_core.secrets``)."""
    from aworld_core.secrets import export_secrets, install_log_masking, register_settings_secrets

    export_secrets(job)
    register_settings_secrets()
    install_log_masking()


_export_llm_api_key = _export_secrets  # its former name (the LLM key was its only secret)
