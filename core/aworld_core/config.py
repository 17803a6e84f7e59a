"""The job config: one pydantic model, loaded from YAML or JSON, overridable as ``a.b.c=value``.

A job says which backend trains which agent on which data with which reward. The section
``backends.<name>`` is passed untouched to that backend (e.g. ``backends.trl`` becomes TRL's
``GRPOConfig`` arguments), so one file can carry settings for several backends.
Unknown fields are errors: a typo must not be silently ignored.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from aworld_core.agents.agent import AgentConfig
from aworld_core.errors import ConfigError, UsageError
from aworld_core.policies import PolicySection, check_policy_sections
from aworld_core.schemas import SamplingParams
from aworld_core.secrets import is_secret_name
from aworld_core.tokens.families import TemplateOptions, resolve_options


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSection(_Section):
    """The policy being trained (a local directory or a hub name) and how to talk to it."""

    path: str
    tokenizer: str | None = Field(default=None, description="Tokenizer directory; default: path.")
    chat_template: str | None = Field(
        default=None, description="Jinja chat template file; default: the tokenizer's own."
    )
    tool_parser: str = Field(
        default=None,  # type: ignore[assignment]  # filled below: the family's parser, else hermes
        description="How tool calls are parsed from text; default: the family's parser, else hermes.",
    )
    family: str | None = Field(
        default=None,
        description="Chat-template family preset (terminators, tool parser, template options), e.g. "
        "llama3.1-ipython, gpt-oss, glm4.5, mistral-v3; see docs/token-fidelity.md.",
    )
    template_options: TemplateOptions | None = Field(
        default=None, description="Fields of the family's template options to override (TemplateOptions)."
    )
    build: str | None = Field(
        default=None,
        description="'module:function' called as function(path) to create the model directory when it "
        "does not exist yet (local tiny models, demos). Never called by --dry-run.",
    )

    @model_validator(mode="after")
    def _template_family(self) -> ModelSection:
        """An unknown family is refused here; the parser defaults to the family's."""
        try:
            options = resolve_options(self.family, self.template_options)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        if self.tool_parser is None:
            self.tool_parser = options.tool_parser or "hermes"
        return self


class AgentSection(AgentConfig):
    """The agent: either an importable factory, or one ``Agent``: its own fields below and its
    LLM, sampling and limit fields inherited from ``AgentConfig`` (defined only there)."""

    name: str = "agent"
    desc: str = ""
    system_prompt: str | None = None
    mcp_config: dict[str, Any] | None = None
    mcp_servers: list[str] | None = None
    tools: list[str] = Field(default_factory=list, description="Import refs of Python tool functions.")
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for factory.")
    factory: str | None = Field(  # after the Agent's fields, so its check sees them all
        default=None,
        description="'module:function' returning an Agent or Swarm; called in every worker.",
    )
    openai_agent: str | None = Field(  # last, so its check sees every other field (factory included)
        default=None,
        description="'module:function' of an agent written against the OpenAI API, "
        "f(sample, *, base_url, api_key, model) -> final answer text or None (async, or a plain function run "
        "in a thread), trained through the core's gateway instead of an Agent (aworld_core.worker.openai_agent).",
    )

    @field_validator("factory")
    @classmethod
    def _factory_alone(cls, factory: str | None, info: ValidationInfo) -> str | None:
        """A factory builds its own Agent: other fields set beside it would be silently ignored."""
        if factory:
            ignored = [
                f"agent.{name}"
                for name, value in info.data.items()
                if name != "options" and value != cls.model_fields[name].get_default(call_default_factory=True)
            ]
            if ignored:
                raise PydanticCustomError(
                    "factory_with_fields",
                    "no other agent fields beside a factory: {ignored} would be ignored, since the "
                    "factory's Agent carries its own; set them in the factory (or pass them as "
                    "agent.options), or remove agent.factory",
                    {"ignored": ", ".join(ignored)},
                )
        return factory

    @field_validator("openai_agent")
    @classmethod
    def _openai_agent_alone(cls, ref: str | None, info: ValidationInfo) -> str | None:
        """An OpenAI-API agent is its own program: an Agent's fields, a factory or options beside it
        would be silently ignored."""
        if ref:
            ignored = [
                f"agent.{name}"
                for name, value in info.data.items()
                if value != cls.model_fields[name].get_default(call_default_factory=True)
            ]
            if ignored:
                raise PydanticCustomError(
                    "openai_agent_with_fields",
                    "agent.openai_agent is the whole agent (a function written against the OpenAI API, with its "
                    "own prompts, tools and limits): {ignored} would be ignored; give either agent.openai_agent "
                    "alone, or agent.factory / the Agent's fields, not both",
                    {"ignored": ", ".join(ignored)},
                )
        return ref


