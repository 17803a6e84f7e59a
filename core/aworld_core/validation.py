"""Everything a run would reject, checked before anything starts: one function for both.

``validate_job`` is what the CLI (a real run, ``--dry-run`` and ``--eval``) and ``AgentTrainer``
call before planning, so a dry-run refuses exactly what a launch would, with the same message
and exit code 2. Every check runs, and all the problems they find are reported in one error
(:class:`JobProblems` collects them), each naming its field: a user fixes a job in one pass
instead of rerunning once per mistake. It checks what the core knows: the backend's framework, the inputs a training
backend needs, local paths, the datasets (loaded, as a run loads them), the environment, the
agent's MCP config, the reward and its signature, and ``logging.report_to``. What only a backend
knows (its own config class) its planner checks, which both paths call too; what a backend
declares it honours (:class:`~aworld_core.specs.Capabilities`) is checked here.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
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


class JobProblems:
    """The problems found in one job, each with the field it is about.

    ``check(field)`` runs a block and keeps the :class:`UsageError` it raises (anything else is a
    bug and propagates); ``raise_all`` raises nothing, the one problem as it was, or a
    :class:`ConfigError` listing every problem (exit code 2, ``problems`` concatenated)."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, UsageError]] = []

    @contextmanager
    def check(self, field: str) -> Iterator[None]:
        try:
            yield
        except UsageError as exc:
            self.errors.append((field, exc))

    def add(self, field: str, error: UsageError) -> None:
        self.errors.append((field, error))

    def raise_all(self) -> None:
        if not self.errors:
            return
        if len(self.errors) == 1:  # as it was raised (its message names its field)
            raise self.errors[0][1]
        lines = []
        problems: list[tuple[str, object, str]] = []
        for number, (field, error) in enumerate(self.errors, 1):
            text = str(error).replace("\n", "\n     ")
            lines.append(f"  {number}. {field}: {text}")
            problems += getattr(error, "problems", None) or [(field, None, str(error))]
        raise ConfigError(
            f"the job has {len(self.errors)} problems (all listed; fix them and run again):\n" + "\n".join(lines),
            problems,
        )


def validate_job(
    backend: str | None, job: Any, *, evaluation: bool = False, problems: JobProblems | None = None
) -> None:
    """Raise the error a run of ``job`` on ``backend`` would raise for bad input, before it starts.

    ``evaluation``: the job is run with ``--eval`` (no backend; its test or train data must hold
    tasks, and it needs a reward). Every check runs; what they find is raised together (a
    ``UsageError``, exit code 2, naming each field and its fix). ``problems``: ones the caller
    found already (``AgentTrainer``'s own checks), reported with these.
    """
    problems = problems if problems is not None else JobProblems()
    if backend is not None:
        validate_backend(backend, job, problems)
    missing = _missing_paths(job)
    if len(missing) == 1 and not problems.errors:
        with problems.check(missing[0][0]):
            _raise_missing_paths(missing)
    else:  # each file its own problem, under its field
        for loc, value, expected in missing:
            problems.add(loc, ConfigError(f"{value!r} does not exist; expected {expected}", [(loc, value, expected)]))
    with problems.check("environment.name"):
        _check_environment(job)
    with problems.check("agent.mcp_config"):
        _check_mcp_config(job)
    with problems.check("agent_policies"):  # every agent of the Swarm mapped to a policy
        from aworld_core.policies import check_job_agents

        check_job_agents(job)
    _check_datasets(job, evaluation=evaluation, problems=problems, missing={loc for loc, _, _ in missing})
    if evaluation and job.reward is None:
        problems.add("reward", UsageError("--eval needs a reward in the job config (e.g. reward: {name: gsm8k})"))
    with problems.check("reward.name"):
        _check_reward(job)
    with problems.check("logging.report_to"):
        check_report_to(job.logging.report_to)
    problems.raise_all()


def validate_backend(backend: str, job: Any, problems: JobProblems | None = None) -> None:
    """What training ``job`` on ``backend`` needs beyond a valid job: the framework and the inputs."""
    own = problems if problems is not None else JobProblems()
    with own.check("backend"):
        require_framework(backend)
    with own.check("model, train_dataset, reward"):
        _check_training_inputs(backend, job)
    with own.check("policies"):  # several policies: only on a backend that trains several
        from aworld_core.policies import check_policy_backend

        check_policy_backend(backend, job)
    check_capabilities(backend, job, own)
    with own.check("agent.temperature, agent.top_p, agent.top_k"):
        check_training_sampling(job)
    if problems is None:
        own.raise_all()


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


