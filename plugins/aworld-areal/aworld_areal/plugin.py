"""aworld-areal's hooks: the ``areal`` backend (AReaL 1.0.4 asynchronous GRPO), and the rollout of
agents written against the OpenAI API (``workflow.openai_agent``)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import LaunchPlan
from aworld_core.specs import BackendSpec

NAME = "areal"
CONFIG_FILE = "areal_config.yaml"
JOB_FILE = "aworld_job.json"


@hookimpl
def register_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            NAME,
            "AReaL asynchronous GRPO with whole multi-turn AWorld episodes",
            framework="areal",
            install_hint="pip install 'aworld-areal[areal]'",
            requires_gpu=True,
        )
    ]


def _gpus(backend: Any) -> int | None:
    """GPUs an allocation string such as ``sglang:d2p1t4`` asks for (d * p * t)."""
    if not isinstance(backend, str) or ":" not in backend:
        return None
    dims = dict(re.findall(r"([a-z])(\d+)", backend.split(":", 1)[1]))
    if not dims:
        return None
    count = 1
    for value in dims.values():
        count *= int(value)
    return count


@hookimpl(tryfirst=True)
def rollout(agent: Any, sample: Any, llm: Any, context: Any) -> Any:
    """Run an OpenAI-API agent (``workflow.openai_agent``) through the gateway; pass on any other agent."""
    from aworld_areal.openai_agent import OpenAIAgent, run_openai_episode

    if not isinstance(agent, OpenAIAgent):
        return None
    return run_openai_episode(agent, sample, llm, context)


@hookimpl
def launch_trainer(backend: str, job: Any, plan: LaunchPlan) -> None:
    """Refuse to launch a job AReaL cannot train; otherwise the core's launcher runs the plan."""
    if backend != NAME:
        return None
    from aworld_areal.config import missing_inputs
    from aworld_core.errors import UsageError

    problems = missing_inputs(job)
    if problems:
        raise UsageError("; ".join(problems))
    return None


@hookimpl
def plan_launch(backend: str, job: Any, output_dir: Path) -> LaunchPlan | None:
    if backend != NAME:
        return None
    from aworld_areal.config import areal_installed, build_areal_config, missing_inputs, validate_areal_config

    out = Path(output_dir).resolve()
    config, _ = build_areal_config(job, out)
    notes = [f"cannot launch yet: {problem}" for problem in missing_inputs(job)]
    notes.append(
        f"AReaL scheduler: {config['scheduler']['type']} (single-controller mode; this command is the controller)"
    )
    rollout_gpus, actor_gpus = _gpus(config["rollout"].get("backend")), _gpus(config["actor"].get("backend"))
    if rollout_gpus and actor_gpus:
        notes.append(
            f"needs {rollout_gpus + actor_gpus} GPUs: rollout {config['rollout']['backend']}, "
            f"actor {config['actor']['backend']} (AReaL trains only with an SGLang or vLLM server)"
        )
    if areal_installed():
        validate_areal_config(config)
    else:
        notes.append(
            "AReaL is not installed in this environment, so the config was not checked against its "
            "GRPOConfig; install it with: pip install 'aworld-areal[areal]'"
        )
    from aworld_core.secrets import public_job_dump

    job_data = public_job_dump(job)  # secrets as {"env": NAME}: the launch exports them to the workers
    if job_data.get("base_dir") is None:
        # the workers start in the output directory: relative paths in the job stay relative to here
        job_data["base_dir"] = os.getcwd()
    command = [
        sys.executable,
        "-m",
        "aworld_areal.train",
        "--config",
        str(out / CONFIG_FILE),
        "--job",
        str(out / JOB_FILE),
    ]
    return LaunchPlan(
        backend=NAME,
        command=command,
        cwd=str(out),
        files={
            CONFIG_FILE: yaml.safe_dump(config, sort_keys=False),
            JOB_FILE: json.dumps(job_data, indent=2) + "\n",
        },
        config=config,
        notes=notes,
    )