class DatasetSection(_Section):
    """A dataset: a local file (JSONL, JSON, parquet, CSV) or a registered / hub dataset name."""

    path: str | None = None
    name: str | None = None
    format: Literal["auto", "jsonl", "json", "parquet", "csv"] = "auto"
    split: str | None = None
    limit: int | None = Field(default=None, ge=1)
    fields: dict[str, str] = Field(
        default_factory=dict, description="Column renames, e.g. {question: problem}."
    )
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSection:
        if (self.path is None) == (self.name is None):
            raise ValueError("give exactly one of 'path' (a local file) or 'name' (a registered dataset)")
        return self


class EnvironmentSection(_Section):
    """A tool environment the core starts for the job and stops after it.

    ``name`` is a registered environment (``--list``); its serve command is run with ``args``
    and must print one JSON line ``{"ip", "port", "token"}`` (the GAIA environment's form). The
    core then sets ``MCP_SERVER_URL`` / ``MCP_SERVER_TOKEN`` (and ``MCP_SERVERS`` from
    ``servers``) for the job, so agents built with ``get_agent_tool_env_and_servers()`` use it.
    """

    name: str
    args: list[str] = Field(default_factory=list)
    servers: list[str] | None = None
    startup_timeout_s: float = Field(default=60.0, gt=0)


class RewardSection(_Section):
    """The reward: a registered name (gsm8k, gaia, format, ...) or 'module:func' / 'file.py:func'."""

    name: str
    trajectory_aware: bool | None = Field(
        default=None, description="Call func(episode=, sample=) instead of the seed's signature."
    )


class SamplingSection(_Section):
    """How the trained policy samples its episodes during training: the one place for it.

    Each backend maps these fields onto its own keys (TRL's ``GRPOConfig`` ``temperature`` /
    ``top_p`` / ``top_k``, verl's ``actor_rollout_ref.rollout.*``, AReaL's ``gconfig.*``,
    ms-swift's ``--temperature`` / ``--top_p`` / ``--top_k``), so a job samples alike on each. The
    same setting written natively too is accepted when it agrees and refused when it does not.
    Unset fields leave the backend's own default. The agent's own ``temperature`` / ``top_p`` /
    ``top_k`` are for evaluation and untrained agents: a training job that sets them is refused
    with the field to use here (``aworld_core.validation``).
    """

    temperature: float | None = Field(
        default=None, gt=0, description="Sampling temperature; > 0 (training samples from the policy; greedy "
        "decoding is for evaluation). Null: the backend's default."
    )
    top_p: float | None = Field(default=None, gt=0, le=1, description="Nucleus sampling; null: the backend's default.")
    top_k: int | None = Field(
        default=None, ge=0, description="Keep the k likeliest tokens; 0: off (every token). Null: the backend's default."
    )

    def given(self) -> dict[str, Any]:
        """The fields the job sets (field -> value)."""
        return {name: value for name, value in self.model_dump().items() if value is not None}

    def params(self) -> SamplingParams | None:
        """The set fields as ``SamplingParams`` (``None`` when none is set)."""
        given = self.given()
        return SamplingParams(**given) if given else None

    def native(
        self,
        keys: Mapping[str, str | Sequence[str]],
        written: Mapping[str, Any],
        *,
        prefix: str,
        values: Mapping[str, Callable[[Any], Any]] | None = None,
        backend: str = "this backend",
    ) -> dict[str, Any]:
        """What a backend puts in its own config for these settings: ``{native key: value}``.

        ``keys`` maps each field to the backend's key (or keys: AReaL's temperature is both the
        sampler's and the one its actor recomputes logprobs with); ``written`` is what the user wrote in the
        backend's section (native key -> value); ``prefix`` is how that section is spelled in
        messages (``"backends.trl."``); ``values`` converts a field's value to the backend's form
        (e.g. ``top_k`` 0 -> verl's -1). A native key written with another value is a
        ``ConfigError`` naming both keys; one written with the same value (ours or the converted
        one) is accepted. A set field the backend has no key for is refused (it would be ignored).
        """
        mapped: dict[str, Any] = {}
        for name, value in self.given().items():
            if name not in keys:
                raise ConfigError(
                    f"rollout.sampling.{name}={value!r}: {backend} has no setting it maps to, so it would be "
                    f"ignored; remove it (the fields {backend} honours: "
                    f"{', '.join(f'rollout.sampling.{k}' for k in keys)})",
                    [(f"rollout.sampling.{name}", value, f"unset on {backend}")],
                )
            native = values[name](value) if values and name in values else value
            targets = (keys[name],) if isinstance(keys[name], str) else tuple(keys[name])
            for key in targets:
                if key in written and written[key] not in (value, native):
                    raise ConfigError(
                        f"rollout.sampling.{name}={value!r} and {prefix}{key}={written[key]!r} set the same "
                        f"setting to different values; set it once: rollout.sampling.{name} (the one place for "
                        f"training sampling, mapped to {prefix}{key}), and remove {prefix}{key}",
                        [
                            (f"rollout.sampling.{name}", value, f"the value of {prefix}{key}, or {prefix}{key} removed"),
                            (f"{prefix}{key}", written[key], f"removed, or equal to rollout.sampling.{name}"),
                        ],
                    )
                mapped[key] = native
        return mapped


