"""What a plugin declares it provides: backends, tool environments, rewards, reward conventions,
datasets, command-line subcommands.

Plugins return these from the ``register_*`` hooks; the core collects them into a catalog
(``aworld_core.plugins``) tagged with the distribution that provided each one. Each carries its
behaviour (a backend its planner and launcher, a reward its function, a dataset its loader), so
the core calls what it looked up by name instead of asking every plugin.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

#: the ``rollout.sampling`` fields a backend can declare it honours
SAMPLING_FIELDS = ("temperature", "top_p", "top_k")


@dataclass(frozen=True)
class Capabilities:
    """What a backend honours of the settings a job can ask for whatever its backend.

    Validation (``aworld_core.validation``, the same for ``--dry-run`` and a launch) refuses a job
    that asks for something its backend does not declare here, naming the backend and the setting:
    a setting that is accepted takes effect, or it is refused, never silently dropped. Settings a
    backend's own section holds (``backends.<name>``) are its own config class's to check.

    ``sampling``: the ``rollout.sampling`` fields it maps onto its own keys. ``segments``: it
    trains episodes of several token segments (``agent.compaction``, a template that re-renders
    history). ``lora``, ``resume``, ``asynchronous`` (rollouts by an older policy version, trained
    with their versions): what its own section can turn on, declared for ``--list`` and the docs.
    ``multi_policy``: it trains several policies in one job (``policies:``, ``aworld_core.policies``).
    Supervised fine-tuning is not a flag: a backend has it when it has an ``sft_planner``.
    """

    sampling: frozenset[str] = frozenset()
    lora: bool = False
    resume: bool = False
    segments: bool = False
    asynchronous: bool = False
    multi_policy: bool = False

    def __post_init__(self) -> None:
        sampling = frozenset(self.sampling)  # a list or tuple is fine to write
        unknown = sorted(sampling - set(SAMPLING_FIELDS))
        if unknown:
            raise ValueError(f"unknown sampling field(s) {unknown}; the fields are {list(SAMPLING_FIELDS)}")
        object.__setattr__(self, "sampling", sampling)


#: ``planner(job, output_dir) -> LaunchPlan``: what running the job would launch, launching nothing
Planner = Callable[[Any, Path], Any]
#: ``launcher(job, plan) -> TrainResult``: run a plan (``None`` on a backend: the core's launcher)
Launcher = Callable[[Any, Any], Any]
#: ``rows(episodes, tools) -> list[dict]``: kept episodes as a trainer's SFT rows
RowsWriter = Callable[..., list[dict[str, Any]]]


def _resolve(target: Callable[..., Any] | str) -> Callable[..., Any]:
    if isinstance(target, str):
        from aworld_core.imports import import_ref

        return import_ref(target)
    return target


@dataclass(frozen=True)
class Backend:
    """An RL training backend: everything the core needs to plan, check and launch a job on it.

    A plugin returns these from ``register_backends``; the core looks one up by name and calls
    it (no hook asks every plugin "is this yours?"). Callables may be given as import references
    (``"my_backend.plan:plan"``), imported only when used, so ``--list`` and ``--dry-run`` stay
    light and work where the framework is not installed.

    ``planner``: the plan of an RL job; ``launcher``: runs it (``None``: the core writes the plan's
    files and runs its command or entry point). ``sft_planner`` / ``sft_launcher``: the same for a
    job with ``sft:`` (supervised fine-tuning on collected trajectories); a backend without an
    ``sft_planner`` does not train SFT jobs and validation says so. ``framework`` is the import
    name of the RL framework it drives, checked lazily; ``install_hint`` is what to run to get it.
    ``formats``: the SFT row formats it reads, by name (``python -m aworld_core.trajectories
    convert --format NAME``). ``config_sections``: top-level keys of the framework's own config
    that a user may paste into a job (they belong under ``backends.<name>``; the job's error says
    so).
    """

    name: str
    description: str
    planner: Planner | str
    launcher: Launcher | str | None = None
    sft_planner: Planner | str | None = None
    sft_launcher: Launcher | str | None = None
    framework: str | None = None
    install_hint: str = ""
    requires_gpu: bool = False
    capabilities: Capabilities = field(default_factory=Capabilities)
    formats: Mapping[str, RowsWriter | str] = field(default_factory=dict)
    config_sections: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_sections", frozenset(self.config_sections))
        object.__setattr__(self, "formats", MappingProxyType(dict(self.formats)))

    @property
    def sft(self) -> bool:
        """Whether it trains SFT jobs (``sft:``)."""
        return self.sft_planner is not None

    def plan(self, job: Any, output_dir: Path) -> Any:
        """The job's ``LaunchPlan`` (its SFT plan for a job with ``sft:``)."""
        if getattr(job, "sft", None) is not None:
            if self.sft_planner is None:
                from aworld_core.errors import UsageError

                raise UsageError(self.no_sft_message())
            return _resolve(self.sft_planner)(job, output_dir)
        return _resolve(self.planner)(job, output_dir)

    def launch(self, job: Any, plan: Any, output_dir: Path) -> Any:
        """Run ``plan``: the backend's launcher, else the core's (``aworld_core.launch.execute_plan``)."""
        launcher = self.sft_launcher if getattr(job, "sft", None) is not None else self.launcher
        if launcher is None:
            from aworld_core.launch import execute_plan

            return execute_plan(plan, output_dir)
        return _resolve(launcher)(job, plan)

    def rows_writer(self, format: str) -> RowsWriter:
        return _resolve(self.formats[format])

    def no_sft_message(self, sft_backends: list[str] | None = None) -> str:
        """The refusal of an SFT job, naming the installed backends that train one when known."""
        names = sft_backends or []
        listed = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        which = f"the {listed} backend" if names else "a backend that does (--list: 'sft')"
        return (
            f"the job sets sft: (supervised fine-tuning on trajectories), which backend '{self.name}' does not "
            f"train; use {which}, or remove sft: for RL"
        )

    def capability_names(self) -> list[str]:
        """What it honours, as ``--list`` shows it."""
        caps = self.capabilities
        names = [f"sampling={','.join(sorted(caps.sampling))}"] if caps.sampling else []
        names += [name for name, on in (("lora", caps.lora), ("resume", caps.resume), ("sft", self.sft),
                                        ("segments", caps.segments), ("async", caps.asynchronous),
                                        ("multi-policy", caps.multi_policy)) if on]
        return names

    def framework_installed(self) -> bool:
        if self.framework is None:
            return True
        try:
            spec = importlib.util.find_spec(self.framework)
        except (ImportError, ValueError):
            return False
        # a bare directory named like the framework (e.g. tests/verl on sys.path) is a namespace
        # package with no origin: that is not the framework
        return spec is not None and spec.origin is not None

    def install_text(self) -> str:
        """What to run to get the framework (never a guessed package name: import names and
        distribution names differ, e.g. ``swift`` is ms-swift)."""
        return self.install_hint or f"install the package that provides the '{self.framework}' module"


