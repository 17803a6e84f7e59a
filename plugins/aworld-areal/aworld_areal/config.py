"""The AReaL GRPO config a job runs with, and the workflow options that travel beside it.

``backends.areal`` in the job is AReaL's own config (the sections of ``GRPOConfig``: ``cluster``,
``scheduler``, ``rollout``, ``actor``, ``ref``, ``gconfig``, ``sglang``/``vllm``, ``train_dataset``,
``valid_dataset``, ``saver``, ``evaluator``, ``recover``, ``stats_logger``, ...), merged over
defaults derived from the job (model path, tokenizer, names, seed, where files go). Three keys are
ours, not AReaL's: ``backends.areal.workflow`` holds ``AworldWorkflow``'s options,
``backends.areal.vllm_server`` the plain vLLM server the rollout runs on (an
``aworld_core.vllm_server.VllmServerSpec``: a running server's ``url``, or the ``python`` that
starts one; AReaL's own server extension does not run on vLLM 0.32, see ``vllm_engine``), and
``backends.areal.mode`` how AReaL starts: ``spmd`` (one trainer process, the default with
``vllm_server``) or ``single_controller`` (AReaL's scheduler starts workers; the default without).

Where AReaL is installed the result is validated against ``GRPOConfig`` exactly as
``load_expr_config`` merges it, so a key AReaL rejects fails at ``--dry-run`` with its name.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aworld_core.errors import ConfigError

SCHEDULERS = ("local", "ray", "slurm")
WORKFLOW_KEY = "workflow"
SERVER_KEY = "vllm_server"
MODE_KEY = "mode"
SPMD, SINGLE_CONTROLLER = "spmd", "single_controller"
MODES = (SPMD, SINGLE_CONTROLLER)
SERVER_FILE = "vllm_server.json"  # the resolved VllmServerSpec, beside areal_config.yaml
SERVER_LOG_NAME = "vllm_server.log"
#: names the server spec file for the trainer (SPMD) and AReaL's rollout workers (single controller)
SPEC_ENV = "AWORLD_AREAL_VLLM_SERVER"
WORKFLOW_OPTIONS = {
    "turn_discount": "reward * turn_discount ** (turns - 1); in (0, 1]",
    "max_response_tokens": "cap on an episode's response (sampled + tool tokens); null: gconfig.max_tokens bounds it",
    "max_steps": "LLM calls per episode; null: the agent's max_steps",
    "episode_timeout_s": "seconds per episode; null: rollout.episode_timeout_s",
    "reward_processes": "score rewards in this many processes (0: on the rollout worker's loop)",
    "reward_timeout_s": "seconds one reward may take before the episode is rejected",
    "reject_truncated": "drop episodes cut by the length budget instead of training them",
    "chat_template": "a .jinja file or template text; null: model.chat_template, else the tokenizer's",
    "tool_parser": "how tool calls are parsed; null: model.tool_parser",
    "eval_temperature": "sampling temperature for validation episodes; null: eval_gconfig's",
}
OPENAI_AGENT_MOVED = (
    "the OpenAI-API agent is given in the job now, on every backend: agent: {openai_agent: 'module:function'} "
    "(it replaces backends.areal.workflow.openai_agent and AworldWorkflow(openai_agent=...))"
)
WORKFLOW_DEFAULTS: dict[str, Any] = {"reward_processes": 2, "reward_timeout_s": 60.0}
RUN_OPTIONS_KEY = "aworld"
# backends.areal.aworld: what the run writes around AReaL's trainer (aworld_areal.run)
RUN_OPTIONS = {
    "eval_before": (True, "held-out accuracy (test_dataset, greedy, full tool loop) before training"),
    "eval_after": (True, "the same after training, on the trained policy"),
    "eval_concurrency": (None, "episodes in flight during evaluation; null: rollout.concurrency"),
    "plot": (True, "write metrics.png (training reward, tool-call rate, loss, held-out accuracy)"),
    "save_checkpoint": (True, "write the trained policy and its tokenizer to <output>/checkpoint"),
    "trajectories": (False, "append every training episode (tokens, logprobs, versions) to <output>/trajectories.jsonl"),
    "summary_window": (5, "steps averaged for the start and end rewards of the summary"),
}
TRIAL_NAME = "trial0"


def areal_experiment_name(name: str) -> str:
    """A job name as AReaL accepts it for ``experiment_name`` (no ``_`` or ``/``)."""
    cleaned = re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")
    return cleaned or "aworld"


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, recursing into mappings; lists and scalars are replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def local_path(job: Any, path: str) -> str:
    """``path`` as AReaL's processes (started in the output directory) must see it: absolute when
    it names something on this machine, else unchanged (a hub name such as ``Qwen/Qwen2.5-7B``)."""
    resolved = Path(job.resolve_path(path))
    if not resolved.is_absolute() and resolved.exists():
        return os.path.abspath(resolved)
    return str(resolved) if resolved.is_absolute() else path


def _dataset_location(job: Any, section: Any) -> str:
    return local_path(job, section.path) if section.path is not None else str(section.name)


MISSING_MODEL = "<unset: model.path>"
MISSING_DATA = "<unset: train_dataset>"


def missing_inputs(job: Any) -> list[str]:
    """What the job lacks to train on AReaL, each with how to fix it (empty when complete)."""
    problems = []
    if job.model is None:
        problems.append("the areal backend needs the model to train: set model.path in the job config")
    if job.train_dataset is None:
        problems.append("the areal backend needs training data: set train_dataset in the job config")
    if job.reward is None:
        problems.append("the areal backend trains on rewards: set reward.name in the job config")
    return problems


def default_areal_config(job: Any, output_dir: Path) -> dict[str, Any]:
    """AReaL settings derived from the job: a one-GPU-per-role layout the user scales up.

    A job without a model or data still gets a plan (with placeholders) so ``--dry-run`` shows
    it; launching such a job fails on :func:`missing_inputs`.
    """
    model_path = local_path(job, job.model.path) if job.model is not None else MISSING_MODEL
    tokenizer = local_path(job, job.model.tokenizer) if job.model is not None and job.model.tokenizer else model_path
    fileroot = str(Path(output_dir).resolve() / "areal")
    names = {"experiment_name": "${experiment_name}", "trial_name": "${trial_name}"}
    files = {**names, "fileroot": "${cluster.fileroot}"}
    worker = worker_spec(gpu=1, cpu=4, mem=32)
    config: dict[str, Any] = {
        "experiment_name": areal_experiment_name(job.name),
        "trial_name": TRIAL_NAME,
        "seed": job.seed,
        "enable_offload": False,
        "total_train_epochs": 1,
        "tokenizer_path": tokenizer,
        "cluster": {
            "n_nodes": 1,
            "n_gpus_per_node": 8,
            "fileroot": fileroot,
            "name_resolve": {"type": "nfs", "nfs_record_root": f"{fileroot}/name_resolve"},
        },
        "scheduler": {"type": "local"},
        "rollout": {
            **names,
            "backend": "sglang:d1p1t1",
            "consumer_batch_size": "${train_dataset.batch_size}",
            "max_head_offpolicyness": 2,
            "tokenizer_path": "${tokenizer_path}",
            "fileroot": "${cluster.fileroot}",
            "dump_to_file": False,
            "scheduling_spec": "${actor.scheduling_spec}",
        },
        "gconfig": {
            "n_samples": 4,
            "max_new_tokens": 1024,
            "max_tokens": 8192,
            "greedy": False,
            "temperature": 1.0,
        },
        "actor": {
            **names,
            "backend": "fsdp:d1p1t1",
            "path": model_path,
            "init_from_scratch": False,
            "disable_dropout": True,
            "gradient_checkpointing": True,
            "dtype": "bfloat16",
            # a whole multi-turn episode is one sequence: a micro-batch must hold the longest
            "mb_spec": {"max_tokens_per_mb": "${gconfig.max_tokens}"},
            "optimizer": {
                "type": "adam",
                "lr": 1.0e-6,
                "weight_decay": 0.01,
                "beta1": 0.9,
                "beta2": 0.999,
                "eps": 1.0e-8,
                "lr_scheduler_type": "constant",
                "gradient_clipping": 1.0,
                "warmup_steps_proportion": 0.001,
            },
            "eps_clip": 0.2,
            "kl_ctl": 0.0,
            "ppo_n_minibatches": 1,
            "recompute_logprob": True,
            "use_decoupled_loss": True,
            # drop tokens whose behaviour/proximal ratio is off by more than 5x (stale samples)
            "rejection_sampling": {"level": "token", "action": "mask", "metric": "ratio", "upper": 5.0},
            "reward_norm": {"mean_level": "group", "std_level": "group", "group_size": "${gconfig.n_samples}"},
            "adv_norm": {"mean_level": "batch", "std_level": "batch"},
            "weight_update_mode": "xccl",
            "max_new_tokens": "${gconfig.max_new_tokens}",
            "scheduling_spec": [worker],
        },
        "sglang": {
            "model_path": "${actor.path}",
            "random_seed": "${seed}",
            "skip_tokenizer_init": True,
            "dtype": "${actor.dtype}",
            "context_length": "${gconfig.max_tokens}",
            "mem_fraction_static": 0.8,
        },
        "vllm": {
            "model": "${actor.path}",
            "seed": "${seed}",
            "skip_tokenizer_init": False,
            "dtype": "${actor.dtype}",
            "max_model_len": "${gconfig.max_tokens}",
            "gpu_memory_utilization": 0.8,
        },
        "train_dataset": {
            "path": _dataset_location(job, job.train_dataset) if job.train_dataset is not None else MISSING_DATA,
            "type": "rl",
            "batch_size": 8,
            "shuffle": True,
        },
        "saver": {**files, "freq_epochs": 1},
        "recover": {**files, "mode": "disabled", "freq_epochs": 1},
        "evaluator": {**files, "freq_epochs": 1},
        "stats_logger": stats_logger_section(job, fileroot, files),
    }
    if "concurrency" in job.rollout.model_fields_set:
        config["rollout"]["max_concurrent_rollouts"] = job.rollout.concurrency
    if job.test_dataset is not None:
        config["valid_dataset"] = {
            "path": _dataset_location(job, job.test_dataset),
            "type": "rl",
            "batch_size": 8,
            "shuffle": False,
        }
    return config


# logging.report_to -> the stats_logger section AReaL's StatsLogger reads (its loggers: wandb,
# swanlab, trackio, tensorboard); "console" and "none" add nothing (AReaL always prints)
STATS_LOGGERS = ("tensorboard", "wandb", "swanlab", "trackio")


def stats_logger_section(job: Any, fileroot: str, files: dict[str, Any]) -> dict[str, Any]:
    """``stats_logger`` from the job's ``logging.report_to``: tensorboard writes under
    ``<output>/areal/tensorboard``; wandb, swanlab and trackio log online (their keys and projects
    from their own environment variables, or backends.areal.stats_logger.<name>). A logger AReaL
    does not have is refused rather than dropped."""
    section: dict[str, Any] = {**files, "wandb": {"mode": "disabled"}}
    unknown = [name for name in job.logging.report_to if name not in (*STATS_LOGGERS, "console", "none")]
    if unknown:
        raise ConfigError(
            f"logging.report_to has {unknown}, which AReaL's stats logger cannot write to; it has "
            f"{', '.join(STATS_LOGGERS)} (and console output always)",
            [("logging.report_to", name, f"one of {', '.join(STATS_LOGGERS)}") for name in unknown],
        )
    for name in job.logging.report_to:
        if name == "tensorboard":
            section["tensorboard"] = {"path": f"{fileroot}/tensorboard"}
        elif name == "wandb":
            section["wandb"] = {"mode": "online"}
        elif name == "swanlab":
            section["swanlab"] = {"mode": "cloud"}
        elif name == "trackio":
            section["trackio"] = {"mode": "online"}
    return section


def workflow_options(job: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``backends.areal.workflow`` checked, over defaults from the job's rollout section."""
    if not isinstance(options, dict):
        raise ConfigError(
            f"backends.areal.{WORKFLOW_KEY} must be a mapping of workflow options, got {options!r}",
            [(f"backends.areal.{WORKFLOW_KEY}", options, "a mapping")],
        )
    if "openai_agent" in options:
        raise ConfigError(OPENAI_AGENT_MOVED, [(f"backends.areal.{WORKFLOW_KEY}.openai_agent", options["openai_agent"],
                                                "removed; agent.openai_agent set instead")])
    unknown = sorted(set(options) - set(WORKFLOW_OPTIONS))
    if unknown:
        known = "\n".join(f"  {k}: {v}" for k, v in WORKFLOW_OPTIONS.items())
        raise ConfigError(
            f"unknown option(s) {', '.join(unknown)} in backends.areal.{WORKFLOW_KEY}; the options are:\n{known}",
            [(f"backends.areal.{WORKFLOW_KEY}.{k}", options[k], "a workflow option") for k in unknown],
        )
    if job.agent.openai_agent and options.get("max_steps") is not None:
        raise ConfigError(
            f"backends.areal.{WORKFLOW_KEY}.max_steps cannot limit agent.openai_agent (the function runs its own "
            f"loop and decides how many calls it makes): remove it and bound the loop in the function",
            [(f"backends.areal.{WORKFLOW_KEY}.max_steps", options["max_steps"], "removed")],
        )
    resolved = {**WORKFLOW_DEFAULTS, **options}
    if job.rollout.max_turns is not None and resolved.get("max_steps") is None:
        resolved["max_steps"] = job.rollout.max_turns
    return resolved


