"""Everything a run would reject, checked before anything starts: one function for both.

``validate_job`` is what the CLI (a real run, ``--dry-run`` and ``--eval``) and ``AgentTrainer``
call before planning, so a dry-run refuses exactly what a launch would, with the same message
and exit code 2. It checks what the core knows: the backend's framework, the inputs a training
backend needs, local paths, the datasets (loaded, as a run loads them), the environment, the
agent's MCP config, the reward and its signature, and ``logging.report_to``. What only a backend
knows (its own config class) its ``plan_launch`` checks, which both paths call too.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

from aworld_core.errors import ConfigError, DatasetError, FrameworkNotInstalledError, UsageError

# report_to names -> (the module that must import, what to install). Names not here are left to
# the backend (its own config class or argument parser checks them). tensorboard: transformers and
# AReaL also write with tensorboardX.
REPORTERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard|tensorboardX", "pip install tensorboard"),
    "wandb": ("wandb", "pip install wandb"),
    "trackio": ("trackio", "pip install trackio"),
    "mlflow": ("mlflow", "pip install mlflow"),
    "swanlab": ("swanlab", "pip install swanlab"),
    "comet_ml": ("comet_ml", "pip install comet_ml"),
    "clearml": ("clearml", "pip install clearml"),
    "neptune": ("neptune", "pip install neptune"),
    "dvclive": ("dvclive", "pip install dvclive"),
}


def validate_job(backend: str | None, job: Any, *, evaluation: bool = False) -> None:
    """Raise the error a run of ``job`` on ``backend`` would raise for bad input, before it starts.

    ``evaluation``: the job is run with ``--eval`` (no backend; its test or train data must hold
    tasks). A ``UsageError`` (exit code 2) names what is wrong and how to fix it.
    """
    if backend is not None:
        validate_backend(backend, job)
    _check_paths(job)
    _check_environment(job)
    _check_mcp_config(job)
    _check_datasets(job, evaluation=evaluation)
    _check_reward(job)
    check_report_to(job.logging.report_to)


def validate_backend(backend: str, job: Any) -> None:
    """What training ``job`` on ``backend`` needs beyond a valid job: the framework and the inputs."""
    require_framework(backend)
    _check_training_inputs(backend, job)


def require_framework(backend: str) -> None:
    """``FrameworkNotInstalledError`` with the plugin's install command when the backend's RL
    framework is not importable here (a dry-run refuses it as the launch does)."""
    from aworld_core.plugins import get_plugin_manager

    spec = get_plugin_manager().catalog().backend(backend)
    if not spec.framework_installed():
        raise FrameworkNotInstalledError(
            f"backend '{backend}' needs the '{spec.framework}' framework, which is not installed in "
            f"this environment; install it with: {spec.install_text()}"
        )


def _check_training_inputs(backend: str, job: Any) -> None:
    """A backend that drives an RL framework trains ``model`` on data with a reward (an SFT job:
    on ``sft.train``); every shipped one refuses to launch without them."""
    from aworld_core.plugins import get_plugin_manager

    if get_plugin_manager().catalog().backend(backend).framework is None:
        return  # a framework-free backend (an example, a test double) says what it needs itself
    missing = []
    if job.model is None:
        missing.append("model.path (the model to train)")
    if job.sft is None:
        if job.train_dataset is None:
            missing.append("train_dataset (the training tasks)")
        if job.reward is None:
            missing.append("reward.name (a registered reward or 'module:function')")
    if missing:
        raise UsageError(f"the {backend} backend cannot train this job: set {', '.join(missing)} in the job config")


def _check_paths(job: Any) -> None:
    """Local files the job names must exist (a model with ``model.build`` is made at launch)."""
    problems: list[tuple[str, object, str]] = []
    model = job.model
    if model is not None:
        from aworld_core.config import names_local_path

        base = job.base_dir or Path.cwd()
        if not model.build and names_local_path(model.path, base):
            path = job.resolve_path(model.path)
            if not Path(path).exists():
                problems.append(("model.path", path, "an existing model directory (or set model.build to create it)"))
        if model.tokenizer and names_local_path(model.tokenizer, base):
            path = job.resolve_path(model.tokenizer)
            if not Path(path).exists() and not (model.build and path == job.resolve_path(model.path)):
                problems.append(("model.tokenizer", path, "an existing tokenizer directory"))
        if model.chat_template and not Path(job.resolve_path(model.chat_template)).is_file():
            problems.append(("model.chat_template", model.chat_template, "an existing Jinja template file"))
    for role in ("train_dataset", "test_dataset"):
        section = getattr(job, role)
        if section is not None and section.path is not None:
            path = job.resolve_path(section.path)
            if not Path(path).exists():
                problems.append((f"{role}.path", path, "an existing JSONL, JSON, parquet or CSV file"))
    if job.sft is not None:
        for key in ("train", "val", "tools"):
            value = getattr(job.sft, key)
            if value and "://" not in value and not Path(job.resolve_path(value)).exists():
                problems.append((f"sft.{key}", value, "an existing file"))
    if problems:
        lines = "\n".join(f"  {loc}: {value!r} does not exist; expected {expected}" for loc, value, expected in problems)
        raise ConfigError(f"the job names files that do not exist:\n{lines}", problems)


def _check_environment(job: Any) -> None:
    if job.environment is not None:
        environment_command(job)


def environment_command(job: Any) -> list[str]:
    """The serve command of the job's ``environment:`` with its args; ``UsageError`` naming the
    installed environments when it is unknown."""
    from aworld_core.plugins import get_plugin_manager

    catalog = get_plugin_manager().catalog()
    provided = catalog.get("environment", job.environment.name)
    if provided is None or not provided.spec.serve_command:
        known = ", ".join(sorted(catalog.items("environment"))) or "none"
        raise UsageError(
            f"environment '{job.environment.name}' is not installed or has no serve command; "
            f"installed environments: {known} (see --list)"
        )
    return [*provided.spec.serve_command, *job.environment.args]


def _placeholders(config: Any) -> Any:
    """``mcp_config`` with ``{"env": NAME}`` references as text: their variables are set at launch."""
    data = copy.deepcopy(config)
    servers = data.get("mcpServers", data.get("mcp_servers")) if isinstance(data, dict) else None
    for server in (servers or {}).values():
        for key in ("headers", "env"):
            values = server.get(key) if isinstance(server, dict) else None
            if isinstance(values, dict):
                for name, value in values.items():
                    if isinstance(value, dict) and set(value) == {"env"}:
                        values[name] = f"<${value['env']}>"
    return data


def _check_mcp_config(job: Any) -> None:
    """The agent's ``mcp_config`` keys and values (a misspelt ``headers`` would run unauthenticated)
    and that ``mcp_servers`` names servers it defines."""
    from aworld_core.tools.mcp_config import parse_mcp_config, select_servers

    agent = job.agent
    if agent.mcp_config is None:  # the environment's (MCP_SERVER_URL) is built at run time
        return
    try:
        parsed = parse_mcp_config(_placeholders(agent.mcp_config))
    except ConfigError as exc:
        raise ConfigError(f"agent.mcp_config: {exc}", exc.problems) from None
    select_servers(parsed, agent.mcp_servers)


def _check_datasets(job: Any, *, evaluation: bool) -> None:
    """Load the datasets as a run does (local files and registered datasets; a hub name needs
    the network and is left to the run) and refuse an empty one."""
    from aworld_core.datasets import load_dataset_section
    from aworld_core.plugins import get_plugin_manager

    catalog = get_plugin_manager().catalog()
    roles = ("train_dataset", "test_dataset")
    if evaluation:
        section_role = "test_dataset" if job.test_dataset is not None else "train_dataset"
        if getattr(job, section_role) is None:
            raise UsageError("--eval needs test_dataset (or train_dataset) in the job config")
        roles = (section_role,)
    for role in roles:
        section = getattr(job, role)
        if section is None or (section.name is not None and catalog.get("dataset", section.name) is None):
            continue
        samples = load_dataset_section(section, job.base_dir)
        if not samples and (evaluation or role == "train_dataset"):
            where = section.path or section.name
            raise DatasetError(
                f"{role} '{where}' has no rows{' after limit' if section.limit else ''}; "
                f"{'evaluation' if evaluation else 'training'} needs at least one task"
            )


def _check_reward(job: Any) -> None:
    """The reward resolves and takes the keywords it will be called with."""
    import sys

    from aworld_core.rewards.registry import check_reward_signature, resolve_reward

    if job.reward is None:
        return
    name = job.reward.name
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    # a reward defined in the running script is not imported again here (that would re-run it)
    if main_file and name.startswith(f"{Path(main_file).resolve()}:"):
        return
    reward = resolve_reward(name, base_dir=job.base_dir, trajectory_aware=job.reward.trajectory_aware)
    check_reward_signature(reward)


def check_report_to(report_to: list[str] | str | None) -> None:
    """Every ``report_to`` logger that needs a package has it, else the install command."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    missing = []
    for name in names:
        modules, install = REPORTERS.get(name, (None, None))
        if modules is not None and all(importlib.util.find_spec(m) is None for m in modules.split("|")):
            missing.append((name, install))
    if missing:
        raise ConfigError(
            "logging.report_to names loggers whose packages are not installed: "
            + "; ".join(f"'{name}' (install it with: {install})" for name, install in missing)
            + "; or remove them from logging.report_to",
            [("logging.report_to", name, install or "") for name, install in missing],
        )