DEFAULT_EPISODE_TIMEOUT_S = 600.0


class RolloutSection(_Section):
    """How episodes run, whatever the backend.

    ``max_turns`` and ``episode_timeout_s`` default to ``None`` (not a number) so that "unset"
    survives the job's serialization to workers: unset, the agent's own limits apply.
    """

    max_turns: int | None = Field(
        default=None, ge=1, description="Every agent's max_steps (LLM calls per episode) when set; null: each agent's own."
    )
    episode_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description=f"Seconds per episode; null: the (lead) agent's episode_timeout_s, else "
        f"{DEFAULT_EPISODE_TIMEOUT_S:g}.",
    )
    concurrency: int = Field(default=8, ge=1)
    failed_episodes: Literal["drop_group", "keep_group_neutral"] = Field(
        default="keep_group_neutral",
        description="What a failed member does to its GRPO group (docs/writing-a-plugin.md, the group "
        "policy): keep_group_neutral trains the others with the group baseline taken from them; "
        "drop_group trains no member of a group that has a failed one.",
    )
    max_failed_steps: int = Field(
        default=3, ge=1, description="Stop after this many consecutive steps in which every episode failed."
    )
    sampling: SamplingSection = Field(
        default_factory=SamplingSection,
        description="How the trained policy samples during training (temperature, top_p, top_k); each backend "
        "maps it onto its own keys.",
    )

    def timeout_for(self, agent: Any) -> float | None:
        """The episode timeout a runner passes: ``episode_timeout_s`` when set; ``None`` when the
        (lead) agent has its own (the runtime applies it); else the default."""
        if self.episode_timeout_s is not None:
            return self.episode_timeout_s
        lead = getattr(agent, "lead", agent)
        if getattr(getattr(lead, "conf", None), "episode_timeout_s", None) is not None:
            return None
        return DEFAULT_EPISODE_TIMEOUT_S


class SftSection(_Section):
    """Supervised fine-tuning on collected trajectories instead of RL: the backend runs its SFT
    trainer on these episode files (``python -m aworld_core.trajectories filter`` writes them; any
    trajectory file is read). See docs/trajectories-sft.md."""

    train: str = Field(description="Episodes to train on (JSONL/parquet; task service downloads too).")
    val: str | None = Field(default=None, description="Episodes for the validation loss.")
    format: Literal["auto", "tokens", "messages"] = Field(
        default="auto",
        description="tokens: the episodes' exact token data (no re-tokenization); messages: rendered by "
        "the trainer with the model's chat template; auto: tokens when every episode has token data.",
    )
    tools: str | None = Field(default=None, description="JSON file of the agent's tool specs (messages format).")


