"""Wire types: every structure that crosses a process, a file or a plugin boundary.

One module on purpose (as in agent-lightning): a backend adapter, the task service and the
exporters all read the same types, so a trajectory written by one is readable by the others.
Values are typed: ``None`` stays ``None`` and booleans stay booleans (upstream stringified them).
Messages are plain OpenAI-format dicts (``role``, ``content``, ``tool_calls``, ``tool_call_id``,
``name``), since that is what every LLM endpoint and chat template speaks.
"""

from __future__ import annotations

import json
import time
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aworld_core.errors import UsageError

Message = dict[str, Any]

SCHEMA_VERSION = 1


def new_id(prefix: str = "") -> str:
    """A random id; pass explicit ids where idempotency matters (task ids, episode ids)."""
    return f"{prefix}{uuid.uuid4().hex}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ---------------------------------------------------------------------------------------------
# Sampling and token-level data
# ---------------------------------------------------------------------------------------------


class SamplingParams(_Model):
    """Sampling settings of one LLM call. ``None`` means "the engine's default"."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    seed: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    def merged(self, other: SamplingParams | None) -> SamplingParams:
        """``other``'s set fields win over ours (a backend's validation settings over defaults)."""
        if other is None:
            return self
        data = self.model_dump()
        for key, value in other.model_dump().items():
            if key == "extra":
                data["extra"] = {**data["extra"], **value}
            elif value is not None:
                data[key] = value
        return SamplingParams(**data)


class TokenData(_Model):
    """What one LLM call sampled, token by token, when the call went through a TokenEngine.

    ``prompt_ids`` is the exact prompt the engine saw; ``response_ids`` are the sampled ids as the
    engine returned them (never re-tokenized); ``response_logprobs`` is aligned with them;
    ``versions`` is the policy version per sampled token (-1 when the engine has none).
    ``segment`` is the position of the episode's training segment the call sampled into
    (``TrainingView.segments()``): ``prompt_ids`` is a prefix of that segment.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None = None
    versions: list[int] | None = None
    stop_reason: str | None = None
    segment: int = 0


# Why a segment of an episode's training data begins where it does.
SEGMENT_FIRST = "first"  # the episode's first prompt
SEGMENT_REWRITE = "rewrite"  # the client sent a conversation that does not extend the recorded one
SEGMENT_TEMPLATE = "template"  # the chat template re-rendered earlier turns (a family with history_changes: restart)
SEGMENT_COMPACTION = "compaction"  # the agent compacted its context (aworld_core.agents.compaction)
SEGMENT_STARTS = (SEGMENT_FIRST, SEGMENT_REWRITE, SEGMENT_TEMPLATE, SEGMENT_COMPACTION)


