"""Planning and launching ``python -m verl.trainer.main_ppo`` for a job.

The plan (what ``--dry-run`` prints) holds the full command with its hydra overrides and two text
files: the agent-loop YAML (a list of ``{name, _target_, kwargs}``, which is how verl's Ray
workers learn about agent loops: registration by decorator stays in the process that ran it) and
the resolved job config the loop reads in every worker. The parquet files verl reads are data,
not text, so the plan only names them; ``launch`` writes them from the job's datasets just before
it runs the command.

Overrides: the seed's ``run.sh`` values first, then what the job says (model, data, turns,
reward, logging), then the user's ``backends.verl`` section (nested or dotted keys), which wins.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aworld_core.config import flatten_dotted
from aworld_core.errors import ConfigError, UsageError
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_core.secrets import public_job_dump
from aworld_verl.rows import DEFAULT_AGENT_NAME

BACKEND = "verl"
AGENT_LOOP_FILE = "verl/agent_loop.yaml"
JOB_FILE = "verl/aworld_job.json"
TRAIN_PARQUET = "verl/data/train.parquet"
VAL_PARQUET = "verl/data/val.parquet"
REWARD_MODULE = "pkg://aworld_verl.reward"
AGENT_LOOP_TARGET = "aworld_verl.agent_loop.AworldAgentLoop"
SAMPLER_MODULE = "pkg://aworld_verl.sampler"
SAMPLER_NAME = "aworld_replay_buffer"
SAMPLER_PATH_KEY = "trainer.v1.sampler.custom_sampler.path"
SAMPLER_KWARGS = "+trainer.v1.sampler.sampler_kwargs"
AWORLD_KEY = "aworld"  # plan.config[...]: our options and the planned rollout server (external_launch)

# verl 0.9.1's own defaults (trainer/config/ppo_trainer.yaml, rollout/rollout.yaml) for what a
# plan checks but does not set itself
VERL_USE_V1_DEFAULT = True
VERL_AGENT_NUM_WORKERS_DEFAULT = 8
NUM_WORKERS_KEY = "actor_rollout_ref.rollout.agent.num_workers"

# tool-call formats verl's own parser registry knows (verl 0.9.1)
VERL_TOOL_FORMATS = ("hermes", "gpt-oss", "qwen3_coder", "glm", "seed", "minimax", "kimi", "deepseek_v4", "gemma4")

# The seed's run.sh values that do not depend on its cluster (GPU counts, parallelism, offload and
# sequence lengths are left to verl's defaults or the job). The user's backends.verl section wins.
SEED_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_ctrl.kl_coef": 0.0,
    "data.return_raw_chat": True,
    "data.train_batch_size": 8,
    "data.filter_overlong_prompts": True,
    "data.truncation": "error",
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.actor.kl_loss_coef": 0.0,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.clip_ratio_c": 10.0,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 1,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.mode": "async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.top_p": 1.0,
    "actor_rollout_ref.rollout.multi_turn.enable": False,
    "actor_rollout_ref.rollout.multi_turn.format": "hermes",
    "actor_rollout_ref.rollout.calculate_log_probs": True,
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.rollout.val_kwargs.top_p": 0.6,
    "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0,
    "actor_rollout_ref.rollout.val_kwargs.n": 1,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 1,
    "trainer.logger": ["console"],
    "trainer.val_before_train": False,
    "trainer.log_val_generations": 0,
    "trainer.nnodes": 1,
    "trainer.save_freq": 30,
    "trainer.test_freq": 0,
    "trainer.total_epochs": 1,
}

# the job's rollout.sampling -> verl's rollout keys (verl passes them to its servers per sample, and
# aworld_verl.sampling hands them to the episode); top_k 0 ("off") is verl's -1
SAMPLING_KEYS = {
    "temperature": "actor_rollout_ref.rollout.temperature",
    "top_p": "actor_rollout_ref.rollout.top_p",
    "top_k": "actor_rollout_ref.rollout.top_k",
}
SAMPLING_VALUES = {"top_k": lambda k: -1 if k == 0 else k}

_BARE = re.compile(r"^[A-Za-z0-9_\-+./@]+$")
_LOOKS_TYPED = re.compile(r"^([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|true|false|null|none|nan|inf)$", re.I)


def hydra_value(value: Any) -> str:
    """``value`` in hydra's override grammar (strings quoted where they would be misread)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _BARE.match(text) and not _LOOKS_TYPED.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _merge(base: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """``user`` wins; a key we add with ``+`` (not in verl's schema) keeps its ``+`` when the user
    writes it bare, a new key beside one of ours (under a ``+`` key's parent: e.g.
    ``actor_rollout_ref.rollout.custom.external_vllm.record``) gets ``++`` (hydra's add-or-set:
    verl's schema may or may not have it), and any spelling of one key replaces the others."""
    merged = dict(base)
    added_parents = {k.lstrip("+").rpartition(".")[0] for k in base if k.startswith("+")}
    for key, value in user.items():
        bare = key.lstrip("+")
        spellings = [k for k in (bare, f"+{bare}", f"++{bare}") if k in merged]
        if not key.startswith("+") and any(k.startswith("+") for k in spellings):
            key = next(k for k in spellings if k.startswith("+"))
        elif not key.startswith("+") and not spellings and bare.rpartition(".")[0] in added_parents:
            key = f"++{bare}"
        for old in spellings:
            del merged[old]
        merged[key] = value
    return merged


def _reward_overrides(job: Any) -> dict[str, Any]:
    if job.reward is None:
        return {}
    overrides: dict[str, Any] = {
        "reward.custom_reward_function.path": REWARD_MODULE,
        "reward.custom_reward_function.name": "compute_score",
        "+reward.custom_reward_function.reward_kwargs.aworld_reward": job.reward.name,
    }
    if job.base_dir:
        overrides["+reward.custom_reward_function.reward_kwargs.aworld_base_dir"] = job.base_dir
    return overrides


def missing_for_launch(job: Any) -> list[str]:
    """What the job lacks to train on verl (a dry run still plans without it)."""
    missing = []
    if job.model is None:
        missing.append("model.path (the policy to train)")
    if job.train_dataset is None:
        missing.append("train_dataset (the training data)")
    return missing


def job_overrides(job: Any, output_dir: Path) -> dict[str, Any]:
    """What the job itself says, as verl overrides (paths absolute: Ray workers have other cwds)."""
    out = output_dir.resolve()
    overrides: dict[str, Any] = {}
    if job.model is not None:
        overrides["actor_rollout_ref.model.path"] = job.resolve_path(job.model.path)
    if job.train_dataset is not None:
        overrides["data.train_files"] = [str(out / TRAIN_PARQUET)]
        overrides["data.val_files"] = [str(out / (VAL_PARQUET if job.test_dataset is not None else TRAIN_PARQUET))]
    overrides.update(
        {
            "data.seed": job.seed,
            "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(out / AGENT_LOOP_FILE),
            "actor_rollout_ref.rollout.agent.default_agent_loop": DEFAULT_AGENT_NAME,
            "trainer.project_name": "aworld",
            "trainer.experiment_name": job.name,
            "trainer.default_local_dir": str(out / "checkpoints"),
            "trainer.logger": ["console", *[r for r in job.logging.report_to if r != "console"]],
        }
    )
    if job.rollout.max_turns is not None:  # unset: the agent's own max_steps
        overrides["actor_rollout_ref.rollout.multi_turn.max_user_turns"] = job.rollout.max_turns
        overrides["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] = job.rollout.max_turns
    if job.model is not None and job.model.tool_parser in VERL_TOOL_FORMATS:
        overrides["actor_rollout_ref.rollout.multi_turn.format"] = job.model.tool_parser
    overrides.update(sampling_overrides(job))
    overrides.update(_reward_overrides(job))
    # V1's replay buffer with AWorld's per-step counts and the all-failed stop (aworld_verl.sampler)
    overrides[SAMPLER_PATH_KEY] = SAMPLER_MODULE
    overrides["trainer.v1.sampler.custom_sampler.name"] = SAMPLER_NAME
    overrides[f"{SAMPLER_KWARGS}.aworld_max_failed_steps"] = job.rollout.max_failed_steps
    return overrides


def sampling_overrides(job: Any) -> dict[str, Any]:
    """The job's ``rollout.sampling`` as verl overrides; ``ConfigError`` when ``backends.verl`` sets
    one of those keys (nested or dotted, any ``+`` spelling) to another value."""
    written = {key.lstrip("+"): value for key, value in flatten_dotted(job.backend_section(BACKEND)).items()}
    return job.rollout.sampling.native(SAMPLING_KEYS, written, prefix="backends.verl.", values=SAMPLING_VALUES,
                                       backend="verl")


def _lookup(overrides: dict[str, Any], key: str, default: Any = None) -> Any:
    for spelling in (key, f"+{key}", f"++{key}"):
        if spelling in overrides:
            return overrides[spelling]
    return default


def sampler_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """verl hands its DAPO and failed-group options only to its own replay buffer; with ours they
    go through ``sampler_kwargs`` (as verl's ``_build_replay_buffer`` would set them)."""
    if _lookup(overrides, SAMPLER_PATH_KEY) != SAMPLER_MODULE:
        return {}  # the user's own sampler
    extra: dict[str, Any] = {}
    batch_size = _lookup(overrides, "data.train_batch_size")
    refill = bool(_lookup(overrides, "trainer.v1.sampler.sync_refill_failed_groups", False))
    if _lookup(overrides, "algorithm.filter_groups.enable", False):
        metric = _lookup(overrides, "algorithm.filter_groups.metric")
        if not metric:
            raise UsageError("algorithm.filter_groups.metric must be set when algorithm.filter_groups.enable is true")
        extra["filter_groups_metric"] = metric
        extra["max_inflight_gen_batches"] = _lookup(overrides, "algorithm.filter_groups.max_inflight_gen_batches", 1)
    if refill:
        extra["sync_refill_failed_groups"] = True
    if extra:
        extra["train_batch_size"] = batch_size
        extra["gen_batch_size"] = 1
    return {f"{SAMPLER_KWARGS}.{key}": value for key, value in extra.items()}


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return bool(value)


def _as_int(value: Any) -> int | None:
    """An integer setting, or ``None`` when it is not one here (unset, an interpolation)."""
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def uses_v0(overrides: dict[str, Any]) -> bool:
    """``trainer.use_v1=false``: verl's deprecated V0 trainer (``RayPPOTrainer``)."""
    return not _as_bool(_lookup(overrides, "trainer.use_v1", VERL_USE_V1_DEFAULT))


def check_v0_groups(overrides: dict[str, Any]) -> None:
    """Under V0, ``AgentLoopManager.generate_sequences`` cuts the repeated batch into one equal
    chunk per agent-loop worker (``DataProto.chunk``). A prompt's ``n`` rows stay in one worker,
    where the rendezvous sees the whole group, only when the worker count divides the number of
    prompts; otherwise each part of a split group is decided alone (a part whose members all failed
    sends 0.0 placeholders into the survivors' group; ``drop_group`` drops only a part)."""
    if not uses_v0(overrides):
        return
    workers = _as_int(_lookup(overrides, NUM_WORKERS_KEY, VERL_AGENT_NUM_WORKERS_DEFAULT))
    if workers is None or workers <= 1:
        return
    problems: list[tuple[str, object, str]] = []
    train_key = "data.gen_batch_size" if _as_int(_lookup(overrides, "data.gen_batch_size")) else "data.train_batch_size"
    for key, n_key in ((train_key, "actor_rollout_ref.rollout.n"),
                       ("data.val_batch_size", "actor_rollout_ref.rollout.val_kwargs.n")):
        size = _as_int(_lookup(overrides, key))
        if size is not None and (_as_int(_lookup(overrides, n_key, 1)) or 1) > 1 and size % workers:
            problems.append((key, size, f"a multiple of {NUM_WORKERS_KEY}={workers}"))
    if not problems:
        return
    settings = ", ".join(f"{key}={value}" for key, value, _ in problems)
    fix = " and ".join(f"{key} a multiple of {workers}" for key, _, _ in problems)
    raise ConfigError(
        f"trainer.use_v1=false (verl's V0 trainer) splits each batch into {workers} equal chunks, one per "
        f"agent-loop worker ({NUM_WORKERS_KEY}={workers}"
        f"{'' if _lookup(overrides, NUM_WORKERS_KEY) is not None else ', verl default'}), but {settings} is not a "
        f"multiple of {workers}: a prompt's rollouts would land on two workers and its GRPO group would be "
        f"decided in parts (failed members get wrong neutral rewards, drop_group drops only a part). Make "
        f"{fix}, or set {NUM_WORKERS_KEY} to a divisor of it, in backends.verl (or use the V1 trainer, "
        f"trainer.use_v1=true)",
        problems,
    )


def agent_loop_entries(job: Any, output_dir: Path) -> list[dict[str, Any]]:
    """The agent-loop YAML: our loop under ``aworld_agent``, configured by the job file."""
    entry: dict[str, Any] = {
        "name": DEFAULT_AGENT_NAME,
        "_target_": AGENT_LOOP_TARGET,
        "job_config_path": str(output_dir.resolve() / JOB_FILE),
    }
    if job.model is not None:
        entry["tool_parser"] = job.model.tool_parser
    return [entry]


def _pythonpath(job: Any) -> dict[str, str]:
    """Workers import the job's ``module:function`` references: put the config's folder on the path."""
    if not job.base_dir:
        return {}
    parts = [job.base_dir, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(parts))}


def build_plan(job: Any, output_dir: Path) -> LaunchPlan:
    import yaml

    from aworld_verl.cpu_plan import split_options

    section, options = split_options(job.backend_section(BACKEND), job)
    overrides = {**SEED_DEFAULTS, **job_overrides(job, output_dir)}
    env = {"HYDRA_FULL_ERROR": "1", "RAY_DEDUP_LOGS": "0", **_pythonpath(job)}
    server = None
    if options.external():  # a vLLM server of its own: a CPU machine, or a separate inference fleet
        from aworld_verl.external_launch import external_plan

        server = external_plan(job, output_dir, options, overrides, env)
    overrides = _merge(overrides, flatten_dotted(section))
    overrides.update(sampler_overrides(overrides))
    check_v0_groups(overrides)
    command = [sys.executable, "-m", "verl.trainer.main_ppo"]
    command += [f"{key}={hydra_value(value)}" for key, value in overrides.items()]
    # only what the job set: the workers rebuild the rest from the same defaults
    # secrets as {"env": NAME} references: the launch exports them to the workers' environment
    job_json = json.dumps(public_job_dump(job, exclude_unset=True), indent=2, ensure_ascii=False) + "\n"
    out = output_dir.resolve()
    notes = [f"the job lacks {item}: set it before launching" for item in missing_for_launch(job)]
    notes += [
        f"launch writes {out / TRAIN_PARQUET} from train_dataset before running the command",
        (
            f"launch writes {out / VAL_PARQUET} from test_dataset"
            if job.test_dataset is not None
            else "no test_dataset: validation reads the training parquet (trainer.test_freq=0 by default)"
        ),
        "rows: data_source, prompt, ability, reward_model{style,ground_truth}, extra_info{index,...}, agent_name",
    ]
    if _lookup(overrides, SAMPLER_PATH_KEY) != SAMPLER_MODULE:
        notes.append("trainer.v1.sampler.custom_sampler is your own: aworld's per-step counts (aworld/*) and the "
                     "rollout.max_failed_steps stop are off (they live in aworld_verl.sampler)")
    if uses_v0(overrides):
        notes.append("trainer.use_v1=false (verl's deprecated V0 trainer): no per-step aworld/* counts and no "
                     "rollout.max_failed_steps stop (they need V1's replay buffer); the workers log the counts")
        if (_as_int(_lookup(overrides, "actor_rollout_ref.rollout.val_kwargs.n", 1)) or 1) > 1:
            notes.append(f"V0 validation with val_kwargs.n > 1: a validation batch (data.val_batch_size, by default "
                         f"the whole test set, and the last, partial one) whose size is not a multiple of "
                         f"{NUM_WORKERS_KEY} is padded and split across workers, and its groups are decided "
                         f"in parts (the workers warn)")
    files = {
        AGENT_LOOP_FILE: yaml.safe_dump(agent_loop_entries(job, output_dir), sort_keys=False),
        JOB_FILE: job_json,
    }
    config = dict(overrides)
    if server is not None:
        from aworld_verl.external_launch import describe_server, planned_server

        notes += describe_server(server, options)
        config[AWORLD_KEY] = planned_server(server, options)
    return LaunchPlan(backend=BACKEND, command=command, cwd=str(out), env=env, files=files, config=config,
                      notes=notes)


def write_datasets(job: Any, output_dir: Path) -> dict[str, str]:
    """Convert the job's datasets to verl parquet under ``output_dir``; returns what was written."""
    from aworld_core.datasets import load_dataset_section
    from aworld_verl.rows import to_verl_rows, write_parquet

    written = {}
    for split, section, relative in (("train", job.train_dataset, TRAIN_PARQUET), ("test", job.test_dataset, VAL_PARQUET)):
        if section is None:
            continue
        samples = load_dataset_section(section, job.base_dir)
        path = write_parquet(to_verl_rows(samples, split=split), output_dir / relative)
        written[relative] = str(path)
    return written


def launch(job: Any, plan: LaunchPlan) -> TrainResult:
    """Write the parquet files, then run the plan (files, command) as the core does; with a
    rollout server of its own (a CPU machine), ``aworld_verl.external_launch`` runs it."""
    missing = missing_for_launch(job)
    if missing:
        raise UsageError(f"the verl backend cannot launch this job: set {' and '.join(missing)} in the job config")
    return run_with_datasets(job, plan, write_datasets)


def run_with_datasets(job: Any, plan: LaunchPlan, write: Callable[[Any, Path], dict[str, str]]) -> TrainResult:
    """``write(job, output_dir)`` (the RL or the SFT parquet), then the plan; what it wrote joins the
    result's artifacts."""
    from aworld_core.launch import execute_plan

    output_dir = Path(plan.cwd) if plan.cwd else Path(job.resolved_output_dir())
    output_dir.mkdir(parents=True, exist_ok=True)
    datasets = write(job, output_dir)
    planned = plan.config.get(AWORLD_KEY)  # an RL plan's rollout server of its own (an SFT plan has none)
    if isinstance(planned, dict) and planned.get("external"):
        from aworld_verl.external_launch import launch_external

        return launch_external(job, plan, output_dir, datasets)
    result = execute_plan(plan, output_dir)
    result.artifacts.update(datasets)
    return result
