"""The ``swift`` backend's launch: ``swift rlhf --rlhf_type grpo`` over the job's agent.

The plan's command (``--dry-run`` prints it)::

    python -m swift.cli.main rlhf --rlhf_type grpo --model <model.path> --check_model false
        --fp16 false --dataset <out>/swift_train.jsonl [--val_dataset <out>/swift_test.jsonl]
        --external_plugins <aworld_swift/swift_plugin.py> --multi_turn_scheduler aworld
        [--max_turns <rollout.max_turns>] --reward_funcs aworld --callbacks aworld
        --output_dir <out>/swift --add_version false --seed <seed> --report_to none ...

(``python -m swift.cli.main`` is the ``swift`` command of the running environment.) Every key of
``backends.swift`` except ``aworld`` (our own options) and ``rollout`` (the rollout server's) is
passed through as ``--key value`` and wins over these defaults; ``external_plugins`` and
``callbacks`` are added to ours, since the scheduler and reward functions cannot work without
them. ``AWORLD_SWIFT_JOB`` points ms-swift's processes at the serialized job (``<out>/job.json``).

Server mode (``backends.swift.vllm_mode: server``): ms-swift's trainer samples through a separate
``swift rollout`` server, which runs the scheduler, so the episodes. The trainer's command gets
``--use_vllm true --vllm_server_host 127.0.0.1 --vllm_server_port 8000
--rollout_importance_sampling_mode token_truncate`` (each unless set; ``null`` turns the
correction off), and the plan carries the server's command (``config.rollout_server``)::

    python -m swift.cli.main rollout --model <model.path> --external_plugins <aworld_swift/swift_plugin.py>
        --multi_turn_scheduler aworld [--max_turns N] --host 127.0.0.1 --port 8000 --seed <seed> ...

with the plan's environment plus ``config.rollout_server.env`` (``AWORLD_SWIFT_SYNC_HOST``: where
the weight-sync group listens, the server's host; on vLLM's CPU build ``VLLM_PLUGINS=none`` and,
unless ``vllm_gpu_memory_utilization`` is set, ``VLLM_CPU_KVCACHE_SPACE=1``). Launching starts it
(log ``<out>/rollout_server.log``), waits for its ``/health``, runs the trainer and stops it with
the run; with ``backends.swift.aworld.start_rollout_server: false`` the server is the user's (a
note prints the line to run first). On a machine without a GPU, aworld-swift's ms-swift plugin
makes both run (:mod:`aworld_swift.server_sync`).

``backends.swift.rollout`` holds the server's own arguments (``vllm_gpu_memory_utilization``,
``vllm_tensor_parallel_size``, ...; ``external_plugins`` added to ours). Secrets never go on a
command line: ``hub_token``, ``swanlab_token`` and the server's ``api_key`` are refused, and the
processes read the ``AWORLD_*`` settings from their own environment.

Launching (not ``--dry-run``) first converts the datasets to ms-swift rows (listing the agent's
tools once, see :mod:`aworld_swift.rows`), then runs the command.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aworld_core.errors import AworldError, ConfigError, UsageError
from aworld_core.schemas import LaunchPlan, TrainResult
from aworld_core.secrets import public_job_dump, secret_environment
from aworld_swift.rows import TEST_FILE, TRAIN_FILE
from aworld_swift.runtime import JOB_ENV, OPTIONS_KEY, TRAJECTORIES_FILE, SwiftOptions
from aworld_swift.server_sync import SYNC_HOST_ENV

BACKEND = "swift"
JOB_FILE = "job.json"
ROLLOUT_LOG = "rollout_server.log"
SWIFT_OUTPUT = "swift"
ROLLOUT_KEY = "rollout"  # backends.swift.rollout: the arguments of the `swift rollout` server (server mode)
PLUGIN_FILE = Path(__file__).resolve().with_name("swift_plugin.py")
ADDITIVE = ("external_plugins", "callbacks")  # ours are kept when the user adds their own
LOCAL_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# ms-swift's TemplateArguments that decide how a conversation is rendered into tokens: the rollout
# server renders the prompts the trainer trains on, so it gets the trainer's values (the others,
# TEMPLATE_TRAINING_ONLY, shape only the trainer's batches); tests/swift checks the split is complete
TEMPLATE_KEYS = ("template", "system", "max_length", "truncation_strategy", "max_pixels", "agent_template",
                 "norm_bbox", "use_chat_template", "template_backend", "response_prefix", "enable_thinking",
                 "preserve_thinking", "add_non_thinking_prefix", "disable_ignore_empty_think")
TEMPLATE_TRAINING_ONLY = ("padding_side", "padding_free", "loss_scale", "sequence_parallel_size", "is_binary_loss_scale")
# the job's rollout.sampling -> ms-swift's GRPO arguments (the same names; top_k 0 is "off" to
# ms-swift's engines too: vLLM's -1, transformers' None)
SAMPLING_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
SWIFT_GROUP_PORT = 51216  # ms-swift's VLLMClient: the weight-sync group's port when vllm_server_group_port is unset
# server mode: ms-swift's rollout importance sampling on by default (the trainer is not the sampler:
# another process, another kernel); backends.swift.rollout_importance_sampling_mode: null turns it off
SERVER_IS_MODE = "token_truncate"
# ms-swift arguments that carry a secret: a command line is visible to every user of the machine
SECRETS = {
    "hub_token": "set HF_TOKEN (or MODELSCOPE_API_TOKEN) in the environment instead",
    "swanlab_token": "set SWANLAB_API_KEY in the environment instead",
    "api_key": "ms-swift 4.6's trainer cannot send a rollout server key anyway: keep the server on "
               "127.0.0.1 (the default) or a private network",
}


def base_args(job: Any, out: Path, dataset: str, val_dataset: str | None, **middle: Any) -> dict[str, Any]:
    """The defaults ``swift rlhf`` and ``swift sft`` share (``middle`` goes after the datasets)."""
    return {
        "model": job.resolve_path(job.model.path) if job.model is not None else None,
        "check_model": False,  # ms-swift would contact the ModelScope hub at every start
        "fp16": False,  # ms-swift turns fp16 on even for a float32 model on the CPU
        "dataset": dataset, "val_dataset": val_dataset, **middle,
        "output_dir": str(out / SWIFT_OUTPUT), "add_version": False,
        "seed": job.seed, "report_to": list(job.logging.report_to) or ["none"],
    }


def user_args(job: Any) -> dict[str, Any]:
    """``backends.swift`` without our own sections (``aworld``, ``rollout``): ms-swift's arguments."""
    return {k: v for k, v in job.backend_section(BACKEND).items() if k not in (OPTIONS_KEY, ROLLOUT_KEY)}