class LoggingSection(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    report_to: list[str] = Field(default_factory=list, description="e.g. [tensorboard, wandb]")


class JobConfig(_Section):
    """One training (or evaluation) job."""

    name: str = "aworld-job"
    backend: str | None = None
    model: ModelSection | None = None
    agent: AgentSection = Field(default_factory=AgentSection)
    train_dataset: DatasetSection | None = None
    test_dataset: DatasetSection | None = None
    reward: RewardSection | None = None
    environment: EnvironmentSection | None = None
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    sft: SftSection | None = Field(default=None, description="Set: an SFT job on collected trajectories.")
    backends: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-backend sections, passed through untouched."
    )
    output_dir: str | None = Field(
        default=None, description="Where the job writes; default: <AWORLD_OUTPUT_ROOT>/<name>."
    )
    policies: dict[str, PolicySection] = Field(
        default_factory=dict,
        description="Several policies in one job (aworld_core.policies, docs/multi-policy.md): name -> a LoRA "
        "adapter on model.path, a model of its own, or a fixed endpoint; empty: one policy, the job's model.",
    )
    agent_policies: dict[str, str] = Field(
        default_factory=dict, description="Agent name -> policy name, for every agent of the Swarm."
    )
    seed: int = 0
    logging: LoggingSection = Field(default_factory=LoggingSection)
    base_dir: str | None = Field(
        default=None,
        description="Directory relative paths are resolved against: the config file's; for a job "
        "given as a dict, the current directory when unset.",
    )

    @model_validator(mode="after")
    def _policies(self) -> JobConfig:
        check_policy_sections(self.policies, self.agent_policies, self.model.path if self.model else None)
        return self

    @model_validator(mode="after")
    def _openai_agent_limits(self) -> JobConfig:
        """An OpenAI-API agent runs its own loop: a turn limit the runtime would impose is not applied."""
        if self.agent.openai_agent and self.rollout.max_turns is not None:
            raise ValueError(
                "rollout.max_turns cannot limit agent.openai_agent (the function runs its own loop and "
                "decides how many calls it makes): remove rollout.max_turns and bound the loop in the function "
                "(rollout.episode_timeout_s still applies)"
            )
        if self.agent.openai_agent and (self.policies or self.agent_policies):
            raise ValueError(
                "policies / agent_policies map the agents of a Swarm to policies; agent.openai_agent is one "
                "function on the job's model: remove policies and agent_policies"
            )
        return self

    def backend_section(self, backend: str) -> dict[str, Any]:
        return dict(self.backends.get(backend, {}))

    def resolve_path(self, path: str) -> str:
        """``path`` as an absolute local path: a relative one is joined to ``base_dir`` (the config
        file's directory; the current directory when the job has none) whether or not it exists.

        The model's own ``path`` / ``tokenizer`` value comes back unchanged when it is a hub id
        (see :func:`names_local_path`), so backends can pass it on as it is.
        """
        base = self.base_dir or Path.cwd()
        model = self.model
        if (
            model is not None
            and path in (model.path, model.tokenizer)
            and not (path == model.path and model.build)
            and not names_local_path(path, base)
        ):
            return path
        return absolute_path(path, base)

    def resolved_output_dir(self, root: str | Path | None = None) -> Path:
        """The job's output directory, always absolute: ``output_dir`` (relative: to ``base_dir``),
        else ``<root>/<name>``, ``root`` (default: the ``AWORLD_OUTPUT_ROOT`` setting, ``runs``)
        being relative to the current directory."""
        if self.output_dir:
            return Path(absolute_path(self.output_dir, self.base_dir or Path.cwd()))
        if root is None:
            from aworld_core.settings import get_settings

            root = get_settings().output_root
        return Path(absolute_path(Path(root) / self.name, Path.cwd()))


# ---------------------------------------------------------------------------------------------
# Paths: what a relative path in a job is relative to (docs/architecture.md, "Paths")
# ---------------------------------------------------------------------------------------------