@dataclass
class ArealLaunch:
    """Everything a launch of AReaL needs: its config, the workflow options, how it starts, and
    the vLLM server it rolls out on (``None``: AReaL's own servers, SGLang or vLLM, on GPUs)."""

    config: dict[str, Any]
    options: dict[str, Any]
    mode: str
    server: Any = None  # aworld_core.vllm_server.VllmServerSpec
    gpu: bool = True  # a GPU is visible here (the CPU defaults apply when not)

    @property
    def server_address(self) -> str | None:
        """``host:port`` as AReaL's engines address servers (``AREAL_LLM_SERVER_ADDRS``)."""
        if self.server is None:
            return None
        if self.server.url:
            parsed = urlsplit(self.server.url)
            return parsed.netloc or parsed.path
        return f"{self.server.host}:{self.server.port}"


CPU_TOKENS_PER_MB = 16384


AREAL_WORKER = "python3 -m areal.infra.rpc.rpc_server"
CPU_WORKER = "python3 -m aworld_areal.rpc_server"  # AReaL's worker with the CPU fixes (aworld_areal.rpc_server)


def worker_spec(*, gpu: int, cpu: int, mem: int, cmd: str = AREAL_WORKER) -> dict[str, Any]:
    """One AReaL worker's scheduling spec (single-controller mode: what the scheduler starts)."""
    return {
        "task_type": "worker",
        "port_count": 2,
        "gpu": gpu,
        "cpu": cpu,
        "mem": mem,
        "cmd": cmd,
        "env_vars": {},
    }


