"""What the ms-swift side of a job shares within one process, built with the worker kit.

ms-swift builds the scheduler, the reward functions and the callback itself, from names, in
whatever process trains or serves rollouts; none of them can be handed objects. They find the job
through ``AWORLD_SWIFT_JOB`` (the serialized job the launcher wrote), and :func:`get_runtime`
loads it once per process (``load_job``). Each side builds only what it uses:

* the rollout side (the scheduler; in server mode the ``swift rollout`` server): the agent
  (``build_agent``), the token client (``build_token_llm``), an ``EpisodeRunner``, the episode loop
  and the record of finished episodes;
* the trainer side (the reward functions and the callback): the group policy
  (``GroupPolicy.from_job``), the all-failed stop (``FailedSteps``) and the step metrics.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aworld_core.errors import ConfigError, UsageError
from aworld_core.schemas import Episode, Sample
from aworld_core.worker import FailedSteps, GroupPolicy, load_job

if TYPE_CHECKING:
    from aworld_core.export import JsonlEpisodeWriter
    from aworld_core.worker import EpisodeRunner, LoopThread
    from aworld_swift.trajectory import RequestRecorder

JOB_ENV = "AWORLD_SWIFT_JOB"
TRAJECTORIES_FILE = "trajectories.jsonl"
OPTIONS_KEY = "aworld"  # backends.swift.aworld: our options; every other key goes to ms-swift
# ms-swift samples one turn of the whole batch at once, so every trajectory's episode must be
# running: the runner's cap on concurrent episodes (rollout.concurrency) would deadlock it
UNBOUNDED = 1 << 30


class SwiftOptions(BaseModel):
    """``backends.swift.aworld``: how aworld-swift runs (ms-swift's own arguments sit beside it)."""

    model_config = ConfigDict(extra="forbid")

    trajectories: bool = Field(default=True, description="Write every episode to trajectories.jsonl.")
    min_new_tokens: int = Field(
        default=1, ge=0,
        description="Set on the policy's generation config: an empty completion crashes ms-swift's GRPO.",
    )
    keep_episodes: int = Field(default=4096, ge=1, description="Finished episodes kept for reward functions.")
    start_rollout_server: bool = Field(
        default=True,
        description="Server mode: launching starts the plan's 'swift rollout' server on this machine, waits for it, "
                    "trains, and stops it; false: the server is yours (started with the plan's printed line).",
    )
    rollout_startup_timeout_s: float = Field(
        default=900.0, gt=0, description="Server mode: how long launching waits for the rollout server's /health."
    )

    @classmethod
    def from_job(cls, job: Any) -> SwiftOptions:
        section = job.backend_section("swift").get(OPTIONS_KEY) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"backends.swift.{OPTIONS_KEY} must be a mapping of options, got {section!r}")
        try:
            return cls.model_validate(section)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigError(
                f"invalid backends.swift.{OPTIONS_KEY}: {problems} (known options: {', '.join(cls.model_fields)})"
            ) from None