def swift_args(job: Any, output_dir: Path) -> dict[str, Any]:
    """The ``swift rlhf`` arguments: our defaults, then ``backends.swift`` (which wins)."""
    out = output_dir.resolve()
    defaults: dict[str, Any] = {"rlhf_type": "grpo", **base_args(
        job, out, str(out / TRAIN_FILE), str(out / TEST_FILE) if job.test_dataset is not None else None,
        external_plugins=[str(PLUGIN_FILE)], multi_turn_scheduler="aworld", max_turns=job.rollout.max_turns,
        reward_funcs=["aworld"], callbacks=["aworld"],
    )}
    user = user_args(job)
    # the job's rollout.sampling: ms-swift's trainer builds its request_config from these arguments
    # (sent to the rollout server in server mode), so its engine samples every turn with them
    defaults.update(job.rollout.sampling.native(SAMPLING_KEYS, user, prefix="backends.swift.", backend="swift"))
    args = merge_args(defaults, user, "backends.swift")
    _check_compaction(job, args)
    _check_template_backend(args.get("template_backend"), "backends.swift.template_backend")
    if args.get("vllm_mode") == "server":
        if args.get("use_vllm") is False:
            raise ConfigError("backends.swift.vllm_mode is 'server' but use_vllm is false: set use_vllm: true "
                              "(the rollout server is ms-swift's vLLM server mode)")
        args["use_vllm"] = True
        if "rollout_importance_sampling_mode" not in user:
            args["rollout_importance_sampling_mode"] = SERVER_IS_MODE
        if args.get("vllm_server_host") is None and args.get("vllm_server_base_url") is None:
            args["vllm_server_host"] = [LOCAL_HOST]
        ports = args.get("vllm_server_port")
        if not (isinstance(ports, list) and len(ports) > 1):  # several servers: the user's own list
            args["vllm_server_port"] = [_server_port(job, args)]
    return {key: value for key, value in args.items() if value is not None}