def external_server_defaults(gpu: bool) -> dict[str, Any]:
    """What rolling out on a plain vLLM server changes in the defaults: AReaL's vLLM client, disk
    weight updates (the only kind plain vLLM takes), one trainer process; without a GPU also the
    CPU layout (no GPUs per node or worker, float32 as vLLM's CPU build runs it, no activation
    checkpointing for a model this small enough to train on a CPU)."""
    defaults: dict[str, Any] = {
        "rollout": {"backend": "vllm:d1p1t1"},
        "actor": {"backend": "fsdp:d1p1t1", "weight_update_mode": "disk"},
    }
    if not gpu:
        defaults["cluster"] = {"n_gpus_per_node": 0}
        defaults["actor"].update({"dtype": "float32", "gradient_checkpointing": False, "attn_impl": "sdpa",
                                  "scheduling_spec": [worker_spec(gpu=0, cpu=1, mem=4, cmd=CPU_WORKER)]})
    return defaults


def _gpu() -> bool:
    from aworld_core.vllm_server import gpu_visible

    return gpu_visible()


def _refuse(key: str, value: Any, message: str, expected: str) -> ConfigError:
    return ConfigError(message, [(f"backends.areal.{key}", value, expected)])


def _check_external_server(config: dict[str, Any], section: dict[str, Any], mode: str) -> None:
    """Refuse what the plain vLLM server (and SPMD mode) would silently not honour."""
    for name in ("vllm", "sglang"):
        if name in section:
            raise _refuse(
                name, section[name],
                f"backends.areal.{name} configures a server AReaL launches itself, but with "
                f"backends.areal.{SERVER_KEY} the rollout runs on that plain vLLM server: put server settings "
                f"there (model, dtype, max_model_len, gpu_memory_utilization, extra_args, ...)",
                f"nothing (use backends.areal.{SERVER_KEY})",
            )
    rollout_backend = str(config["rollout"].get("backend", ""))
    if not rollout_backend.startswith("vllm"):
        raise _refuse("rollout.backend", rollout_backend,
                      f"backends.areal.rollout.backend is {rollout_backend!r}, but backends.areal.{SERVER_KEY} is a "
                      f"vLLM server: use vllm:d1p1t1 (or drop {SERVER_KEY} to run AReaL's own servers)", "vllm:d1p1t1")
    update_mode = config["actor"].get("weight_update_mode")
    if update_mode != "disk":
        raise _refuse("actor.weight_update_mode", update_mode,
                      f"backends.areal.actor.weight_update_mode is {update_mode!r}; the plain vLLM server reloads "
                      f"weights from a checkpoint on disk only: set it to disk", "disk")
    if config["actor"].get("use_lora"):
        raise _refuse("actor.use_lora", True,
                      f"LoRA is not supported with backends.areal.{SERVER_KEY} (the plain vLLM server reloads full "
                      f"checkpoints): drop actor.use_lora", "false")
    if mode != SPMD:
        return
    if "scheduler" in section:
        raise _refuse("scheduler", section["scheduler"],
                      f"backends.areal.scheduler is not used in SPMD mode (one trainer process, no scheduler): drop it, "
                      f"or set backends.areal.{MODE_KEY}: {SINGLE_CONTROLLER}", "nothing in SPMD mode")
    for role, key in (("actor", "actor.backend"), ("rollout", "rollout.backend")):
        allocation = str(config[role].get("backend", ""))
        dims = dict(re.findall(r"([a-z])(\d+)", allocation.split(":", 1)[-1]))
        if any(int(v) != 1 for v in dims.values()):
            raise _refuse(key, allocation,
                          f"backends.areal.{key} is {allocation!r}, but aworld-areal's SPMD launch runs one trainer "
                          f"process and one vLLM server: use {allocation.split(':', 1)[0]}:d1p1t1, or set "
                          f"backends.areal.{MODE_KEY}: {SINGLE_CONTROLLER} to scale out", "d1p1t1")