class SwiftRuntime:
    """The job in this process, and what the rollout and trainer sides build from it (lazily)."""

    def __init__(self, job: Any, job_path: Path | None = None):
        from aworld_swift.trajectory import SwiftTurnEngine

        self.job = load_job(job)
        if self.job.reward is None:
            raise UsageError("the swift backend needs a reward in the job config (e.g. reward: {name: gsm8k})")
        self.options = SwiftOptions.from_job(self.job)
        self.policy = GroupPolicy.from_job(self.job)
        self.failed_steps = FailedSteps(self.policy.max_failed_steps)
        self.engine = SwiftTurnEngine()
        self.trainer: Any = None  # ms-swift's trainer, set by the aworld callback (trainer side)
        self.judged: tuple[Any, Any] | None = None  # the last batch the reward functions judged (its ids, every process's)
        self.last_metrics: dict[str, float] = {}  # that batch's aworld/* metrics
        self._loop: LoopThread | None = None
        self._llm: RequestRecorder | None = None
        self._runner: EpisodeRunner | None = None
        self._lock = threading.Lock()
        self._episodes: OrderedDict[str, tuple[Episode, Sample]] = OrderedDict()
        folder = job_path.parent if job_path is not None else Path(self.job.resolved_output_dir())
        # opened on the first episode: a process that runs none (the trainer beside a rollout server)
        # writes nothing; appended to, since several processes may share the folder
        self.trajectories_path = folder / _per_process(TRAJECTORIES_FILE) if self.options.trajectories else None
        self.writer: JsonlEpisodeWriter | None = None
        atexit.register(self.close)

    # -- the rollout side --------------------------------------------------------------------------

    @property
    def loop(self) -> LoopThread:
        """The process's episode loop: a daemon thread, since ms-swift drives its hooks from
        short-lived loops and would close MCP sessions with them."""
        with self._lock:
            if self._loop is None:
                from aworld_core.worker import LoopThread

                self._loop = LoopThread("aworld-swift")
            return self._loop

    def runner(self, tokenizer: Any) -> EpisodeRunner:
        """The process's ``EpisodeRunner``: the job's agent over the token client built on
        ``tokenizer`` (ms-swift's: the ids must be its ids), built on first use."""
        from aworld_core.worker import EpisodeRunner, build_agent, build_token_llm
        from aworld_swift.trajectory import RequestRecorder, swift_sampling

        with self._lock:
            if self._runner is None:
                if tokenizer is None:
                    raise UsageError("ms-swift gave the aworld scheduler no tokenizer")
                llm = build_token_llm(self.engine, tokenizer, self.job, model_name="aworld-swift-policy",
                                      require_logprobs=False)  # ms-swift's transformers engine may report none
                self._llm = RequestRecorder(llm, swift_sampling(self.job))
                self._runner = EpisodeRunner.from_job(self.job, self._llm, agent=build_agent(self.job),
                                                      concurrency=UNBOUNDED)
            return self._runner

    @property
    def llm(self) -> RequestRecorder:
        if self._llm is None:
            raise UsageError("the aworld token client is not set up yet (the scheduler creates it)")
        return self._llm

    @property
    def tokenizer(self) -> Any:
        """ms-swift's tokenizer, once the scheduler has set up the token client (else None)."""
        return None if self._llm is None else self._llm.tokenizer

    def record(self, episode: Episode, sample: Sample) -> None:
        """Keep a finished episode for the reward functions and write it to the trajectories file."""
        with self._lock:
            self._episodes[episode.id] = (episode, sample)
            while len(self._episodes) > self.options.keep_episodes:
                self._episodes.popitem(last=False)
            if self.trajectories_path is not None:
                if self.writer is None:
                    from aworld_core.export import JsonlEpisodeWriter

                    self.writer = JsonlEpisodeWriter(self.trajectories_path, append=True)
                self.writer.write(episode)

    def episode(self, episode_id: str) -> tuple[Episode, Sample] | None:
        with self._lock:
            return self._episodes.get(episode_id)

    # -- the trainer side ----------------------------------------------------------------------------

    def training(self) -> bool:
        """Whether the trainer is in a training step (not evaluating); True without the callback."""
        model = getattr(self.trainer, "model", None)
        return True if model is None else bool(getattr(model, "training", True))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._loop is not None:
            self._loop.close()


def _per_process(name: str) -> str:
    """``trajectories.jsonl`` for the main process; other training ranks and rollout-server
    workers get their own file (``.rank<N>`` / ``.rollout<N>``)."""
    stem, _, ext = name.rpartition(".")
    rank = os.environ.get("RANK")
    if rank not in (None, "", "0"):
        return f"{stem}.rank{rank}.{ext}"
    worker = os.environ.get("SWIFT_ROLLOUT_DP_RANK")
    if worker not in (None, "", "0"):
        return f"{stem}.rollout{worker}.{ext}"
    return name


_runtime: SwiftRuntime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> SwiftRuntime:
    """This process's runtime, built from the job file ``AWORLD_SWIFT_JOB`` names."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            path = os.environ.get(JOB_ENV)
            if not path:
                raise UsageError(
                    f"the aworld multi-turn scheduler and reward functions need the job: set {JOB_ENV} to the "
                    f"job file (python -m aworld_core.run --backend swift writes it and sets it; for a "
                    f"'swift rollout' server, use the command the plan prints)"
                )
            job_path = Path(path)
            if not job_path.is_file():
                raise UsageError(
                    f"{JOB_ENV}={path} does not name a file; it is written when the job is launched "
                    f"(python -m aworld_core.run --backend swift --config job.yaml), point it at that job.json"
                )
            _runtime = SwiftRuntime(job_path, job_path)
        return _runtime


def current_runtime() -> SwiftRuntime | None:
    """The process's runtime when there is one (installed, or ``AWORLD_SWIFT_JOB`` is set), else None."""
    if _runtime is not None:
        return _runtime
    return get_runtime() if os.environ.get(JOB_ENV) else None


def set_runtime(runtime: SwiftRuntime | None) -> None:
    """Install (or clear) the process's runtime; for embedding and tests."""
    global _runtime
    with _runtime_lock:
        _runtime = runtime
