"""The durable task store: the interface every store implements, and ``open_store(url)``.

Stores are found by URL scheme in the entry-point group ``aworld_service.stores`` (this
distribution registers ``sqlite``, ``postgresql`` and ``postgres``): a third-party store is a
:class:`TaskStore` subclass taking ``(url, **options)``, registered under its scheme, and
``--store myscheme://...`` then opens it; no code here names it.

A store holds the queue and the record of every task: the task as submitted, its status, its
lease (which host runs it, until when, under which token), every attempt, and the finished
trajectory. Servers share a queue by sharing a store (PostgreSQL); one host may use SQLite.

Leases and fencing: a host that claims a task gets a fresh ``lease_token`` and a lease that
expires ``lease_s`` later unless renewed. Every later write for that run (renew, finish,
release) names the token and succeeds only while the task is RUNNING under that token, that is
until another host re-claims it (a claim makes a new token) or it is settled as abandoned; then
the store refuses it. A host whose lease expired (it died, or stalled) can therefore never
overwrite the result of the host that re-claimed the task.

Stalls: when the store itself is unreachable or locked for longer than a lease, every lease
expires at once although no host died, and the hosts' finished runs cannot write. So an expired
lease is not claimable at once: the first claim that sees it expired only notes when
(``lease_lapsed_at``), and it becomes claimable (or is settled) ``lease_s`` after that, time in
which the store answers and a live host renews it or writes its result (both still accepted
under its token, which also clears the note). A dead host's tasks are thus re-claimed one lease
later than its lease's end.

Times are seconds since the epoch from the store's clock (PostgreSQL's, for a shared store), so
hosts with skewed clocks agree on when a lease expires.
"""

from __future__ import annotations

import abc
import hashlib
import importlib.metadata
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, Episode, TaskAttempt, TaskResult, TaskState, TaskStatus
from aworld_service import states
from aworld_service.errors import TaskNotFoundError

DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Claim:
    """A task this host now runs, and the token that proves it."""

    task: AworldTask
    attempt: int
    lease_token: str
    started_at: float


@dataclass(frozen=True)
class Submitted:
    """The answer to one submission: the stored state, and whether this call created it."""

    state: TaskState
    created: bool


