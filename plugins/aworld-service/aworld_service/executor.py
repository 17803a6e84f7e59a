"""The executor: claims tasks from the store, runs them with their agents, records the results.

One per server process. It keeps at most ``concurrency`` runs going; it claims more when a run
ends, when a task is submitted here, or every ``poll_s`` (tasks submitted to other hosts of a
shared store). A renewal loop extends every held lease every ``lease_s / 3``.

Never two hosts at once: each run also has a local deadline, ``lease_s`` (minus a margin) after
the last renewal request that the store confirmed. Since the store set the lease's expiry at
least that far ahead on its own clock, a host that can no longer renew (store unreachable) stops
its run before any other host may claim the task; and if it still tries to write, the lease
token fences it out. Near the deadline a host first tries one urgent renewal, so a host whose
event loop merely stalled for a while (a blocking agent, an overloaded machine) keeps its runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, Episode, EpisodeStatus, TaskStatus
from aworld_service import states
from aworld_service.agents import AgentRegistry, run_agent_task, task_sample
from aworld_service.metrics import ServiceMetrics
from aworld_service.store import DEFAULT_MAX_ATTEMPTS, Claim, Outcome, TaskStore

log = logging.getLogger("aworld_service")


@dataclass
class ExecutorConfig:
    owner: str
    concurrency: int = 8
    lease_s: float = 30.0
    poll_s: float = 0.5
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    default_timeout_s: float | None = None
    timeout_grace_s: float = 5.0
    reward: str | None = None
    drain_s: float = 10.0
    allow_stdio_mcp: bool = False  # a task's mcp_config may start stdio servers (see service.agents)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.lease_s <= 0.3:
            raise UsageError(f"the lease must be longer than 0.3 s, got {self.lease_s}")
        if self.max_attempts < 1:
            raise UsageError(f"max_attempts must be at least 1, got {self.max_attempts}")

    @property
    def margin_s(self) -> float:
        """How long before the lease's expiry a host stops a run it could not renew."""
        return min(2.0, self.lease_s * 0.2)


