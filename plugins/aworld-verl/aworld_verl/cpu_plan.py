"""The verl plan's ``backends.verl.aworld`` options, and what they add to the verl command.

``backends.verl`` holds verl's own hydra keys; its ``aworld`` sub-section (taken out before the
keys reach verl) holds ours (:class:`VerlOptions`):

* ``device``: ``auto`` (default: ``cpu`` when this machine has no GPU), ``cpu`` or ``gpu``. On
  ``gpu`` without a ``rollout_server`` the plan is verl's own (its vLLM replica), unchanged.
* ``rollout_server``: a vLLM OpenAI server the rollout uses instead of verl's own replica
  (``aworld_core.vllm_server.VllmServerSpec``: ``url`` of a running one, or ``python`` /
  ``command`` to start one). Required on ``cpu`` (``python`` defaults to ``$AWORLD_VLLM_PYTHON``);
  on ``gpu`` it switches the rollout to the external server (a separate inference fleet).
* evaluation and plotting around the run (``eval_before``, ``eval_after``, ``plot``, ...).

What the CPU plan sets (:func:`cpu_overrides`), each for a reason measured or read in verl 0.9.1
(``docs/backend-verl.md``, "verl on a CPU"): ``VERL_PLATFORM=cpu`` in every process; one trainer
process on one *logical* Ray GPU (verl's pools hard-code ``use_gpu=True``); eager SDPA attention
without remove-padding (flash-attention is CUDA-only), float32 FSDP without torch.compile; one
agent-loop worker, one reward worker, one TransferQueue storage unit and no dataloader workers
(verl's defaults start eight of each); no Ray dashboard and no pre-started Ray workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aworld_core.errors import ConfigError, UsageError
from aworld_core.vllm_server import VllmServerSpec, free_port, gpu_visible

SECTION = "aworld"
RAY_LOGICAL_CPUS = 16  # logical: verl's bundles reserve 3 CPUs per trainer process, and every actor 1
POLL_INTERVAL_S = 0.25  # verl's ReplayBuffer(poll_interval=2.0), passed through aworld_replay_buffer


class VerlOptions(BaseModel):
    """``backends.verl.aworld``: how the verl backend runs around ``main_ppo``."""

    model_config = ConfigDict(extra="forbid")

    device: Literal["auto", "cpu", "gpu"] = Field(
        default="auto", description="auto: cpu when no GPU is visible on this machine (the plan is made where it runs)."
    )
    rollout_server: VllmServerSpec | None = Field(
        default=None, description="The vLLM server the rollout uses (url, or python/command to start one); needed on a CPU."
    )
    eval_before: bool = Field(default=True, description="Greedy held-out evaluation of model.path before training.")
    eval_after: bool = Field(default=True, description="Greedy held-out evaluation of the exported checkpoint after.")
    eval_concurrency: int | None = Field(default=None, ge=1, description="Default: rollout.concurrency.")
    plot: bool = Field(default=True, description="Write metrics.png from metrics.jsonl (needs matplotlib).")
    summary_window: int = Field(default=10, ge=1, description="Steps averaged for the start and end reward.")

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        return "gpu" if gpu_visible() else "cpu"

    def external(self) -> bool:
        """The rollout runs on a vLLM server of its own (not verl's replica)."""
        return self.resolved_device() == "cpu" or self.rollout_server is not None


def split_options(section: dict[str, Any], job: Any) -> tuple[dict[str, Any], VerlOptions]:
    """``backends.verl`` without its ``aworld`` sub-section, and that sub-section parsed."""
    section = dict(section)
    raw = section.pop(SECTION, None) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"backends.verl.{SECTION} must be a mapping, not {type(raw).__name__}",
                          [(f"backends.verl.{SECTION}", raw, "a mapping")])
    try:
        options = VerlOptions.model_validate(raw)
    except ValidationError as exc:
        problems = [(f"backends.verl.{SECTION}." + ".".join(str(p) for p in e["loc"]), e.get("input"), e["msg"])
                    for e in exc.errors()]
        detail = "; ".join(f"{key}={value!r}: {msg}" for key, value, msg in problems)
        raise ConfigError(f"backends.verl.{SECTION} is not valid: {detail}", problems) from None
    if options.rollout_server is not None:
        _refuse_secrets(options.rollout_server)
        options.rollout_server = _resolve_spec_paths(options.rollout_server, job)
    return section, options


def _refuse_secrets(spec: VllmServerSpec) -> None:
    """A credential in ``rollout_server.env`` would sit in the job file and the plan's files:
    refused; the server inherits the launching process's environment, which is where it goes."""
    from aworld_core.secrets import is_secret_name

    secret = sorted(key for key in spec.env if is_secret_name(key))
    if secret:
        raise ConfigError(
            f"backends.verl.{SECTION}.rollout_server.env sets {', '.join(secret)}, which hold credentials: job files "
            f"and plans never carry secrets. Export {' and '.join(secret)} in the environment you launch from (the "
            f"rollout server inherits it) and remove it from the job",
            [(f"backends.verl.{SECTION}.rollout_server.env.{key}", "***", "unset (use the environment)") for key in secret],
        )