class TrainingSegment(_Model):
    """One token-exact sequence of an episode: a prompt, then a response of sampled and env tokens.

    ``response_mask`` is 1 exactly on tokens the policy sampled and 0 on tool/environment tokens;
    ``response_logprobs`` is 0.0 and ``response_versions`` -1 off sampled tokens. ``prompt_ids``
    is exactly what the engine saw before the segment's first sampled token, so the segment is
    trained on its own (one row of a batch), in the context the policy sampled it in.

    ``start`` says why the segment begins (``first``, ``rewrite``, ``template``, ``compaction``);
    ``reward`` is the segment's own reward when the reward function gave per-segment rewards
    (``aworld_core.worker.credit``), else ``None``: the segment is credited with the episode's.
    ``policy`` names the policy that sampled it in a multi-policy job (``aworld_core.policies``; its
    mask-1 tokens are that policy's, everything another agent said is prompt or env tokens, mask 0);
    ``None`` in a single-policy job.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    response_versions: list[int]
    num_turns: int = 0
    truncated: bool = False
    start: str = SEGMENT_FIRST
    reward: float | None = None
    policy: str | None = None

    @field_validator("start")
    @classmethod
    def _known_start(cls, start: str) -> str:
        if start not in SEGMENT_STARTS:
            raise ValueError(f"segment start must be one of {list(SEGMENT_STARTS)}, got {start!r}")
        return start

    @property
    def sampled_tokens(self) -> int:
        return sum(1 for m in self.response_mask if m)

    def segment(self) -> TrainingSegment:
        """This segment alone (a ``TrainingView``'s own fields, without its later segments)."""
        return TrainingSegment(**{name: getattr(self, name) for name in TrainingSegment.model_fields})


class TrainingView(TrainingSegment):
    """An episode's training data: an ordered list of token-exact segments (usually one).

    The view's own fields are its **first** segment (the single-sequence view every backend
    always read); ``later_segments`` holds the segments that follow, each begun when the
    conversation stopped being a prefix of what the policy had seen (a client that rewrote or
    summarized its history, an agent that compacted its context, a template that re-rendered
    earlier turns). ``segments()`` is the whole list, in order. Every segment's sampled tokens
    train; the credit rule and the loss normalization are ``aworld_core.worker.credit``'s.

    ``history_rewritten`` is true when a later segment exists (kept for readers of the one-segment
    view, which trained only the first segment).
    """

    history_rewritten: bool = False
    later_segments: list[TrainingSegment] = Field(default_factory=list)

    def segments(self) -> list[TrainingSegment]:
        """Every segment of the episode, first to last."""
        return [self.segment(), *self.later_segments]

    @property
    def num_segments(self) -> int:
        return 1 + len(self.later_segments)

    @property
    def total_sampled_tokens(self) -> int:
        return self.sampled_tokens + sum(s.sampled_tokens for s in self.later_segments)

    @property
    def any_truncated(self) -> bool:
        return self.truncated or any(s.truncated for s in self.later_segments)

    @classmethod
    def of_segments(cls, segments: list[TrainingSegment]) -> TrainingView:
        """The view of ``segments`` (at least one), the first inline."""
        if not segments:
            raise ValueError("a training view needs at least one segment")
        first, *later = segments
        return cls(
            **first.segment().model_dump(),
            history_rewritten=bool(later),
            later_segments=[s.segment() for s in later],
        )


# ---------------------------------------------------------------------------------------------
# Trajectories (the seed's exp_meta / exp_data shape, typed)
# ---------------------------------------------------------------------------------------------


class ToolCall(_Model):
    """A tool call the model made. ``arguments`` is the JSON text the model produced."""

    id: str
    name: str
    arguments: str = "{}"
    error: str | None = None  # set when the model's call could not be parsed; never executed


class ActionResult(_Model):
    """What a tool returned (or why it failed) for one tool call.

    ``tool_name`` is the tool's real name where it ran (an MCP tool's name on its server), even
    when the model saw a disambiguated name such as ``server__tool``.
    """

    tool_call_id: str | None = None
    tool_name: str
    server: str | None = None  # the MCP server that ran it (None for Python and agent tools)
    content: str = ""
    is_error: bool = False
    error: str | None = None
    duration_s: float | None = None
    # an MCP server's requests for user input (elicitation) during the call and the answers given
    elicitations: list[dict[str, Any]] = Field(default_factory=list)


class LLMCall(_Model):
    """One call to the model: what came back, how long it took, and its tokens when known."""

    model: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    duration_s: float | None = None
    token_data: TokenData | None = None


class ExpMeta(_Model):
    task_id: str
    agent_id: str
    step: int
    pre_agent: str | None = None
    started_at: float | None = None
    duration_s: float | None = None


class ExpState(_Model):
    from_agent_name: str | None = None
    content: str | None = None
    action_result: list[ActionResult] = Field(default_factory=list)


class ExpData(_Model):
    state: ExpState = Field(default_factory=ExpState)
    actions: list[ToolCall] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    llm_call: LLMCall | None = None


class TrajectoryStep(_Model):
    """One agent step: the model was called once and its tool calls (if any) were executed."""

    id: str = Field(default_factory=new_id)
    exp_meta: ExpMeta
    exp_data: ExpData = Field(default_factory=ExpData)


class EpisodeStatus(str, Enum):
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    @property
    def trainable(self) -> bool:
        """Only a successful episode may become a training sample."""
        return self is EpisodeStatus.SUCCESS


class Episode(_Model):
    """One run of an agent (or swarm) on one task, with its outcome and rewards."""

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=lambda: new_id("ep-"))
    task_id: str
    agent_id: str
    status: EpisodeStatus = EpisodeStatus.RUNNING
    error: str | None = None
    final_answer: str | None = None
    steps: list[TrajectoryStep] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    reward_errors: dict[str, str] = Field(default_factory=dict)
    started_at: float = Field(default_factory=time.time)
    ended_at: float | None = None
    training: TrainingView | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def trainable(self) -> bool:
        return self.status.trainable and self.training is not None

    def finish(self, status: EpisodeStatus, error: str | None = None) -> None:
        self.status = status
        self.error = error
        self.ended_at = time.time()