# The job fields that name local files, and how each is read:
#   "path"  always a local path;
#   "model" a local path or a hub id (names_local_path); model.path is local when model.build is set;
#   "ref"   an import reference: only 'file.py:name' holds a path ('pkg.mod:name' is left alone);
#   "refs"  a list of import references.
# Nothing else is rewritten: backends.*, dataset options, environment args and mcp_config are
# passed on as written.
PATH_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("output_dir",), "path"),
    (("train_dataset", "path"), "path"),
    (("test_dataset", "path"), "path"),
    (("sft", "train"), "path"),
    (("sft", "val"), "path"),
    (("sft", "tools"), "path"),
    (("model", "chat_template"), "path"),
    (("model", "path"), "model"),
    (("model", "tokenizer"), "model"),
    (("model", "build"), "ref"),
    (("reward", "name"), "ref"),
    (("agent", "factory"), "ref"),
    (("agent", "openai_agent"), "ref"),
    (("agent", "tools"), "refs"),
)


def absolute_path(path: str | Path, base: str | Path) -> str:
    """``path`` made absolute: ``~`` expanded, a relative path joined to ``base`` whether or not it
    exists; ``..`` collapsed, symlinks kept."""
    candidate = Path(path).expanduser()
    return os.path.normpath(candidate if candidate.is_absolute() else Path(base).expanduser().absolute() / candidate)


def names_local_path(value: str, base: str | Path) -> bool:
    """Whether a ``model.path`` / ``model.tokenizer`` value is a local path rather than a hub id.

    Local: it starts with ``/``, ``~``, ``./`` or ``../`` (or is ``.`` / ``..``), or it exists
    beside ``base``. Anything else (``Qwen/Qwen2-0.5B``) is a hub id and is left as written.
    """
    if value in (".", "..") or value.startswith(("/", "~", "./", "../")):
        return True
    return (Path(base).expanduser() / value).exists()


def absolute_ref(ref: str, base: str | Path) -> str:
    """An import reference with its ``file.py`` part made absolute; ``pkg.mod:name`` unchanged."""
    target, sep, attr = ref.rpartition(":")
    if sep and target.endswith(".py"):
        return f"{absolute_path(target, base)}:{attr}"
    return ref