def _resolve_spec_paths(spec: VllmServerSpec, job: Any) -> VllmServerSpec:
    """``python`` and ``model`` relative to the job file (as every path in a job config)."""
    update: dict[str, Any] = {}
    if spec.python and not os.path.isabs(spec.python) and ("/" in spec.python or spec.python.startswith(".")):
        update["python"] = job.resolve_path(spec.python)
    if spec.model:
        update["model"] = job.resolve_path(spec.model)
    return spec.model_copy(update=update) if update else spec


def server_spec(options: VerlOptions, job: Any) -> VllmServerSpec:
    """The rollout server to use: the job's, with the model, port and CPU defaults filled in."""
    spec = options.rollout_server or VllmServerSpec()
    update: dict[str, Any] = {}
    if not spec.url:
        if not (spec.python or spec.command or os.environ.get("AWORLD_VLLM_PYTHON")):
            raise UsageError(
                "verl on a machine without a GPU rolls out on a vLLM server of its own (vLLM's CPU build cannot share "
                "verl's environment): set backends.verl.aworld.rollout_server.python to an interpreter with vLLM "
                "(e.g. .venvs/vllm/bin/python; or AWORLD_VLLM_PYTHON), or rollout_server.url to a running server, or "
                "backends.verl.aworld.device: gpu on a GPU machine"
            )
        if not spec.model and job.model is not None:  # no model: the plan notes it, a launch refuses it
            update["model"] = job.resolve_path(job.model.path)
        if not spec.port:
            update["port"] = free_port(spec.host)
        if options.resolved_device() == "cpu" and spec.dtype == "auto":
            update["dtype"] = "float32"  # what the CPU trainer computes in: logprobs agree with the actor's
    return spec.model_copy(update=update) if update else spec


def server_url(spec: VllmServerSpec) -> str:
    return spec.url.rstrip("/") if spec.url else f"http://{spec.host}:{spec.port}"


def external_overrides(spec: VllmServerSpec) -> dict[str, Any]:
    """verl keys for the ``external_vllm`` rollout on ``spec``'s server (aworld_verl.external_rollout)."""
    key = "+actor_rollout_ref.rollout.custom.external_vllm"
    return {
        "actor_rollout_ref.rollout.name": "external_vllm",
        "actor_rollout_ref.rollout.mode": "async",
        # verl's naive sync: the trainer hands its full weights to our adapter after each step
        "actor_rollout_ref.rollout.checkpoint_engine.backend": "naive",
        "actor_rollout_ref.rollout.free_cache_engine": False,  # the server keeps its weights and KV cache
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,  # one replica per trainer process
        f"{key}.urls": [server_url(spec)],
        f"{key}.served_model_name": spec.served_model_name,
        f"{key}.request_timeout_s": spec.request_timeout_s,
        f"{key}.startup_timeout_s": spec.startup_timeout_s,
    }


def cpu_overrides(output_dir: Path) -> dict[str, Any]:
    """verl keys a machine without a GPU (and two cores) needs (module docstring)."""
    env = "+ray_kwargs.ray_init.runtime_env.env_vars"
    return {
        "trainer.device": "cpu",
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
        "+ray_kwargs.ray_init.num_gpus": 1,  # logical: verl's resource pools ask Ray for GPU bundles
        "ray_kwargs.ray_init.num_cpus": RAY_LOGICAL_CPUS,
        "+ray_kwargs.ray_init.include_dashboard": False,
        f"{env}.VERL_PLATFORM": "cpu",
        f"{env}.OMP_NUM_THREADS": "1",  # one torch thread per process: 2 cores, ~8 processes
        "actor_rollout_ref.model.use_remove_padding": False,  # flash-attention's varlen kernels are CUDA-only
        "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.model.enable_gradient_checkpointing": False,
        # FSDP2: FSDP1's sync_module_states refuses CPU parameters ("requires them to be on GPU")
        "actor_rollout_ref.actor.strategy": "fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2",
        "actor_rollout_ref.actor.use_torch_compile": False,
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile": False,
        "actor_rollout_ref.actor.fsdp_config.param_offload": False,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision": {
            "param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.agent.num_workers": 1,
        "reward.num_workers": 1,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "data.dataloader_num_workers": 0,
        # verl's replay buffer looks for finished rollouts every 2 s: half a CPU step waited for nothing
        "+trainer.v1.sampler.sampler_kwargs.poll_interval": POLL_INTERVAL_S,
    }


def cpu_env() -> dict[str, str]:
    """Environment of the driver on a CPU (Ray's own workers get the same through ``runtime_env``)."""
    return {
        "VERL_PLATFORM": "cpu",
        "RAY_prestart_worker_first_driver": "0",  # ray_init.num_cpus is logical: do not start that many workers
        "OMP_NUM_THREADS": "1",
    }