def _check_template_backend(value: Any, where: str) -> None:
    """ms-swift's ``jinja`` template backend renders the id-backed assistant message that continues every
    multi-turn trajectory as the text of its id list (``aworld_swift.scheduler.JINJA_BACKEND``)."""
    if value == "jinja":
        from aworld_swift.trajectory import JINJA_BACKEND

        raise ConfigError(f"{where} is 'jinja': {JINJA_BACKEND}")


def _check_compaction(job: Any, args: dict[str, Any]) -> None:
    """An agent that compacts its context trains episodes of several segments: ms-swift must then
    use a token-mean loss (``aworld_swift.segments``), refused here as the trainer would refuse it."""
    from aworld_swift.segments import REFUSED_SETTINGS, TOKEN_MEAN_LOSSES

    if getattr(job.agent, "compaction", None) is None:
        return
    loss_type = args.get("loss_type", "grpo")
    if loss_type not in TOKEN_MEAN_LOSSES:
        raise ConfigError(
            f"agent.compaction makes episodes of several training segments, and backends.swift.loss_type is "
            f"{loss_type!r} (ms-swift's default 'grpo' averages each row: an episode would weigh as much as its "
            f"number of segments); set backends.swift.loss_type to one of {', '.join(TOKEN_MEAN_LOSSES)} (dapo)"
        )
    # what the trainer refuses for a batch with a segmented episode (aworld_swift.segments), refused
    # before anything starts rather than at the first batch holding a compacted episode
    for key, why in REFUSED_SETTINGS.items():
        if args.get(key) in (True, "true", "True"):
            raise ConfigError(
                f"agent.compaction makes episodes of several training segments, and backends.swift.{key} is on "
                f"({why}); set backends.swift.{key}: false, or drop agent.compaction"
            )