@dataclass(frozen=True)
class Renewal:
    """Which leases are still held after a renewal, and which of them a client asked to cancel."""

    held: frozenset[str]
    cancel_requested: frozenset[str]


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as written by :meth:`TaskStore.finish`."""

    status: TaskStatus
    episode: Episode | None = None
    answer: str | None = None
    reward: float | None = None
    error: str | None = None


@dataclass
class TaskFilter:
    """Which tasks a listing or a trajectory download returns (all given fields must match)."""

    statuses: Sequence[TaskStatus] | None = None
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    task_ids: Sequence[str] | None = None
    after: int = 0  # a cursor: the ``next_after`` of the previous page
    limit: int = 100


@dataclass
class Page:
    """One page of a listing. ``next_after`` is the cursor of the next page (None: the last)."""

    items: list[Any] = field(default_factory=list)
    next_after: int | None = None


def payload_hash(task: AworldTask) -> str:
    """A digest of what was submitted, to tell a retry (same payload) from a conflicting reuse."""
    text = json.dumps(task.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class TaskStore(abc.ABC):
    """What the server and its executor need from a store. All methods are coroutines.

    Implementations must make each method one atomic step (a transaction), because several
    hosts call them at the same time on the same tasks.
    """

    url: str
    kind: str

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and create the tables if needed (safe when several hosts start at once)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def store_id(self) -> str:
        """A random id made when the store was created: hosts with the same id share a queue."""

    @abc.abstractmethod
    async def submit(self, tasks: Sequence[AworldTask]) -> list[Submitted]:
        """Insert new tasks as INIT; an id already stored with the same payload returns the stored
        state (``created=False``); with a different payload raises ``TaskConflictError``. All or
        nothing: a conflict inserts none of ``tasks``."""

    @abc.abstractmethod
    async def claim(
        self, owner: str, agent_ids: Sequence[str], limit: int, lease_s: float, max_attempts: int
    ) -> list[Claim]:
        """Atomically move up to ``limit`` claimable tasks (INIT, or RUNNING with a lease seen
        expired ``lease_s`` ago: "Stalls" above) for ``agent_ids`` to RUNNING under ``owner``,
        highest priority then oldest first.
        A task whose lease expired ``max_attempts`` times becomes FAILED instead, and one whose
        cancel was requested becomes CANCELLED."""

    @abc.abstractmethod
    async def renew(self, owner: str, leases: dict[str, str], lease_s: float) -> Renewal:
        """Extend the leases ``{task_id: lease_token}`` this host holds by ``lease_s`` from now
        (an expired one too, while nobody re-claimed it)."""

    @abc.abstractmethod
    async def finish(self, task_id: str, lease_token: str, outcome: Outcome) -> bool:
        """Write a run's result. False (nothing written) when the task is no longer RUNNING under
        ``lease_token`` (another host re-claimed it); an expired lease nobody re-claimed still writes."""

    @abc.abstractmethod
    async def release(self, task_id: str, lease_token: str) -> bool:
        """Give a running task back to the queue (INIT) because this host is shutting down."""

    @abc.abstractmethod
    async def cancel(self, task_id: str) -> TaskState:
        """INIT becomes CANCELLED; RUNNING gets ``cancel_requested`` (its host stops it at the
        next renewal). Raises ``TaskNotFoundError``, or ``IllegalTransitionError`` when final."""

    @abc.abstractmethod
    async def get(self, task_id: str) -> TaskState | None: ...

    @abc.abstractmethod
    async def get_many(self, task_ids: Sequence[str]) -> list[TaskState]:
        """The states of the ids that exist (unknown ids are left out)."""

    @abc.abstractmethod
    async def get_result(self, task_id: str) -> TaskResult | None: ...

    @abc.abstractmethod
    async def list(self, filter: TaskFilter) -> Page:
        """Task states matching ``filter``, oldest first, one page at a time."""

    @abc.abstractmethod
    async def results(self, filter: TaskFilter) -> Page:
        """Finished tasks with their trajectories (TaskResult), oldest first, one page at a time."""

    @abc.abstractmethod
    async def counts(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status."""

    @abc.abstractmethod
    async def count(self, status: TaskStatus) -> int:
        """How many tasks are in ``status`` (cheap: walks the status index)."""

    @abc.abstractmethod
    async def attempts(self, task_id: str) -> list[TaskAttempt]:
        """Every claim of the task, oldest first."""

    async def iter_results(self, filter: TaskFilter) -> AsyncIterator[TaskResult]:
        """All finished tasks matching ``filter``, fetched a page at a time."""
        page_filter = TaskFilter(**{**filter.__dict__})
        while True:
            page = await self.results(page_filter)
            for item in page.items:
                yield item
            if page.next_after is None:
                return
            page_filter.after = page.next_after


#: the entry-point group of task stores: name = URL scheme, value = ``module:TaskStoreSubclass``
STORE_ENTRY_POINT_GROUP = "aworld_service.stores"