@dataclass(frozen=True)
class EnvironmentSpec:
    """A tool environment (usually an MCP server) agents can be pointed at."""

    name: str
    description: str
    servers: tuple[str, ...] = ()
    serve_command: tuple[str, ...] = ()
    #: the request that frees what the server keeps for an episode, as ``mcp_config``'s
    #: ``release`` takes it (``"METHOD URL-template"``, ``mcp_release``); none when it keeps
    #: nothing. A job running this environment exports it as ``MCP_SERVER_RELEASE``, and agents
    #: built from the job's defaults send exactly that at episode end.
    release: str | None = None

    def __post_init__(self) -> None:
        if self.release is not None:
            from aworld_core.tools.mcp_release import parse_release

            try:
                parse_release(self.release)
            except ValueError as exc:  # the plugin's mistake, named at registration
                raise ValueError(f"environment {self.name!r}: {exc}") from None


@dataclass(frozen=True)
class RewardSpec:
    """A named reward.

    ``func`` is a callable or an import reference (``module:func`` / ``path/file.py:func``).
    A plain reward has the seed's signature ``(data_source, solution_str, ground_truth,
    extra_info) -> float``; a trajectory-aware one (``trajectory_aware=True``) is called as
    ``func(episode=..., sample=...)`` with the whole :class:`~aworld_core.schemas.Episode`.
    """

    name: str
    description: str
    func: Callable[..., Any] | str
    trajectory_aware: bool = False


class RewardConvention:
    """How one kind of reward function is called: which functions are written in it, the keywords
    it gets for one episode, and how its answer becomes the episode's value.

    The core ships the plain ``(data_source, solution_str, ground_truth, extra_info)`` and the
    trajectory-aware ``(episode, sample)`` conventions; a plugin registers others
    (``register_reward_conventions``; aworld-trl registers TRL's ``(completions, **kwargs)``).
    Which convention a function uses is decided once, when its reward is resolved: a function
    not flagged trajectory-aware is offered to the registered conventions' :meth:`claims` (from
    its signature's parameters), and is plain when none claims it. Scoring then calls
    :meth:`keywords` and :meth:`value` per episode and never inspects the function again.
    """

    #: its name in the catalog (``--list``) and in messages
    name = ""
    #: the keywords it calls with, as messages show them
    signature = ""
    #: pass a function without ``**kwargs`` only the keywords it declares (TRL passes every dataset
    #: column; a function names the ones it reads)
    declared_only = False

    def claims(self, parameters: Mapping[str, Any]) -> bool:
        """Whether a function with these parameters (``inspect.Signature.parameters``; empty when
        it has no signature) is written in this convention. Asked once per resolved reward."""
        return False

    def keywords(self, episode: Any, sample: Any) -> dict[str, Any]:
        """What the function is called with for one finished episode and its dataset row."""
        raise NotImplementedError

    def value(self, reward: Any, raw: Any) -> Any:
        """The reward's value from what the function returned (an awaitable stays one)."""
        return raw

    def checked_keywords(self, reward: Any, keywords: dict[str, Any]) -> dict[str, Any]:
        """The keywords a check before the run binds to the function (``keywords`` for an
        example episode): a convention whose keywords vary by dataset narrows them to those every
        call has, and may raise ``UsageError`` with its own fix."""
        return keywords


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset loader: ``loader(**options) -> list[Sample]``."""

    name: str
    description: str
    loader: Callable[..., Any] | str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """An ``aworld NAME ...`` subcommand (``register_commands``): ``main(argv) -> int`` gets the
    arguments after the name and returns the exit code (2 for bad input).

    Why a registration and not a hard-coded subparser: the core's command line runs jobs; a
    distribution that adds a server or a tool (aworld-service adds ``aworld serve``) brings its
    command with it, and the core never names it. Give ``main`` as an import reference
    (``"my_pkg.cli:main"``) so ``aworld --list`` imports nothing heavy.
    """

    name: str
    description: str
    main: Callable[[list[str]], int] | str

    def __post_init__(self) -> None:
        # a word the job command line could take for something else is refused at registration
        if not self.name or self.name.startswith("-") or "=" in self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"command name {self.name!r}: use one word, not starting with '-', without '='")

    def run(self, argv: list[str]) -> int:
        """Call the command's ``main`` with the arguments after its name."""
        return int(_resolve(self.main)(list(argv)) or 0)
