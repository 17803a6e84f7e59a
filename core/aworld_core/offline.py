"""Telemetry and hub lookups off in every process the project launches.

Libraries the backends pull in phone home by default: vLLM posts usage statistics
(``vllm/usage/usage_lib.py``), Ray reports cluster usage, the HuggingFace hub client sends
telemetry and resolves model names over the network unless told it is offline, and Chromium runs
background services (its switches are in ``aworld_gaia_env.browser_launch``). A training job on
local paths needs none of it, and the project promises that tests, the demo and benchmarks send
nothing beyond loopback. So every launch plan (``aworld_core.jobs.plan_job``, shown by
``--dry-run``), every server the core starts (vLLM, a job's tool environment) and every in-process
entry point gets these variables.

Two groups, because they differ in what they cost a user:

* :data:`TELEMETRY_OFF` -- usage statistics and update checks. Always added: nothing a job does
  depends on them.
* :data:`HUB_OFFLINE` -- the HuggingFace libraries resolve nothing over the network. Added only
  when the job names local paths (:func:`job_uses_hub`): a job whose model is a hub id
  (``Qwen/Qwen2-0.5B``) or whose dataset is a hub name needs the hub, so it gets only the first
  group, and the plan says so.

A user opts back in with ``AWORLD_ALLOW_TELEMETRY=1`` (then nothing is added) or by setting one of
the variables themselves: a value already in the environment is never overwritten.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

#: variable -> value that turns a library's usage reporting or update check off
TELEMETRY_OFF: dict[str, str] = {
    "DO_NOT_TRACK": "1",  # the cross-tool convention; vLLM honours it
    "VLLM_NO_USAGE_STATS": "1",  # vLLM's usage statistics (usage_lib.py posts to stats.vllm.ai)
    "VLLM_DO_NOT_TRACK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",  # Ray's usage reporting (verl, AReaL)
    "HF_HUB_DISABLE_TELEMETRY": "1",  # huggingface_hub / transformers / datasets telemetry
    "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",  # ms-swift's web UI pulls gradio in
    "OPENAI_AGENTS_DISABLE_TRACING": "1",  # the OpenAI Agents SDK posts traces to the hosted API by default
}

#: variable -> value that keeps the HuggingFace libraries off the network (local paths only)
HUB_OFFLINE: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

#: every opt-out, for a job on local paths
OFFLINE_ENV: dict[str, str] = {**TELEMETRY_OFF, **HUB_OFFLINE}

OPT_IN_VAR = "AWORLD_ALLOW_TELEMETRY"


def telemetry_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """The user asked for telemetry and hub lookups (``AWORLD_ALLOW_TELEMETRY=1``)."""
    env = os.environ if environ is None else environ
    return env.get(OPT_IN_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


# what this process set itself (apply_offline_env, offline_env_applied): such a value is ours, not
# the user's choice, so a plan made afterwards still lists it
_APPLIED: dict[str, str] = {}


def _set_by_user(key: str, env: Mapping[str, str]) -> bool:
    return key in env and _APPLIED.get(key) != env[key]


def offline_env(environ: Mapping[str, str] | None = None, *, hub: bool = True) -> dict[str, str]:
    """The opt-outs to add to a child process's environment: those of :data:`OFFLINE_ENV` (only
    :data:`TELEMETRY_OFF` when ``hub`` is False) that the user did not set in ``environ``
    (default ``os.environ``); none when the user opted in."""
    env = os.environ if environ is None else environ
    if telemetry_allowed(env):
        return {}
    wanted = OFFLINE_ENV if hub else TELEMETRY_OFF
    return {key: value for key, value in wanted.items() if not _set_by_user(key, env)}


def with_offline_env(
    env: Mapping[str, str], base: Mapping[str, str] | None = None, *, hub: bool = True
) -> dict[str, str]:
    """``env`` (what a launcher adds to a child's environment) plus the opt-outs neither ``env``
    nor ``base`` (default ``os.environ``, what the child inherits) sets."""
    merged = {**(os.environ if base is None else base), **env}
    return {**offline_env(merged, hub=hub), **env}


def _apply(added: Mapping[str, str]) -> dict[str, str]:
    new = {key: value for key, value in added.items() if key not in os.environ}
    os.environ.update(new)
    _APPLIED.update(new)
    return new


def apply_offline_env(*, hub: bool = True) -> dict[str, str]:
    """Set the opt-outs in this process for good (an entry point that runs in-process, such as
    the in-process vLLM engine); call it before the library that reads them is imported
    (huggingface_hub reads ``HF_HUB_OFFLINE`` once, at import). Returns what it set."""
    return _apply(offline_env(hub=hub))


@contextlib.contextmanager
def offline_env_applied(job: Any | None = None) -> Iterator[dict[str, str]]:
    """The opt-outs set in this process while the block runs (for a job: :func:`job_offline_env`),
    then removed again: the CLI and ``AgentTrainer`` wrap a run in it, so an in-process trainer,
    a model build and every child process (the tool environment, a vLLM server) inherit them,
    and a program that calls the core keeps its own environment afterwards."""
    new = _apply(offline_env() if job is None else job_offline_env(job))
    try:
        yield new
    finally:
        for key, value in new.items():
            if os.environ.get(key) == value:
                os.environ.pop(key, None)
            if _APPLIED.get(key) == value:
                del _APPLIED[key]


def job_uses_hub(job: Any) -> bool:
    """Whether the job needs the HuggingFace hub: its model or tokenizer is a hub id (not a
    local path), or a dataset section names neither a file nor a registered dataset."""
    from aworld_core.config import names_local_path

    base = job.base_dir or os.getcwd()
    model = getattr(job, "model", None)
    if model is not None:
        if not model.build and model.path and not names_local_path(model.path, base):
            return True
        if model.tokenizer and not names_local_path(model.tokenizer, base):
            return True
    sections = [getattr(job, role, None) for role in ("train_dataset", "test_dataset")]
    named = [s.name for s in sections if s is not None and s.path is None and s.name]
    if named:
        from aworld_core.plugins import get_plugin_manager

        catalog = get_plugin_manager().catalog()
        if any(catalog.get("dataset", name) is None for name in named):
            return True
    return False


def job_offline_env(job: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The opt-outs for a job's processes: all of them, or only :data:`TELEMETRY_OFF` when the
    job needs the hub (:func:`job_uses_hub`)."""
    return offline_env(environ, hub=not job_uses_hub(job))


def plan_note(job: Any, added: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str:
    """One line for a launch plan saying what was turned off and how to opt back in."""
    env = os.environ if environ is None else environ
    if telemetry_allowed(env):
        return f"telemetry and hub lookups allowed ({OPT_IN_VAR}=1): no opt-out variables added"
    hub = "" if any(k in added for k in HUB_OFFLINE) or not job_uses_hub(job) else (
        "; the HuggingFace hub stays reachable because the job names a hub model or dataset"
    )
    return (f"telemetry off in every launched process (the variables above; set {OPT_IN_VAR}=1, or any of "
            f"them yourself, to opt back in){hub}")
