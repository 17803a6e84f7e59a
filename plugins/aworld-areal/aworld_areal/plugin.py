"""aworld-areal's registration: the ``areal`` backend (AReaL 1.0.4 asynchronous GRPO), one object.
(Agents written against the OpenAI API are the job's ``agent.openai_agent``, run by the core's
``rollout`` hook on every backend.)"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_core.specs import SAMPLING_FIELDS, Backend, Capabilities

NAME = "areal"
CONFIG_FILE = "areal_config.yaml"
JOB_FILE = "aworld_job.json"


@hookimpl
def register_backends() -> list[Backend]:
    return [
        Backend(
            NAME,
            "AReaL asynchronous GRPO with whole multi-turn AWorld episodes (on a CPU with a plain vLLM "
            "server: backends.areal.vllm_server; AReaL's own SGLang/vLLM servers need GPUs)",
            planner=plan,
            launcher=launch,
            framework="areal",
            install_hint="pip install 'aworld-areal[areal]'",
            capabilities=Capabilities(sampling=SAMPLING_FIELDS, resume=True, segments=True, asynchronous=True),
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


def launch(job: Any, plan: LaunchPlan) -> TrainResult:
    """Refuse to launch a job AReaL cannot train (``--dry-run`` still shows its plan, with what is
    missing as notes); otherwise the core's launcher runs the plan."""
    from aworld_areal.config import missing_inputs
    from aworld_core.errors import UsageError
    from aworld_core.launch import execute_plan

    problems = missing_inputs(job)
    if problems:
        raise UsageError("; ".join(problems))
    return execute_plan(plan, Path(job.resolved_output_dir()).absolute())


def plan(job: Any, output_dir: Path) -> LaunchPlan:
    from aworld_areal.config import (
        SERVER_FILE,
        SERVER_LOG_NAME,
        SPEC_ENV,
        SPMD,
        areal_installed,
        build_areal_launch,
        missing_inputs,
        validate_areal_config,
    )

    out = Path(output_dir).resolve()
    launch = build_areal_launch(job, out)
    config = launch.config
    notes = [f"cannot launch yet: {problem}" for problem in missing_inputs(job)]
    env: dict[str, str] = {}
    files: dict[str, str] = {}
    if launch.mode == SPMD:
        notes.append("AReaL SPMD mode: this command is the one trainer process (rank 0 of 1); no scheduler")
        env.update(spmd_env(launch.server_address))
    else:
        notes.append(
            f"AReaL scheduler: {config['scheduler']['type']} (single-controller mode; this command is the controller)"
        )
    if not launch.gpu and "TORCHDYNAMO_DISABLE" not in os.environ:
        # AReaL wraps its logprob gathering in torch.compile, which on a CPU compiles C++ for every
        # new batch shape (the first step of a tiny model took 78 s instead of ~3 s on this project's
        # 2-core machine); eager is faster for the models a CPU trains. Workers inherit it.
        env["TORCHDYNAMO_DISABLE"] = "1"
    if launch.server is not None:
        files[SERVER_FILE] = launch.server.model_dump_json(indent=2) + "\n"
        env[SPEC_ENV] = str(out / SERVER_FILE)
        notes.extend(server_notes(launch, out / SERVER_LOG_NAME))
    else:
        rollout_gpus, actor_gpus = _gpus(config["rollout"].get("backend")), _gpus(config["actor"].get("backend"))
        if rollout_gpus and actor_gpus:
            notes.append(
                f"needs {rollout_gpus + actor_gpus} GPUs: rollout {config['rollout']['backend']}, "
                f"actor {config['actor']['backend']} (AReaL's own SGLang or vLLM server; on a CPU set "
                f"backends.areal.vllm_server)"
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
        env=env,
        files={
            CONFIG_FILE: yaml.safe_dump(config, sort_keys=False),
            JOB_FILE: json.dumps(job_data, indent=2) + "\n",
            **files,
        },
        config=config,
        notes=notes,
    )


def spmd_env(server_address: str | None) -> dict[str, str]:
    """The environment AReaL's SPMD mode reads (what its launcher and ``torchrun`` would set for
    one trainer process), and where the rollout server is."""
    from aworld_core.vllm_server import free_port

    env = {
        "AREAL_SPMD_MODE": "1",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    if server_address:
        env["AREAL_LLM_SERVER_ADDRS"] = server_address
    return env


def server_notes(launch: Any, log: Path) -> list[str]:
    """What ``--dry-run`` says about the vLLM server: its command and environment, or its URL."""
    import shlex

    from aworld_areal.config import SPMD

    spec = launch.server
    if spec.url:
        return [f"vLLM server: {spec.url} (running; nothing is started or stopped)"]
    spmd = launch.mode == SPMD
    who = ("aworld_areal.train starts it before AReaL's trainer and stops it when the run ends" if spmd else
           "AReaL's rollout worker starts it (launch_server) on the host and port AReaL picks, and tears it down")
    added = spec.child_env({})
    return [
        f"vLLM server ({who}; log {log}):",
        "  " + shlex.join(spec.argv(spec.port)) + ("" if spmd else "   (--host/--port: AReaL's)"),
        "  its environment adds: " + " ".join(f"{k}={v}" for k, v in sorted(added.items())),
    ]