def _section(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = data
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _overlaps(location: tuple[str, ...], keys: Sequence[str]) -> bool:
    """Whether an override of ``keys`` sets the field at ``location`` (or the section holding it)."""
    n = min(len(location), len(keys))
    return tuple(location[:n]) == tuple(keys[:n])


def resolve_job_paths(
    data: dict[str, Any],
    base: str | Path,
    *,
    overridden: Sequence[Sequence[str]] = (),
    cwd: str | Path | None = None,
) -> dict[str, Any]:
    """Make the local paths of a raw job mapping (:data:`PATH_FIELDS`) absolute, in place.

    A field set by an override in ``overridden`` (key paths, e.g. ``["model", "path"]``) is
    relative to ``cwd`` (default: the current directory), any other to ``base``. Hub ids and
    ``module:name`` references are left alone; values of the wrong type are left for validation.
    """
    here = Path(cwd) if cwd is not None else Path.cwd()
    for location, kind in PATH_FIELDS:
        parent = _section(data, location[:-1])
        key = location[-1]
        if parent is None or key not in parent:
            continue
        value = parent[key]
        root = here if any(_overlaps(location, keys) for keys in overridden) else Path(base)
        if kind == "path" and isinstance(value, str) and value:
            parent[key] = absolute_path(value, root)
        elif kind == "model" and isinstance(value, str) and value:
            built = key == "path" and bool(parent.get("build"))
            if built or names_local_path(value, root):
                parent[key] = absolute_path(value, root)
        elif kind == "ref" and isinstance(value, str):
            parent[key] = absolute_ref(value, root)
        elif kind == "refs" and isinstance(value, list):
            parent[key] = [absolute_ref(item, root) if isinstance(item, str) else item for item in value]
    return data


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def flatten_dotted(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c.d": 2}`` -> ``{"a.b": 1, "c.d": 2}``: for backends configured by dotted
    keys (hydra overrides), whether the user wrote a section nested or dotted."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_dotted(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _backend_owning(key: str) -> str | None:
    """The installed backend whose framework's own config has ``key`` as a top-level section
    (``Backend.config_sections``): a user who pasted that config is told where it goes."""
    from aworld_core.plugins import get_plugin_manager

    try:
        backends = get_plugin_manager().catalog().items("backend")
    except Exception:  # a message's hint must never hide the error it explains
        return None
    return next((name for name, item in sorted(backends.items()) if key in item.spec.config_sections), None)


def _describe_expected(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    loc = tuple(error.get("loc") or ())
    owner = _backend_owning(str(loc[0])) if kind == "extra_forbidden" and len(loc) == 1 else None
    if owner is not None:
        return (
            f"a {owner} config section (upstream AWorld's AgentTrainer took the framework's config): put it under "
            f"backends.{owner}, i.e. backends: {{{owner}: {{{loc[0]}: ...}}}}; model, data files and reward go in "
            f"the job's model / train_dataset / reward (docs/migration.md)"
        )
    if kind == "extra_forbidden":
        return "no such field (check the spelling; see docs/architecture.md for the job config)"
    if kind == "literal_error" and "expected" in ctx:
        return f"one of {ctx['expected']}"
    return error.get("msg", "a valid value")


def _validation_error(source: str, exc: ValidationError) -> ConfigError:
    problems: list[tuple[str, object, str]] = []
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"]) or "(top level)"
        value = error.get("input")
        if error["loc"] and is_secret_name(str(error["loc"][-1])):
            value = "***"  # a key or token is never echoed
        expected = _describe_expected(error)
        problems.append((loc, value, expected))
        lines.append(f"  {loc}: got {value!r}; expected {expected}")
    return ConfigError(f"invalid job config {source}:\n" + "\n".join(lines), problems)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into its key path and a typed value (int, float, bool, list, str)."""
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not key.strip() or any(not part for part in keys):
        raise ConfigError(
            f"bad override {text!r}: expected the form key.path=value, e.g. agent.max_steps=4 "
            f"or backends.trl.learning_rate=1e-5",
            [(key or text, text, "key.path=value")],
        )
    return keys, _parse_value(raw.strip())


def _parse_value(raw: str) -> Any:
    if raw == "":
        return ""
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return float(raw) if any(c in raw for c in ".eE") and raw.lower() not in ("true", "false") else int(raw)
    except ValueError:
        pass
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    return value if isinstance(value, (bool, list, dict)) or value is None else raw


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for depth, part in enumerate(keys[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(
                    f"bad override {text!r}: {where} is {child!r}, not a section, so it has no "
                    f"field '{keys[depth + 1]}'",
                    [(where, child, "a section (mapping)")],
                )
            node = child
        node[keys[-1]] = value
    return data


def read_config_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file '{path}' not found; pass an existing YAML or JSON file with --config",
            [("--config", str(path), "an existing file")],
        )
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file '{path}' is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file '{path}' must hold a mapping of job fields, not {type(data).__name__}",
            [("(top level)", data, "a mapping")],
        )
    return data


def load_job_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    data: dict[str, Any] | None = None,
) -> JobConfig:
    """Read a job from a file (or a dict), apply overrides, validate. Raises ConfigError.

    Local paths come out absolute (:func:`resolve_job_paths`): those written in the file are
    relative to the file's directory, those in ``data`` to its ``base_dir`` (else the current
    directory), and those given in ``overrides`` (typed in a shell) to the current directory.
    """
    raw: dict[str, Any] = copy.deepcopy(dict(data or {}))
    source = "(given as a dict)"
    cwd = Path.cwd()
    config_dir: Path | None = None
    if path is not None:
        raw = read_config_file(path)
        config_dir = Path(path).resolve().parent
        source = f"in '{path}'"
    overrides = list(overrides or [])
    touched = [parse_override(text)[0] for text in overrides]
    apply_overrides(raw, overrides)
    base_dir = raw.get("base_dir")
    if isinstance(base_dir, str) and base_dir:
        from_file = config_dir is not None and ["base_dir"] not in touched
        raw["base_dir"] = absolute_path(base_dir, config_dir if from_file and config_dir else cwd)
    elif config_dir is not None:
        raw["base_dir"] = str(config_dir)
    base = raw["base_dir"] if isinstance(raw.get("base_dir"), str) and raw["base_dir"] else cwd
    resolve_job_paths(raw, base, overridden=touched, cwd=cwd)
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(source, exc) from None
