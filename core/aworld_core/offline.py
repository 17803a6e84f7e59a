"""Telemetry and hub lookups off in every process the project launches.

Libraries the backends pull in phone home by default: vLLM posts usage statistics
(``vllm/usage/usage_lib.py``), Ray reports cluster usage, the HuggingFace hub client resolves
model names over the network unless told it is offline, and Chromium runs background services.
A training job on local paths needs none of it, and the project promises that tests, the demo and
benchmarks send nothing beyond loopback. So every launch plan and every server the core starts
gets :data:`OFFLINE_ENV` merged into its environment.

A user opts back in with ``AWORLD_ALLOW_TELEMETRY=1`` (then nothing is added) or by setting one of
the variables themselves: a value already in the environment is never overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: variable -> value that turns a library's telemetry or network lookups off
OFFLINE_ENV: dict[str, str] = {
    "DO_NOT_TRACK": "1",  # the cross-tool convention; vLLM honours it
    "VLLM_NO_USAGE_STATS": "1",  # vLLM's usage statistics (usage_lib.py)
    "VLLM_DO_NOT_TRACK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",  # Ray's usage reporting (verl)
    "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    "HF_HUB_OFFLINE": "1",  # no hub lookups: every model and tokenizer path is local
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "offline",  # a report_to wandb writes locally unless the user opts in
    "TQDM_DISABLE_TELEMETRY": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
}

OPT_IN_VAR = "AWORLD_ALLOW_TELEMETRY"


def telemetry_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """The user asked for telemetry and hub lookups (``AWORLD_ALLOW_TELEMETRY=1``)."""
    env = os.environ if environ is None else environ
    return env.get(OPT_IN_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def offline_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The opt-outs to add to a child process's environment: those of :data:`OFFLINE_ENV` that
    ``environ`` (default ``os.environ``) does not set already; none when the user opted in."""
    env = os.environ if environ is None else environ
    if telemetry_allowed(env):
        return {}
    return {key: value for key, value in OFFLINE_ENV.items() if key not in env}


def with_offline_env(env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` plus the opt-outs neither ``env`` nor ``base`` (default ``os.environ``) sets."""
    merged = {**(os.environ if base is None else base), **env}
    return {**offline_env(merged), **env}


def apply_offline_env() -> None:
    """Set the opt-outs in this process (for entry points that run in-process)."""
    os.environ.update(offline_env())