# ---------------------------------------------------------------------------------------------
# Running an episode: what a backend tells the ``rollout`` hook
# ---------------------------------------------------------------------------------------------


class RolloutContext(_Model):
    """What a backend tells the ``rollout`` hook about one episode.

    Unknown keys are an error (a misspelled ``max_step`` must not be silently ignored); a
    backend's own values (verl's ``uid``, a step number) go in ``extras`` and are recorded in
    ``episode.metadata`` when they are plain JSON.
    """

    episode_id: str | None = Field(default=None, description="Default: a new id (ep-...).")
    task_id: str | None = Field(default=None, description="Default: the sample's id.")
    group_id: str | None = Field(default=None, description="The GRPO group (prompt) this episode belongs to.")
    group_index: int | None = Field(default=None, ge=0, description="Its position in the group.")
    timeout: float | None = Field(default=None, gt=0, description="Seconds for the whole episode.")
    max_steps: int | None = Field(default=None, ge=1, description="LLM calls per agent; default: the agent's.")
    sampling: SamplingParams | None = Field(
        default=None, description="Overrides the trained agents' sampling (e.g. validation settings)."
    )
    policy_version: int | None = Field(default=None, description="The policy version sampling starts at.")
    extras: dict[str, Any] = Field(default_factory=dict, description="Backend-specific values (plain JSON).")

    @field_validator("extras")
    @classmethod
    def _plain_json(cls, extras: dict[str, Any]) -> dict[str, Any]:
        """Extras are recorded on the episode, which is written as JSON: refuse what JSON cannot hold."""
        try:
            json.dumps(extras)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"extras must be plain JSON values (they are recorded on the episode): {exc}") from None
        return extras

    @classmethod
    def of(cls, value: RolloutContext | dict[str, Any] | None) -> RolloutContext:
        """``value`` as a context; a dict with unknown keys raises ``UsageError`` naming them."""
        if value is None:
            return cls()
        if isinstance(value, RolloutContext):
            return value
        if not isinstance(value, dict):
            raise UsageError(f"a rollout context must be a RolloutContext or a dict, got {type(value).__name__}")
        unknown = sorted(set(value) - set(cls.model_fields))
        if unknown:
            raise UsageError(
                f"unknown rollout context keys {unknown}; the fields are {sorted(cls.model_fields)} "
                f"(put backend-specific values under 'extras')"
            )
        return cls.model_validate(value)

    def episode_metadata(self) -> dict[str, Any]:
        """What the episode records of this context (group, version and extras)."""
        out: dict[str, Any] = {}
        if self.group_id is not None:
            out["group_id"] = self.group_id
        if self.group_index is not None:
            out["group_index"] = self.group_index
        if self.policy_version is not None:
            out["policy_version"] = self.policy_version
        out.update(self.extras)
        return out


# ---------------------------------------------------------------------------------------------
# Dataset rows
# ---------------------------------------------------------------------------------------------


class Sample(_Model):
    """One dataset row, normalized: what the agent is asked and what counts as right."""

    id: str
    prompt: list[Message]
    ground_truth: Any = None
    data_source: str = "unknown"
    extra_info: dict[str, Any] = Field(default_factory=dict)

    @property
    def question(self) -> str:
        """The last user message's text: the task for agents that take a plain string."""
        for message in reversed(self.prompt):
            if message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else str(content)
        return ""


# ---------------------------------------------------------------------------------------------
# Launching a backend
# ---------------------------------------------------------------------------------------------