@dataclass
class _Run:
    claim: Claim
    confirmed: float  # loop time the last confirmed claim/renewal was sent: the lease lasts past it
    agent_future: asyncio.Future[Episode] | None = None
    outer: asyncio.Task[None] | None = None
    stop_reason: str | None = None
    deadline: asyncio.TimerHandle | None = None
    writing: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def task(self) -> AworldTask:
        return self.claim.task

    def stop(self, reason: str) -> None:
        """Stop the agent (not the result write) for ``reason``: cancel, lease_lost, shutdown."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.agent_future is not None and not self.agent_future.done():
            self.agent_future.cancel()


class TaskExecutor:
    def __init__(
        self,
        store: TaskStore,
        agents: AgentRegistry,
        config: ExecutorConfig,
        metrics: ServiceMetrics | None = None,
    ):
        self.store = store
        self.agents = agents
        self.config = config
        self.metrics = metrics or ServiceMetrics()
        self.runs: dict[str, _Run] = {}
        self.last_store_error: str | None = None
        self._wake = asyncio.Event()
        self._renew_now = asyncio.Event()
        self._stopping = False
        self._drained = False  # shutting down and the drain time is over: writes stop retrying
        self._loops: list[asyncio.Task[None]] = []

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def load(self) -> float:
        return len(self.runs) / self.config.concurrency

    def wake(self) -> None:
        """Claim now (a task was submitted here, or a run ended)."""
        self._wake.set()

    async def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="aworld-claim"),
            asyncio.create_task(self._renew_loop(), name="aworld-renew"),
        ]

    async def stop(self, drain_s: float | None = None) -> None:
        """Stop claiming; let runs finish for ``drain_s``; hand the rest back to the queue."""
        self._stopping = True
        self.wake()
        drain = self.config.drain_s if drain_s is None else drain_s
        outers = [run.outer for run in self.runs.values() if run.outer is not None]
        if outers and drain > 0:
            await asyncio.wait(outers, timeout=drain)
        self._drained = True
        for run in list(self.runs.values()):
            run.stop("shutdown")
        outers = [run.outer for run in self.runs.values() if run.outer is not None]
        if outers:
            await asyncio.wait(outers)
        for loop_task in self._loops:
            loop_task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)

    # --- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            self._wake.clear()
            free = self.config.concurrency - len(self.runs)
            if free > 0:
                sent = loop.time()
                try:
                    claims = await self.store.claim(
                        self.config.owner, self.agents.names, free, self.config.lease_s, self.config.max_attempts
                    )
                    self.last_store_error = None
                    if claims:
                        log.debug("claimed %d task(s) in %.3f s", len(claims), loop.time() - sent)
                except Exception as exc:  # the store is down: keep serving, try again
                    self._store_failed("claim", exc)
                    claims = []
                for claim in claims:
                    if self._stopping:  # claimed while stopping: give it straight back
                        await self._release(claim)
                        continue
                    self._start_run(claim, sent)
                if claims and len(claims) == free:
                    continue  # full now; the next loop waits for a run to end
                if claims:
                    continue  # there may be more: claim again at once
            try:
                await asyncio.wait_for(self._wake.wait(), self.config.poll_s)
            except TimeoutError:
                pass

    def _store_failed(self, what: str, exc: BaseException) -> None:
        self.metrics.bump("store_errors")
        self.last_store_error = f"{what}: {type(exc).__name__}: {exc}"
        log.warning("task store %s failed: %s: %s", what, type(exc).__name__, exc)

    def _start_run(self, claim: Claim, sent: float) -> None:
        run = _Run(claim, confirmed=sent)
        self.runs[claim.task.task_id] = run
        self._arm_deadline(run)
        run.outer = asyncio.create_task(self._execute(run), name=f"aworld-task-{claim.task.task_id}")

    def _arm_deadline(self, run: _Run) -> None:
        """Past ``confirmed + lease - margin`` without a renewal, renew at once; past
        ``confirmed + lease - margin / 4``, stop the run (another host may claim it soon after)."""
        if run.deadline is not None:
            run.deadline.cancel()
        loop = asyncio.get_running_loop()
        run.deadline = loop.call_at(
            run.confirmed + self.config.lease_s - self.config.margin_s, self._deadline_near, run
        )

    def _deadline_near(self, run: _Run) -> None:
        if self.runs.get(run.task.task_id) is not run or run.writing:
            return
        # a stalled loop (a blocking agent, a loaded machine) delays renewals; the store's lease
        # still runs until at least confirmed + lease, so one urgent renewal may yet keep it
        self._renew_now.set()
        loop = asyncio.get_running_loop()
        run.deadline = loop.call_at(
            run.confirmed + self.config.lease_s - self.config.margin_s / 4, self._deadline_passed, run
        )

    def _deadline_passed(self, run: _Run) -> None:
        if self.runs.get(run.task.task_id) is run and not run.writing:
            log.warning("task %s: lease not renewed in time; stopping it here", run.task.task_id)
            run.stop("lease_lost")

    # --- renewing --------------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.lease_s / 3
        while True:
            try:
                await asyncio.wait_for(self._renew_now.wait(), interval)
            except TimeoutError:
                pass
            self._renew_now.clear()
            leases = {
                tid: run.claim.lease_token for tid, run in self.runs.items() if run.stop_reason != "lease_lost"
            }
            if not leases:
                continue
            sent = loop.time()
            try:
                renewal = await asyncio.wait_for(
                    self.store.renew(self.config.owner, leases, self.config.lease_s), timeout=interval
                )
            except Exception as exc:  # the deadlines stop runs if this keeps failing
                self._store_failed("renew", exc)
                continue
            log.debug("renewed %d of %d lease(s) in %.3f s", len(renewal.held), len(leases), loop.time() - sent)
            for task_id in leases:
                run = self.runs.get(task_id)
                if run is None:
                    continue
                if task_id in renewal.held:
                    run.confirmed = sent
                    if not run.writing:
                        self._arm_deadline(run)
                    if task_id in renewal.cancel_requested and not run.writing and run.stop_reason is None:
                        log.info("task %s: cancel requested; stopping it", task_id)
                        run.stop("cancel")
                elif not run.writing:
                    log.warning("task %s: lease lost (another host may have it); stopping it here", task_id)
                    run.stop("lease_lost")

    # --- running ---------------------------------------------------------------------------

    def _timeout_for(self, task: AworldTask, entry_kind: str) -> float | None:
        timeout = task.timeout if task.timeout is not None else self.config.default_timeout_s
        if timeout is None:
            return None
        # the agent runtime enforces the timeout itself and returns a TIMEOUT episode; ours is
        # the backstop. Task functions have only ours.
        return timeout if entry_kind == "task_function" else timeout + self.config.timeout_grace_s

    async def _execute(self, run: _Run) -> None:
        task, claim = run.task, run.claim
        episode_id = f"ep-{task.task_id}-{claim.attempt}"
        try:
            try:
                entry = self.agents.get(task.agent_id)
            except UsageError as exc:
                episode = _ended(task, episode_id, EpisodeStatus.FAILED, str(exc))
            else:
                if task.timeout is None and self.config.default_timeout_s is not None and entry.kind != "task_function":
                    task = task.model_copy(update={"timeout": self.config.default_timeout_s})
                run.agent_future = asyncio.ensure_future(
                    run_agent_task(entry, task, episode_id=episode_id, allow_stdio_mcp=self.config.allow_stdio_mcp)
                )
                done, _ = await asyncio.wait({run.agent_future}, timeout=self._timeout_for(task, entry.kind))
                if not done:
                    run.agent_future.cancel()
                    await asyncio.wait({run.agent_future})
                    if run.stop_reason is None:
                        run.stop_reason = "timeout"
                episode = self._episode_of(run, task, episode_id)
            # an agent that returned before the stop took effect finished its work: write it (or be fenced)
            future = run.agent_future
            finished = (
                future is not None and not future.cancelled() and future.exception() is None
                and episode.status is not EpisodeStatus.CANCELLED
            )
            if run.stop_reason == "lease_lost" and not finished:
                self.metrics.bump("lease_lost")
                # stopped here: back to the queue now if the lease is still ours (the store came
                # back), instead of waiting for it to lapse; fenced if another host has it
                await self._release(claim)
                return
            if run.stop_reason == "shutdown":
                await self._release(claim)
                return
            run.writing = True
            if run.deadline is not None:
                run.deadline.cancel()
            try:
                hook_error = await self._score(episode, task)
            except Exception as exc:  # scoring itself broke: record it
                log.exception("task %s: scoring failed", task.task_id)
                hook_error = f"after the episode: {type(exc).__name__}: {exc}"
            await self._write(run, episode, hook_error)
        except Exception:  # a bug here must not kill the server; the lease expires and it reruns
            log.exception("task %s: the executor failed", task.task_id)
        finally:
            if run.deadline is not None:
                run.deadline.cancel()
            if self.runs.get(task.task_id) is run:
                del self.runs[task.task_id]
            self.wake()

    def _episode_of(self, run: _Run, task: AworldTask, episode_id: str) -> Episode:
        future = run.agent_future
        assert future is not None and future.done()
        if future.cancelled():
            # the runtime attaches the partial episode to the CancelledError: keep its steps
            partial = None
            try:
                future.result()
            except asyncio.CancelledError as exc:
                partial = getattr(exc, "episode", None)
            if run.stop_reason == "cancel":
                status, error = EpisodeStatus.CANCELLED, "cancelled by request while running"
            elif run.stop_reason == "timeout":
                limit = task.timeout if task.timeout is not None else self.config.default_timeout_s
                status, error = EpisodeStatus.TIMEOUT, f"timed out after {limit} s"
            else:
                status, error = EpisodeStatus.CANCELLED, f"stopped: {run.stop_reason}"
            if isinstance(partial, Episode):
                partial.finish(status, error)
                return partial
            return _ended(task, episode_id, status, error)
        exc = future.exception()
        if exc is not None:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            log.warning("task %s: the agent raised %s", task.task_id, detail)
            return _ended(task, episode_id, EpisodeStatus.FAILED, f"the agent raised {detail}")
        episode = future.result()
        if episode.status is EpisodeStatus.RUNNING:
            episode.finish(EpisodeStatus.FAILED, "the agent runtime returned an unfinished episode")
        return episode

    async def _score(self, episode: Episode, task: AworldTask) -> str | None:
        """Reward (when one is configured), then the ``on_episode_end`` hooks once (the worker kit's);
        returns what the observers raised, for the task's error."""
        from aworld_core.worker import notify_episode_end

        reward = task.reward or self.config.reward
        if reward is not None:
            from aworld_core.rewards import score_episode

            try:
                await score_episode(episode, task_sample(task), reward, notify=False)
            except UsageError as exc:  # misconfigured reward: the task cannot be scored at all
                episode.finish(EpisodeStatus.FAILED, f"reward '{reward}' cannot be computed: {exc}")
        errors = await notify_episode_end(episode)
        return f"after the episode: {'; '.join(errors)}" if errors else None

    async def _write(self, run: _Run, episode: Episode, extra_error: str | None = None) -> None:
        task = run.task
        status = states.from_episode(episode.status)
        error = "; ".join(e for e in (episode.error, extra_error) if e) or None
        if episode.reward_errors:
            failed = "; ".join(f"{name}: {text}" for name, text in episode.reward_errors.items())
            error = f"{error}; reward failed: {failed}" if error else f"reward failed: {failed}"
        outcome = Outcome(status, episode, episode.final_answer, episode.reward, error)
        # a result the store refuses as data (not because it is down) is written cleaned, and if
        # even that is refused, as FAILED with the reason: retrying it would hold the slot forever
        won: bool | None = None
        problem: Exception | None = None
        for form in ("as is", "cleaned", "failed"):
            try:
                written = outcome if form == "as is" else _cleaned(outcome) if form == "cleaned" else _unwritable(problem)
                won = await self._finish(run, written)
                status = written.status
                break
            except _Drained:
                log.error("task %s: shutting down before its result could be written; it reruns", task.task_id)
                return
            except Exception as exc:  # the result itself, not the store: try the next form
                problem = exc
                log.warning("task %s: the store refused the result (%s: %s)", task.task_id, type(exc).__name__,
                            _clean_text(str(exc)))
        if won is None:
            log.error("task %s: no form of its result could be written; its lease lapses and it reruns", task.task_id)
            return
        if won:
            self.metrics.count_finished(status.value, time.monotonic() - run.started)
        else:
            self.metrics.bump("fenced")
            log.warning("task %s: result refused (lease lost to another host); dropped here", task.task_id)

    async def _finish(self, run: _Run, outcome: Outcome) -> bool:
        """``store.finish``, retried while the store is unavailable; any other error is raised.

        A finished run keeps trying while the store is down: its lease may expire meanwhile, but
        its token still writes until another host re-claims the task (store.py, "Stalls"); the
        renewals, which go on for it, keep it from being re-claimed once the store answers.
        """
        attempt = 0
        while True:
            try:
                return await self.store.finish(run.task.task_id, run.claim.lease_token, outcome)
            except Exception as exc:
                if not store_unavailable(exc):
                    raise
                self._store_failed("finish", exc)
                if self._drained:
                    raise _Drained from exc
                await asyncio.sleep(min(0.2 * 2**attempt, self.config.lease_s / 4))
                attempt = min(attempt + 1, 16)

    async def _release(self, claim: Claim) -> None:
        try:
            if await self.store.release(claim.task.task_id, claim.lease_token):
                self.metrics.bump("released")
        except Exception as exc:  # its lease expires instead
            self._store_failed("release", exc)

    def snapshot(self) -> dict[str, Any]:
        return {
            "running": len(self.runs),
            "concurrency": self.config.concurrency,
            "load": round(self.load, 4),
            "owner": self.config.owner,
            "store_error": self.last_store_error,
        }


def _ended(task: AworldTask, episode_id: str, status: EpisodeStatus, error: str) -> Episode:
    episode = Episode(id=episode_id, task_id=task.task_id, agent_id=task.agent_id)
    episode.finish(status, error)
    return episode


class _Drained(Exception):
    """Shutting down while the store was unavailable: the result is not written (the task reruns)."""


def store_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the store could not be reached or was busy (worth retrying), as opposed
    to refusing what was written (a value it cannot encode or hold, an illegal transition).

    SQLite raises ``sqlite3.OperationalError`` for "database is locked" and I/O failures;
    psycopg raises ``OperationalError`` (a failed connect or timeout, a lost server) and
    ``InterfaceError`` (an unusable connection); a socket raises ``OSError``.
    """
    import sqlite3
    import sys

    if isinstance(exc, (OSError, TimeoutError, sqlite3.OperationalError)):
        return True
    psycopg = sys.modules.get("psycopg")  # only a PostgreSQL store has imported it
    return psycopg is not None and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def _clean_text(text: str) -> str:
    """``text`` as any store can hold it: lone surrogates (from a JSON escape like ``\\ud800``)
    become U+FFFD, a valid pair becomes its character, NUL (PostgreSQL text cannot hold it) goes."""
    if text.isascii():
        return text.replace("\x00", "")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").replace("\x00", "")


def _clean_value(value: Any) -> Any:
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, dict):
        return {_clean_value(k): _clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_value(v) for v in value]
    return value


def _cleaned(outcome: Outcome) -> Outcome:
    """``outcome`` with every text of it (the trajectory's too) cleaned by :func:`_clean_text`."""
    episode = outcome.episode
    if episode is not None:
        episode = Episode.model_validate(_clean_value(episode.model_dump()))
    answer = _clean_text(outcome.answer) if outcome.answer is not None else None
    error = _clean_text(outcome.error) if outcome.error is not None else None
    return Outcome(outcome.status, episode, answer, outcome.reward, error)


def _unwritable(problem: BaseException | None) -> Outcome:
    """The last resort: FAILED, without the trajectory, saying why the result could not be stored."""
    why = f"{type(problem).__name__}: {problem}" if problem is not None else "unknown"
    return Outcome(TaskStatus.FAILED, None, None, None, _clean_text(f"the result could not be stored: {why}"))