def check_capabilities(backend: str, job: Any, problems: JobProblems) -> None:
    """What the job asks for that the backend does not declare it honours (its
    :class:`~aworld_core.specs.Capabilities`, its SFT planner): each a problem naming the backend
    and the setting, so nothing is accepted and then silently dropped."""
    from aworld_core.errors import PluginConflictError, UnknownBackendError
    from aworld_core.plugins import get_plugin_manager

    catalog = get_plugin_manager().catalog()
    try:
        spec = catalog.backend(backend)
    except (UnknownBackendError, PluginConflictError):
        return  # reported by the framework check
    caps = spec.capabilities
    sft = getattr(job, "sft", None) is not None
    if sft and not spec.sft:
        trainers = sorted(name for name, item in catalog.items("backend").items() if item.spec.sft)
        problems.add("sft", UsageError(spec.no_sft_message(trainers)))
    if not sft and getattr(job.agent, "compaction", None) is not None and not caps.segments:
        problems.add("agent.compaction", UsageError(
            f"backend '{backend}' does not train episodes of several segments, which agent.compaction makes "
            f"(each compaction begins a new one); remove agent.compaction, or use a backend that trains "
            f"segments (--list: 'segments')"
        ))
    for name, value in ({} if sft else job.rollout.sampling.given()).items():  # SFT: check_training_sampling
        if name not in caps.sampling:
            honoured = ", ".join(f"rollout.sampling.{k}" for k in sorted(caps.sampling)) or "none"
            problems.add(f"rollout.sampling.{name}", ConfigError(
                f"rollout.sampling.{name}={value!r}: backend '{backend}' does not honour it, so it would be "
                f"ignored; remove it (what '{backend}' honours: {honoured})",
                [(f"rollout.sampling.{name}", value, f"unset on {backend}")],
            ))


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


# the agent's sampling fields that training replaces, and where each belongs in a training job
AGENT_SAMPLING = ("temperature", "top_p", "top_k")


def check_training_sampling(job: Any) -> None:
    """Training sampling has one owner, ``rollout.sampling``: a training job that sets the agent's
    own ``temperature`` / ``top_p`` / ``top_k`` is refused with the field to use instead (every
    backend samples the trained policy with its own settings, so the agent's would be silently
    replaced). They stay for evaluation (``--eval``) and for agents that are not trained. An SFT
    job samples nothing: sampling set there is refused too."""
    given = {name: getattr(job.agent, name) for name in AGENT_SAMPLING if getattr(job.agent, name) is not None}
    sft = getattr(job, "sft", None) is not None
    if sft:
        given_rollout = job.rollout.sampling.given()
        fields = [f"agent.{k}" for k in given] + [f"rollout.sampling.{k}" for k in given_rollout]
        if fields:
            raise ConfigError(
                f"{', '.join(fields)}: an SFT job (sft:) trains on recorded episodes and samples nothing, so "
                f"these would be ignored; remove them",
                [(field, None, "unset in an SFT job") for field in fields],
            )
        return
    if not given:
        return
    rollout = job.rollout.sampling.given()
    moves = ", ".join(f"rollout.sampling.{k}: {v!r}" for k, v in given.items())
    fields = ", ".join(f"agent.{k}" for k in given)
    clash = {k: rollout[k] for k in given if k in rollout and rollout[k] != given[k]}
    also = f" (rollout.sampling already says {', '.join(f'{k}: {v!r}' for k, v in clash.items())})" if clash else ""
    raise ConfigError(
        f"{fields} {'is' if len(given) == 1 else 'are'} the agent's own sampling, used for evaluation (--eval) and "
        f"untrained agents; training samples the trained policy with the job's rollout.sampling, so "
        f"{'it' if len(given) == 1 else 'they'} would be ignored{also}. Use rollout.sampling instead: set "
        f"{moves} and remove {fields} (AgentTrainer: config={{'rollout': {{'sampling': {{...}}}}}}, and an "
        f"AgentConfig without them)",
        [(f"agent.{k}", v, f"unset in training; rollout.sampling.{k}") for k, v in given.items()],
    )


def _check_paths(job: Any) -> None:
    """Local files the job names must exist (a model with ``model.build`` is made at launch)."""
    _raise_missing_paths(_missing_paths(job))


def _missing_paths(job: Any) -> list[tuple[str, object, str]]:
    """``(field, path, expected)`` for each local file the job names that does not exist."""
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
    return problems


def _raise_missing_paths(problems: list[tuple[str, object, str]]) -> None:
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


def _check_datasets(
    job: Any, *, evaluation: bool, problems: JobProblems | None = None, missing: set[str] = frozenset()
) -> None:
    """Load the datasets as a run does (local files and registered datasets; a hub name needs
    the network and is left to the run) and refuse an empty one. A section whose file is in
    ``missing`` (already reported by the path check) is not loaded again."""
    from aworld_core.datasets import load_dataset_section
    from aworld_core.plugins import get_plugin_manager

    own = problems if problems is not None else JobProblems()
    catalog = get_plugin_manager().catalog()
    roles = ("train_dataset", "test_dataset")
    if evaluation:
        section_role = "test_dataset" if job.test_dataset is not None else "train_dataset"
        if getattr(job, section_role) is None:
            own.add("test_dataset", UsageError("--eval needs test_dataset (or train_dataset) in the job config"))
            roles = ()
        else:
            roles = (section_role,)
    for role in roles:
        section = getattr(job, role)
        if section is None or (section.name is not None and catalog.get("dataset", section.name) is None):
            continue
        if f"{role}.path" in missing:
            continue
        with own.check(role):
            samples = load_dataset_section(section, job.base_dir)
            if not samples and (evaluation or role == "train_dataset"):
                where = section.path or section.name
                raise DatasetError(
                    f"{role} '{where}' has no rows{' after limit' if section.limit else ''}; "
                    f"{'evaluation' if evaluation else 'training'} needs at least one task"
                )
    if problems is None:
        own.raise_all()


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