def rollout_args(job: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The ``swift rollout`` server's arguments in server mode: what it must share with the
    trainer (model, template, scheduler, plugins, turn limit, port), then ``backends.swift.rollout``."""
    shared = ("model", "model_type", "model_revision", "torch_dtype", "use_hf", "max_turns", "seed", *TEMPLATE_KEYS)
    defaults: dict[str, Any] = {key: args.get(key) for key in shared}
    defaults.update({
        "external_plugins": [str(PLUGIN_FILE)],
        "multi_turn_scheduler": "aworld",
        "host": LOCAL_HOST,  # reachable from this machine only: ms-swift's trainer cannot send a key
        "port": args["vllm_server_port"][0],
    })
    merged = merge_args(defaults, _rollout_section(job), f"backends.swift.{ROLLOUT_KEY}")
    _check_template_backend(merged.get("template_backend"), f"backends.swift.{ROLLOUT_KEY}.template_backend")
    return {key: value for key, value in merged.items() if value is not None}


def _rollout_section(job: Any) -> dict[str, Any]:
    section = job.backend_section(BACKEND).get(ROLLOUT_KEY) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"backends.swift.{ROLLOUT_KEY} must be a mapping of 'swift rollout' arguments, got {section!r}")
    return dict(section)


def rollout_env(job: Any, server: dict[str, Any]) -> dict[str, str]:
    """What the rollout server gets beyond the plan's environment."""
    env = {SYNC_HOST_ENV: str(server["host"])}
    from aworld_swift.vllm_cpu_sync import cpu_build_installed

    if cpu_build_installed():
        if "VLLM_PLUGINS" not in os.environ:
            env["VLLM_PLUGINS"] = "none"  # ms-swift's vLLM plugin needs torchvision (no CPU wheel); ours is none
        if "vllm_gpu_memory_utilization" not in _rollout_section(job) and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            # vLLM's CPU build reserves vllm_gpu_memory_utilization (ms-swift: 0.9) of the RAM, and refuses
            # to start when that much is not free: 1 GiB of KV cache, as for the core's vLLM servers
            env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    return env


def _check_started_server(job: Any, args: dict[str, Any], server: dict[str, Any]) -> None:
    """A server the launch starts runs here: the trainer must connect to it, and only to it."""
    hosts = args.get("vllm_server_host") or []
    if args.get("vllm_server_base_url") is not None or [str(h) for h in hosts] not in (
            [LOCAL_HOST], ["localhost"], [str(server["host"])]):
        raise ConfigError(
            "backends.swift.vllm_server_host / vllm_server_base_url name another machine's rollout server, but "
            f"launching starts one here ({server['host']}:{server['port']}); set backends.swift.{OPTIONS_KEY}."
            "start_rollout_server: false to use yours, or drop them"
        )


def _server_port(job: Any, args: dict[str, Any]) -> int:
    """The one port the server listens on and the trainer connects to."""
    ports = args.get("vllm_server_port")
    trainer = ports[0] if isinstance(ports, list) and ports else ports
    server = _rollout_section(job).get("port")
    if trainer is not None and server is not None and int(trainer) != int(server):
        raise ConfigError(
            f"backends.swift.vllm_server_port ({trainer}) and backends.swift.{ROLLOUT_KEY}.port ({server}) differ: "
            f"the trainer connects where the rollout server listens; set one of them"
        )
    return int(server if server is not None else trainer if trainer is not None else DEFAULT_PORT)


def merge_args(defaults: dict[str, Any], user: dict[str, Any], where: str) -> dict[str, Any]:
    args = dict(defaults)
    for key, value in user.items():
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise ConfigError(f"{where} has a bad key {key!r}: use ms-swift's argument names without '--'")
        if key in SECRETS and value is not None:
            raise ConfigError(f"{where}.{key} would put a secret on the command line: {SECRETS[key]}")
        if key in ADDITIVE and value is not None:
            extra = value if isinstance(value, list) else [value]
            args[key] = list(dict.fromkeys([*(defaults.get(key) or []), *map(str, extra)]))
        else:
            args[key] = value
    return args


def command_line(args: dict[str, Any], subcommand: str = "rlhf") -> list[str]:
    command = [sys.executable, "-m", "swift.cli.main", subcommand]
    for key, value in args.items():
        command.append(f"--{key}")
        command += _values(key, value)
    return command


def _values(key: str, value: Any) -> list[str]:
    if value is False and key.endswith("_strategy"):
        return ["no"]  # YAML reads `save_strategy: no` as false; the trainer's strategies spell it 'no'
    if isinstance(value, (list, tuple)):
        if not value:
            raise ConfigError(f"backends.swift.{key} is an empty list; remove it or give values")
        return [_scalar(v) for v in value]
    return [_scalar(value)]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def missing_for_launch(job: Any) -> list[str]:
    missing = []
    if job.model is None and "model" not in job.backend_section(BACKEND):
        missing.append("model (model.path: the model ms-swift trains)")
    if job.train_dataset is None:
        missing.append("train_dataset")
    if job.reward is None:
        missing.append("reward")
    return missing


def build_plan(job: Any, output_dir: Path) -> LaunchPlan:
    options = SwiftOptions.from_job(job)  # bad options fail here, before anything runs
    out = output_dir.resolve()
    args = swift_args(job, out)
    notes = [f"the job lacks {item}: set it before launching" for item in missing_for_launch(job)]
    notes += model_dir_notes(args)
    env = {JOB_ENV: str(out / JOB_FILE), "TRL_EXPERIMENTAL_SILENCE": "1"}
    if job.base_dir:  # ms-swift's processes import the job's module:function references
        parts = [job.base_dir, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    if _colocated_cpu_vllm(args) and "VLLM_PLUGINS" not in os.environ:
        # ms-swift's own vLLM plugin (register_uembed_model) imports vLLM's Qwen3.5-VL model, which needs
        # torchvision; vLLM's CPU build runs without it (only CUDA torchvision wheels exist)
        env["VLLM_PLUGINS"] = "none"
    config: dict[str, Any] = {"swift_args": args}
    if args.get("vllm_mode") == "server":
        server = rollout_args(job, args)
        server_command = command_line(server, "rollout")
        server_env = rollout_env(job, server)
        start = options.start_rollout_server
        if start:
            _check_started_server(job, args, server)
        config["rollout_server"] = {"args": server, "command": server_command, "env": server_env, "start": start,
                                    "log": str(out / ROLLOUT_LOG), "startup_timeout_s": options.rollout_startup_timeout_s}
        if start:
            notes.append(
                f"server mode: launching starts the rollout server (config.rollout_server: its command, run with the "
                f"environment above plus {', '.join(f'{k}={v}' for k, v in server_env.items())}; log {out / ROLLOUT_LOG}), "
                f"waits up to {options.rollout_startup_timeout_s:.0f} s for its /health, runs the trainer, and stops "
                "the server with the run"
            )
        else:
            notes.append(
                "server mode: start the rollout server first, where the GPUs for sampling are (it runs the episodes; "
                f"the trainer waits for it up to vllm_server_timeout), with the environment above and then launch: "
                f"{server_line(server_command, {**env, **server_env})}"
            )
        notes.append(
            f"the rollout server reads the job from {out / JOB_FILE} when its first request arrives (launching "
            "writes it) and writes episodes beside it; it reads AWORLD_* settings (API keys, MCP tokens) from its "
            "own environment or .env, never from its command line; start it afresh for every launch"
        )
        needed = sorted(secret_environment(job))
        if needed and not start:
            notes.append(f"the job file refers to secrets by environment variable: start the rollout server with "
                         f"{', '.join(needed)} set in its environment")
    notes += [
        f"launch writes {out / TRAIN_FILE}" + (f" and {out / TEST_FILE}" if job.test_dataset is not None else "")
        + " (rows: messages, tools = the agent's tools listed once at launch, aworld_sample)",
        f"episodes are written to {out / TRAJECTORIES_FILE}; ms-swift's logs to {out / SWIFT_OUTPUT}",
    ]
    return LaunchPlan(
        backend=BACKEND,
        command=command_line(args),
        cwd=str(out),
        env=env,
        # secrets as {"env": NAME} references: the launch exports them to ms-swift's processes
        files={JOB_FILE: json.dumps(public_job_dump(job), indent=2, ensure_ascii=False) + "\n"},
        config=config,
        notes=notes,
    )


def _colocated_cpu_vllm(args: dict[str, Any]) -> bool:
    """ms-swift samples with a colocated vLLM engine and the environment holds vLLM's CPU build."""
    from aworld_swift.vllm_cpu_sync import cpu_build_installed

    return args.get("use_vllm") is True and args.get("vllm_mode", "colocate") == "colocate" and cpu_build_installed()


def server_line(command: list[str], env: dict[str, str]) -> str:
    """The rollout server's command as one shell line, its environment in front (``env K=V ...``)."""
    return shlex.join(["env", *(f"{key}={value}" for key, value in env.items()), *command])


def model_dir_notes(args: dict[str, Any]) -> list[str]:
    """ms-swift cannot tell the model type and template of a local model directory by itself."""
    model_dir = Path(str(args.get("model", "")))
    if not model_dir.is_dir() or {"model_type", "template"} <= set(args):
        return []
    try:
        model_type = json.loads((model_dir / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        model_type = None
    return ["ms-swift needs backends.swift.model_type and backends.swift.template for a local model directory "
            f"(e.g. model_type: qwen2, template: qwen2_5 for a Qwen2 model); the config's model_type is {model_type!r}"]


def output_dir_of(job: Any, plan: LaunchPlan) -> Path:
    """The plan's working directory (made): where the datasets, the job file and the episodes go."""
    output_dir = Path(plan.cwd) if plan.cwd else Path(job.resolved_output_dir())
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def write_datasets(job: Any, output_dir: Path) -> dict[str, str]:
    """Convert the job's datasets to ms-swift rows under ``output_dir``; returns what was written."""
    from aworld_core import get_plugin_manager, get_settings
    from aworld_core.datasets import load_dataset_section
    from aworld_core.worker import LoopThread
    from aworld_swift.rows import list_agent_tools, write_rows

    train = load_dataset_section(job.train_dataset, job.base_dir)
    if not train:
        raise UsageError("train_dataset has no rows")
    test = load_dataset_section(job.test_dataset, job.base_dir) if job.test_dataset is not None else None
    loop = LoopThread("aworld-swift-tools")
    try:
        if getattr(job.agent, "openai_agent", None):
            tools = _openai_agent_tools(job, train[0], loop)
        else:
            agent = get_plugin_manager().hook.build_agents(job=job, settings=get_settings())
            if agent is None:
                raise UsageError("no agent: set 'agent' (fields or factory) in the job config")
            tools = loop.run(list_agent_tools(agent, train[0], timeout=job.rollout.timeout_for(agent)))
    finally:
        loop.close()
    written = {TRAIN_FILE: str(write_rows(train, tools, output_dir / TRAIN_FILE))}
    if test is not None:
        written[TEST_FILE] = str(write_rows(test, tools, output_dir / TEST_FILE))
    return written


def _openai_agent_tools(job: Any, sample: Any, loop: Any) -> list[dict[str, Any]]:
    """The tools of ``agent.openai_agent``'s first request (:func:`aworld_swift.rows.list_openai_agent_tools`);
    a forced first turn is refused in server mode, whose driver cannot honour it."""
    from aworld_core.worker import OpenAIAgent
    from aworld_swift.rows import list_openai_agent_tools
    from aworld_swift.trajectory import FORCED_FIRST_TURN_IN_SERVER_MODE

    agent = OpenAIAgent.from_job(job)
    tools, choice = loop.run(list_openai_agent_tools(agent, sample, timeout=job.rollout.timeout_for(agent)))
    if choice not in (None, "auto", "none") and job.backend_section(BACKEND).get("vllm_mode") == "server":
        raise UsageError(f"agent.openai_agent {agent.ref!r} asks tool_choice {choice!r} on its first call: "
                         + FORCED_FIRST_TURN_IN_SERVER_MODE)
    return tools


def launch(job: Any, plan: LaunchPlan) -> TrainResult:
    """Convert the datasets, then run the plan's command (the core's launcher writes the job file)."""
    from aworld_core.launch import execute_plan

    missing = missing_for_launch(job)
    if missing:
        raise UsageError(f"the swift backend cannot launch this job: set {' and '.join(missing)} in the job config")
    output_dir = output_dir_of(job, plan)
    datasets = write_datasets(job, output_dir)
    for stale in output_dir.glob(TRAJECTORIES_FILE.replace(".jsonl", "*.jsonl")):
        stale.unlink()  # ms-swift's processes append this run's episodes
    with rollout_server(plan, output_dir) as server:
        try:
            result = execute_plan(plan, output_dir)
        except AworldError as exc:
            if server is None:
                raise
            # the trainer only sees "Server 0 failed: 500": the cause is in the server's log
            raise AworldError(f"{exc}\nthe rollout server's log ({server.log_path}) ends with:\n"
                              f"{server.log_tail(3000)}") from exc
    result.artifacts.update(datasets)
    if server is not None:
        result.artifacts["rollout_server_log"] = str(server.log_path)
        result.metrics["rollout_server_startup_s"] = round(server.startup_s, 1)
    swift_dir = Path(plan.config.get("swift_args", {}).get("output_dir", output_dir / SWIFT_OUTPUT))
    trajectories = output_dir / TRAJECTORIES_FILE
    if trajectories.exists():
        result.artifacts["trajectories"] = str(trajectories)
    log = swift_dir / "logging.jsonl"
    if log.exists():
        result.artifacts["swift_log"] = str(log)
        result.metrics.update(last_metrics(log))
    return result


@contextmanager
def rollout_server(plan: LaunchPlan, output_dir: Path) -> Iterator[Any]:
    """The plan's ``swift rollout`` server, running while the block runs (server mode with
    ``start_rollout_server``); ``None`` otherwise. The job file is written first: the server's
    scheduler reads it."""
    spec = plan.config.get("rollout_server") or {}
    if not spec.get("start"):
        yield None
        return
    from aworld_core.launch import write_plan_files
    from aworld_swift.rollout_server import RolloutServer

    write_plan_files(plan, output_dir)
    args = spec["args"]
    group_ports = plan.config["swift_args"].get("vllm_server_group_port") or [SWIFT_GROUP_PORT]
    server = RolloutServer(spec["command"], {**plan.env, **spec["env"]}, host=str(args["host"]), port=int(args["port"]),
                           log_path=spec["log"], startup_timeout_s=float(spec["startup_timeout_s"]),
                           group_port=int(group_ports[0] if isinstance(group_ports, list) else group_ports))
    with server:
        yield server


def last_metrics(log: Path) -> dict[str, Any]:
    """The last training-step entry and the run summary from ms-swift's ``logging.jsonl``."""
    step: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if "train_runtime" in entry:
            summary = entry
        elif "loss" in entry or "reward" in entry:
            step = entry
    keys = ("reward", "reward_std", "loss", "aworld/failed_rate", "aworld/tool_calls", "global_step/max_steps")
    metrics = {k: step[k] for k in keys if k in step}
    if "train_runtime" in summary:
        metrics["train_runtime"] = summary["train_runtime"]
    return metrics