class LaunchPlan(_Model):
    """Exactly what a backend would launch. ``--dry-run`` prints it and launches nothing.

    Either ``command`` (run as a subprocess with ``env`` added) or ``entrypoint`` (an importable
    ``module:function`` called in-process with ``entrypoint_kwargs``). ``command`` runs in ``cwd``:
    default the job's output directory; a relative ``cwd`` is inside the output directory. The
    output directory a backend's planner receives is absolute, so paths built from it hold wherever
    the command runs. ``files`` maps a path relative to the output directory to the text written
    there before launch; they are serialized config (YAML, JSON, parquet paths), never generated
    source code.
    """

    backend: str
    command: list[str] | None = None
    entrypoint: str | None = None
    entrypoint_kwargs: dict[str, Any] = Field(default_factory=dict)
    cwd: str | None = Field(
        default=None, description="Working directory of command; default: the output directory."
    )
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class TrainResult(_Model):
    """What a finished (or planned) launch reports back."""

    backend: str
    output_dir: str
    returncode: int = 0
    metrics: dict[str, Any] = Field(default_factory=dict)
    artifacts: dict[str, str] = Field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The task service's wire types (the aworld-service distribution): tasks clients submit, their
# states and results. They live here because the trainer reads downloaded results without it.
# ---------------------------------------------------------------------------------------------

# Task ids travel in URL paths, comma-separated query lists and file names: no whitespace,
# no '/', '?', '#', '%' or ','.
TASK_ID_PATTERN = r"^[^\s/?#%,]+$"


class TaskStatus(str, Enum):
    """Where a task is. INIT -> RUNNING -> SUCCESS / FAILED / CANCELLED / TIMEOUT.

    The allowed moves are in ``aworld_service.states``; the stores apply them atomically.
    """

    INIT = "init"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"

    @property
    def terminal(self) -> bool:
        return self not in (TaskStatus.INIT, TaskStatus.RUNNING)


class AworldTask(_Model):
    """One agent task as a client submits it (the seed's ``AworldTask``, typed and bounded).

    ``task_id`` is the idempotency key: submitting the same id again returns the stored task.
    The ``llm_*``, ``sampling``, ``system_prompt`` and ``mcp_*`` fields override the agent's own
    settings for this task only; ``None`` keeps the agent's. ``llm_api_key`` is stored with the
    task (another host may run it) but never returned by the API. What the server refuses in
    them (host-environment references and stdio servers in ``mcp_config``, an ``llm_base_url``
    without ``llm_api_key``) is checked by ``service.agents.task_override_problems``.
    """

    task_id: str = Field(
        default_factory=lambda: new_id("task-"), min_length=1, max_length=256, pattern=TASK_ID_PATTERN
    )
    agent_id: str = Field(min_length=1, max_length=256)
    agent_input: str = Field(max_length=1_000_000)
    session_id: str | None = Field(default=None, max_length=256)
    user_id: str = Field(default="SYSTEM", max_length=256)
    llm_provider: str | None = None
    llm_model_name: str | None = None
    llm_base_url: str | None = None
    llm_api_key: str | None = Field(default=None, repr=False)
    sampling: SamplingParams | None = None
    system_prompt: str | None = None
    mcp_servers: list[str] | None = None
    mcp_config: dict[str, Any] | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    timeout: float | None = Field(default=None, gt=0, le=7 * 24 * 3600, description="Seconds.")
    ground_truth: Any = None
    reward: str | None = Field(default=None, description="Reward name; default: the server's.")
    priority: int = Field(default=0, ge=-1000, le=1000, description="Higher runs first.")
    metadata: dict[str, Any] = Field(default_factory=dict)

    def public(self) -> AworldTask:
        """This task as the API shows it: the API key replaced by a marker."""
        if self.llm_api_key is None:
            return self
        return self.model_copy(update={"llm_api_key": "***"})


class TaskState(_Model):
    """A task's status and outcome, without its trajectory (cheap to poll)."""

    task_id: str
    agent_id: str
    user_id: str = "SYSTEM"
    session_id: str | None = None
    status: TaskStatus
    attempts: int = 0
    host: str | None = Field(default=None, description="The server that ran (or runs) it.")
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    cancel_requested: bool = False
    answer: str | None = None
    reward: float | None = None
    error: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at


class TaskResult(TaskState):
    """A finished task: its state, the task as submitted and its trajectory (the Episode)."""

    task: AworldTask | None = None
    episode: Episode | None = None


class TaskAttempt(_Model):
    """One claim of a task by one host. ``outcome`` is None while it runs (or if its host died)."""

    task_id: str
    attempt: int
    owner: str
    started_at: float
    ended_at: float | None = None
    outcome: str | None = None