def store_schemes() -> dict[str, str]:
    """Every registered store: URL scheme -> its ``module:class`` reference (not imported)."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=STORE_ENTRY_POINT_GROUP)}


def open_store(url: str, **options: Any) -> TaskStore:
    """The store a URL names: ``sqlite:///path/to/file.sqlite``, ``postgresql://user@host/db``, or
    any scheme a distribution registers in ``aworld_service.stores``."""
    scheme = url.partition(":")[0].lower() if ":" in url else ""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=STORE_ENTRY_POINT_GROUP)}
    entry = found.get(scheme)
    if entry is None:
        others = sorted(set(found) - {"sqlite", "postgresql", "postgres"})
        extra = f"; also installed: {', '.join(f'{s}://...' for s in others)}" if others else ""
        missing = "" if "sqlite" in found else (
            "; no store is registered at all: reinstall aworld-service (its entry points are missing)")
        raise UsageError(
            f"unknown task store URL {url!r}: use sqlite:///path/to/tasks.sqlite (one host) or "
            f"postgresql://user:password@host:5432/dbname (hosts sharing one queue){extra}{missing}"
        )
    try:
        store_type = entry.load()
    except ImportError as exc:
        raise UsageError(f"the task store for {scheme}:// ({entry.value}) cannot be imported: {exc}") from exc
    if not (isinstance(store_type, type) and issubclass(store_type, TaskStore)):
        raise UsageError(
            f"the task store registered for {scheme}:// ({entry.value}) is not a TaskStore subclass; "
            f"its distribution registers the wrong object in '{STORE_ENTRY_POINT_GROUP}'"
        )
    return store_type(url, **options)


# --- helpers shared by the SQL stores ------------------------------------------------------------

STATE_COLUMNS = (
    "seq, task_id, agent_id, user_id, session_id, status, attempts, owner, created_at, started_at, "
    "ended_at, cancel_requested, answer, reward, error"
)
RESULT_COLUMNS = STATE_COLUMNS + ", task_json, episode_json"
# a refused finish (the lease was lost) still closes its attempt, without hiding a real outcome;
# parameters: now, task_id, lease_token
FENCED_ATTEMPT = (
    "UPDATE aworld_task_attempts SET ended_at = COALESCE(ended_at, %s), outcome = CASE WHEN outcome IS NULL "
    "OR outcome = 'lease_expired' THEN 'fenced' ELSE outcome END WHERE task_id = %s AND lease_token = %s"
)


ATTEMPT_COLUMNS = "task_id, attempt, owner, started_at, ended_at, outcome"
CANCELLED_BEFORE_RUN = "cancelled by request before it ran"
CANCELLED_AFTER_LEASE = "cancelled by request (its host stopped renewing)"


def state_from_row(row: dict[str, Any]) -> TaskState:
    return TaskState(
        task_id=row["task_id"],
        agent_id=row["agent_id"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        status=TaskStatus(row["status"]),
        attempts=row["attempts"],
        host=row["owner"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        cancel_requested=bool(row["cancel_requested"]),
        answer=row["answer"],
        reward=row["reward"],
        error=row["error"],
    )


def result_from_row(row: dict[str, Any]) -> TaskResult:
    state = state_from_row(row)
    task = AworldTask.model_validate_json(row["task_json"]).public() if row["task_json"] else None
    episode = Episode.model_validate_json(row["episode_json"]) if row["episode_json"] else None
    return TaskResult(**state.__dict__, task=task, episode=episode)


def abandoned_error(attempts: int) -> str:
    return (
        f"abandoned after {attempts} attempts: each time the host running it stopped renewing its "
        f"lease (the host died or stalled). Check the servers' logs; raise --max-attempts to retry more"
    )


def conflict_message(task_id: str) -> str:
    return (
        f"task '{task_id}' was already submitted with a different payload; a task id is an "
        f"idempotency key, so use a new task_id for a different task"
    )


def task_not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(f"unknown task id '{task_id}'", status=404)


def expired_outcome(row: dict[str, Any]) -> tuple[TaskStatus, str]:
    """How a task whose lease expired and that must not run again ends (row: ``task_id``,
    ``attempts``, ``cancel_requested``): CANCELLED when a cancel was asked for, else FAILED."""
    if row["cancel_requested"]:
        status, error = TaskStatus.CANCELLED, CANCELLED_AFTER_LEASE
    else:
        status, error = TaskStatus.FAILED, abandoned_error(row["attempts"])
    states.check(TaskStatus.RUNNING, status, row["task_id"])
    return status, error


def result_statuses(filter: TaskFilter) -> list[TaskStatus]:
    """The statuses :meth:`TaskStore.results` may return: the filter's final ones (all final ones
    when it names none)."""
    return [s for s in (filter.statuses or states.TERMINAL) if s in states.TERMINAL]


def page_from_rows(rows: Sequence[Any], filter: TaskFilter, make: Any) -> Page:
    """A page from up to ``filter.limit + 1`` rows ordered by ``seq``: the extra row only says
    that another page follows."""
    more = len(rows) > filter.limit
    rows = rows[: filter.limit]
    return Page([make(r) for r in rows], rows[-1]["seq"] if more else None)


def counts_from_rows(rows: Sequence[Any]) -> dict[TaskStatus, int]:
    """Every status's count from ``status, n`` rows (a status without rows counts 0)."""
    found = {TaskStatus(r["status"]): r["n"] for r in rows}
    return {s: found.get(s, 0) for s in TaskStatus}