def server_spec(job: Any, section: Any, config: dict[str, Any], *, gpu: bool) -> Any:
    """``backends.areal.vllm_server`` as a ``VllmServerSpec``, its defaults from the AReaL config:
    the actor's model, a float32 server on a CPU (else the actor's dtype), the context
    (``gconfig.max_tokens``) as ``max_model_len``, the job's seed, a free port on loopback."""
    from pydantic import ValidationError

    from aworld_core.vllm_server import VllmServerSpec, free_port

    if not isinstance(section, dict):
        raise _refuse(SERVER_KEY, section, f"backends.areal.{SERVER_KEY} must be a mapping (url: ..., or python: ...)",
                      "a mapping")
    data = dict(section)
    if data.get("python"):
        data["python"] = local_path(job, str(data["python"]))
    data.setdefault("model", config["actor"]["path"])
    if "dtype" not in data:
        dtype = config["actor"].get("dtype")
        data["dtype"] = "float32" if not gpu else (dtype if isinstance(dtype, str) and "$" not in dtype else "auto")
    max_tokens = config.get("gconfig", {}).get("max_tokens")
    if "max_model_len" not in data and isinstance(max_tokens, int):
        data["max_model_len"] = max_tokens
    if "seed" not in data and job.seed is not None:
        data["seed"] = job.seed
    try:
        spec = VllmServerSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"backends.areal.{SERVER_KEY} is not a vLLM server spec: {problems}",
                          [(f"backends.areal.{SERVER_KEY}.{'.'.join(map(str, e['loc']))}", None, e["msg"])
                           for e in exc.errors()]) from None
    if spec.url is None:
        if spec.command is None:
            python = spec.python or os.environ.get("AWORLD_VLLM_PYTHON")
            if not python:
                raise _refuse(f"{SERVER_KEY}.python", None,
                              f"backends.areal.{SERVER_KEY} needs 'url' (a running vLLM server) or 'python' (an "
                              f"interpreter with vLLM, e.g. .venvs/vllm/bin/python; or AWORLD_VLLM_PYTHON)",
                              "an interpreter with vLLM")
            if not os.path.exists(python):
                raise _refuse(f"{SERVER_KEY}.python", python,
                              f"backends.areal.{SERVER_KEY}.python {python!r} does not exist: give an interpreter with "
                              f"vLLM installed (e.g. .venvs/vllm/bin/python, built by make)", "an existing interpreter")
            spec = spec.model_copy(update={"python": python})
        if not spec.port:
            spec = spec.model_copy(update={"port": free_port(spec.host)})
    return spec


def run_options(options: Any) -> dict[str, Any]:
    """``backends.areal.aworld`` checked, over :data:`RUN_OPTIONS`' defaults."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise _refuse(RUN_OPTIONS_KEY, options, f"backends.areal.{RUN_OPTIONS_KEY} must be a mapping", "a mapping")
    unknown = sorted(set(options) - set(RUN_OPTIONS))
    if unknown:
        known = "\n".join(f"  {k}: {help_}" for k, (_, help_) in RUN_OPTIONS.items())
        raise ConfigError(
            f"unknown option(s) {', '.join(unknown)} in backends.areal.{RUN_OPTIONS_KEY}; the options are:\n{known}",
            [(f"backends.areal.{RUN_OPTIONS_KEY}.{k}", options[k], "a run option") for k in unknown],
        )
    resolved = {k: default for k, (default, _) in RUN_OPTIONS.items()}
    resolved.update(options)
    for key in ("eval_before", "eval_after", "plot", "save_checkpoint", "trajectories"):
        if not isinstance(resolved[key], bool):
            raise _refuse(f"{RUN_OPTIONS_KEY}.{key}", resolved[key],
                          f"backends.areal.{RUN_OPTIONS_KEY}.{key} must be true or false", "a boolean")
    for key in ("eval_concurrency", "summary_window"):
        value = resolved[key]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _refuse(f"{RUN_OPTIONS_KEY}.{key}", value,
                          f"backends.areal.{RUN_OPTIONS_KEY}.{key} must be a positive integer", "an integer >= 1")
    return resolved


# the job's rollout.sampling -> AReaL's keys. The temperature is also the actor's (and the reference
# model's): AReaL recomputes logprobs at TrainEngineConfig.temperature, and one other than the
# sampler's would bias every importance ratio. top_k 0 ("off") is GenerationHyperparameters' default,
# which keeps every token.
SAMPLING_KEYS = {
    "temperature": ("gconfig.temperature", "actor.temperature"),
    "top_p": ("gconfig.top_p",),
    "top_k": ("gconfig.top_k",),
}
AREAL_ALL_TOKENS = 100_000_000  # GenerationHyperparameters.top_k's default: int(1e8)


def apply_sampling(job: Any, config: dict[str, Any], section: dict[str, Any]) -> None:
    """Put the job's ``rollout.sampling`` into ``config`` (AReaL's keys, :data:`SAMPLING_KEYS`; the
    reference model's temperature too when the config has one); ``ConfigError`` when ``section``
    (``backends.areal``) sets one of those keys to another value."""
    from aworld_core.config import flatten_dotted

    keys = dict(SAMPLING_KEYS)
    if isinstance(config.get("ref"), dict):
        keys["temperature"] = (*keys["temperature"], "ref.temperature")
    mapped = job.rollout.sampling.native(keys, flatten_dotted(section), prefix="backends.areal.",
                                         values={"top_k": lambda k: k or AREAL_ALL_TOKENS}, backend="areal")
    for dotted, value in mapped.items():
        node = config
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value


def build_areal_launch(job: Any, output_dir: Path) -> ArealLaunch:
    """The launch of ``job`` on AReaL: config, workflow options, mode and server, checked."""
    section = job.backend_section("areal")
    options = workflow_options(job, section.pop(WORKFLOW_KEY, {}) or {})
    run_options(section.pop(RUN_OPTIONS_KEY, None))  # read by aworld_areal.run from the job
    server_section = section.pop(SERVER_KEY, None)
    mode = section.pop(MODE_KEY, None) or (SPMD if server_section is not None else SINGLE_CONTROLLER)
    if mode not in MODES:
        raise _refuse(MODE_KEY, mode, f"backends.areal.{MODE_KEY} is {mode!r}; choose one of {', '.join(MODES)}",
                      f"one of {', '.join(MODES)}")
    if mode == SPMD and server_section is None:
        raise _refuse(SERVER_KEY, None,
                      f"AReaL's SPMD mode runs on a vLLM server you name: set backends.areal.{SERVER_KEY} (python: an "
                      f"interpreter with vLLM, or url: a running server), or backends.areal.{MODE_KEY}: "
                      f"{SINGLE_CONTROLLER}", "a vLLM server spec")
    defaults = default_areal_config(job, output_dir)
    gpu = _gpu()
    if server_section is not None:
        defaults = deep_merge(defaults, external_server_defaults(gpu))
        if mode == SPMD:
            defaults.pop("scheduler", None)
    config = deep_merge(defaults, section)
    apply_sampling(job, config, section)
    if server_section is not None and not gpu and "mb_spec" not in (section.get("actor") or {}):
        # a CPU trains small models: one micro-batch per step instead of one per context length (the
        # demo's 64 episodes of ~40 tokens made 11 micro-batches of 256, each a forward and backward);
        # and room above the context for the tool tokens after a row's last turn (docs: "Context")
        max_tokens = config.get("gconfig", {}).get("max_tokens")
        if isinstance(max_tokens, int):
            config["actor"]["mb_spec"] = {"max_tokens_per_mb": max(max_tokens, CPU_TOKENS_PER_MB)}
    server = None
    if server_section is not None:
        _check_external_server(config, section, mode)
        config.pop("vllm", None)  # the server's settings are the spec's; AReaL launches none
        config.pop("sglang", None)
        server = server_spec(job, server_section, config, gpu=gpu)
    if mode == SINGLE_CONTROLLER:
        scheduler = config.get("scheduler")
        kind = scheduler.get("type") if isinstance(scheduler, dict) else None
        if kind not in SCHEDULERS:
            raise ConfigError(
                f"backends.areal.scheduler.type is {kind!r}; aworld-areal runs AReaL's single-controller mode: "
                f"choose one of {', '.join(SCHEDULERS)}",
                [("backends.areal.scheduler.type", kind, f"one of {', '.join(SCHEDULERS)}")],
            )
    return ArealLaunch(config, options, mode, server, gpu=gpu)


def build_areal_config(job: Any, output_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(AReaL config, workflow options)`` for ``job``; the first is what ``areal_config.yaml`` holds."""
    launch = build_areal_launch(job, output_dir)
    return launch.config, launch.options


def areal_installed() -> bool:
    """AReaL's config module is importable (a bare ``areal`` folder on sys.path does not count)."""
    try:
        return importlib.util.find_spec("areal.api.cli_args") is not None
    except (ImportError, ValueError):
        return False


def validate_areal_config(config: dict[str, Any]) -> Any:
    """Merge ``config`` into AReaL's ``GRPOConfig`` as ``load_expr_config`` does; ``ConfigError``
    naming the key when AReaL rejects it. Returns the ``GRPOConfig`` (no files, no side effects)."""
    from areal.api.cli_args import GRPOConfig, to_structured_cfg
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = to_structured_cfg(OmegaConf.create(config), GRPOConfig)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ConfigError(
            f"backends.areal does not load as AReaL's GRPOConfig: {key}: {_first_line(exc)}",
            [(f"backends.areal.{key}", None, "a GRPOConfig field (see areal.api.cli_args)")],
        ) from None
    except (ValueError, TypeError, AssertionError) as exc:
        raise ConfigError(f"backends.areal does not load as AReaL's GRPOConfig: {exc}") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
