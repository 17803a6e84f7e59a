"""SQLite task store: one host, one file, nothing lost when the server restarts.

WAL journal with ``synchronous=NORMAL``: a committed task survives the process being killed
(``synchronous=FULL`` via ``?synchronous=full`` also survives power loss). Every statement runs
on one dedicated thread holding the one connection, so the event loop never blocks on disk and
the connection is never shared between threads; writes queued while that thread is busy are
committed together (group commit), each in its own savepoint so one failing write (a conflicting
resubmission) does not undo the others. Claims use ``BEGIN IMMEDIATE`` (SQLite's write
lock), so even several processes on one machine sharing the file cannot claim a task twice.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, TaskAttempt, TaskResult, TaskState, TaskStatus
from aworld_service import states
from aworld_service.errors import TaskConflictError
from aworld_service.store import (
    ATTEMPT_COLUMNS,
    CANCELLED_BEFORE_RUN,
    FENCED_ATTEMPT,
    RESULT_COLUMNS,
    STATE_COLUMNS,
    Claim,
    Outcome,
    Page,
    Renewal,
    Submitted,
    TaskFilter,
    TaskStore,
    conflict_message,
    counts_from_rows,
    expired_outcome,
    page_from_rows,
    payload_hash,
    result_from_row,
    result_statuses,
    state_from_row,
    task_not_found,
)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS aworld_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS aworld_tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT,
    priority INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    task_json TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_token TEXT,
    lease_expires_at REAL,
    lease_lapsed_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    answer TEXT,
    reward REAL,
    error TEXT,
    episode_json TEXT
);
CREATE INDEX IF NOT EXISTS aworld_tasks_queue ON aworld_tasks (status, priority DESC, seq);
CREATE TABLE IF NOT EXISTS aworld_task_attempts (
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    owner TEXT NOT NULL,
    lease_token TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT,
    PRIMARY KEY (task_id, attempt)
);
"""

_RUNNING = TaskStatus.RUNNING.value
_INIT = TaskStatus.INIT.value


class SQLiteTaskStore(TaskStore):
    kind = "sqlite"

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0):
        self.url = url
        parts = urlsplit(url)
        # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them
        raw_path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if parts.netloc or not raw_path:
            raise UsageError(
                f"bad SQLite store URL {url!r}: use sqlite:///relative/file.sqlite or "
                f"sqlite:////absolute/file.sqlite"
            )
        self.path = Path(raw_path)
        query = parse_qs(parts.query)
        self._synchronous = query.get("synchronous", ["normal"])[0].upper()
        if self._synchronous not in ("NORMAL", "FULL", "EXTRA"):
            raise UsageError(f"bad synchronous={self._synchronous!r} in {url!r}: use normal, full or extra")
        self._busy_ms = int(busy_timeout_s * 1000)
        self._conn: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aworld-sqlite")
        self._lock = threading.Lock()
        self._pending: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._flushing = False
        self._in_batch = False
        self._store_id: str | None = None

    # --- plumbing --------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the SQLite task store is not open; call await store.open() first")
        return self._conn

    def _open(self) -> None:
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(aworld_tasks)")}
            if "lease_lapsed_at" not in columns:  # a store made before the column existed
                conn.execute("ALTER TABLE aworld_tasks ADD COLUMN lease_lapsed_at REAL")
            conn.execute(
                "INSERT OR IGNORE INTO aworld_meta (key, value) VALUES ('store_id', ?), ('schema_version', '1')",
                (uuid.uuid4().hex,),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._store_id = conn.execute("SELECT value FROM aworld_meta WHERE key='store_id'").fetchone()[0]
        self._conn = conn

    async def open(self) -> None:
        await self._run(self._open)

    async def close(self) -> None:
        def _close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._run(_close)
        self._thread.shutdown(wait=True)

    async def store_id(self) -> str:
        assert self._store_id is not None, "open() the store first"
        return self._store_id

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a write on the store's thread, batched with the writes queued meanwhile into one
        transaction (group commit): under load one commit serves many submissions."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._pending.append((functools.partial(fn, *args), future))
            start = not self._flushing
            self._flushing = True
        if start:
            loop.run_in_executor(self._thread, self._flush, loop)
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._flushing = False
                    return
            db = self._db
            outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
            try:
                db.execute("BEGIN IMMEDIATE")
                self._in_batch = True
                for call, future in batch:
                    try:
                        outcomes.append((future, call(), None))
                    except Exception as exc:  # this write only: its savepoint was rolled back
                        outcomes.append((future, None, exc))
                self._in_batch = False
                db.execute("COMMIT")
            except BaseException as exc:  # BEGIN or COMMIT failed: nothing of the batch is stored
                self._in_batch = False
                if db.in_transaction:
                    db.execute("ROLLBACK")
                outcomes = [(future, None, exc) for _, future in batch]
            for future, value, error in outcomes:
                try:
                    loop.call_soon_threadsafe(_settle, future, value, error)
                except RuntimeError:  # the loop closed meanwhile: nobody waits for the answer
                    pass

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db
        if self._in_batch:  # one write of a group commit: undo only this one if it fails
            db.execute("SAVEPOINT op")
            try:
                result = fn(db)
            except BaseException:
                db.execute("ROLLBACK TO op")
                db.execute("RELEASE op")
                raise
            db.execute("RELEASE op")
            return result
        db.execute("BEGIN IMMEDIATE")
        try:
            result = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result

    # --- submitting ------------------------------------------------------------------------

    def _submit(self, tasks: Sequence[AworldTask]) -> list[Submitted]:
        def body(db: sqlite3.Connection) -> list[Submitted]:
            now = time.time()
            out: list[Submitted] = []
            for task in tasks:
                digest = payload_hash(task)
                cursor = db.execute(
                    "INSERT INTO aworld_tasks (task_id, agent_id, user_id, session_id, priority, status, "
                    "task_json, payload_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (task_id) DO NOTHING",
                    (
                        task.task_id,
                        task.agent_id,
                        task.user_id,
                        task.session_id,
                        task.priority,
                        _INIT,
                        task.model_dump_json(),
                        digest,
                        now,
                    ),
                )
                if cursor.rowcount == 1:
                    state = TaskState(
                        task_id=task.task_id,
                        agent_id=task.agent_id,
                        user_id=task.user_id,
                        session_id=task.session_id,
                        status=TaskStatus.INIT,
                        created_at=now,
                    )
                    out.append(Submitted(state, True))
                    continue
                row = db.execute(
                    f"SELECT {STATE_COLUMNS}, payload_hash FROM aworld_tasks WHERE task_id = ?",
                    (task.task_id,),
                ).fetchone()
                if row["payload_hash"] != digest:
                    raise TaskConflictError(conflict_message(task.task_id), status=409)
                out.append(Submitted(state_from_row(row), False))
            return out

        return self._tx(body)

    async def submit(self, tasks: Sequence[AworldTask]) -> list[Submitted]:
        return await self._write(self._submit, list(tasks))

    # --- running ---------------------------------------------------------------------------

    def _claim(
        self, owner: str, agent_ids: Sequence[str], limit: int, lease_s: float, max_attempts: int
    ) -> list[Claim]:
        if limit <= 0 or not agent_ids:
            return []

        def body(db: sqlite3.Connection) -> list[Claim]:
            now = time.time()
            # a lease first seen expired is only noted (store.py, "Stalls"): its host, if alive,
            # has another lease_s to renew it or write its result before anyone takes the task
            db.execute(
                "UPDATE aworld_tasks SET lease_lapsed_at = ? WHERE status = ? AND lease_expires_at < ? "
                "AND lease_lapsed_at IS NULL",
                (now, _RUNNING, now),
            )
            lapsed = now - lease_s
            self._settle_expired(db, now, max_attempts, lapsed)
            marks = ",".join("?" for _ in agent_ids)
            # expired leases first (they waited longest), then the queue in priority order; two
            # queries so each walks the (status, priority, seq) index instead of sorting the queue
            rows = db.execute(
                f"SELECT seq, task_id, task_json, attempts FROM aworld_tasks WHERE status = ? "
                f"AND lease_expires_at < ? AND lease_lapsed_at <= ? AND agent_id IN ({marks}) "
                f"ORDER BY priority DESC, seq LIMIT ?",
                (_RUNNING, now, lapsed, *agent_ids, limit),
            ).fetchall()
            if len(rows) < limit:
                rows += db.execute(
                    f"SELECT seq, task_id, task_json, attempts FROM aworld_tasks WHERE status = ? "
                    f"AND agent_id IN ({marks}) ORDER BY priority DESC, seq LIMIT ?",
                    (_INIT, *agent_ids, limit - len(rows)),
                ).fetchall()
            claims = []
            for row in rows:
                token = uuid.uuid4().hex
                attempt = row["attempts"] + 1
                db.execute(
                    "UPDATE aworld_tasks SET status = ?, owner = ?, lease_token = ?, lease_expires_at = ?, "
                    "lease_lapsed_at = NULL, attempts = ?, started_at = ? WHERE seq = ?",
                    (_RUNNING, owner, token, now + lease_s, attempt, now, row["seq"]),
                )
                db.execute(
                    "UPDATE aworld_task_attempts SET outcome = 'lease_expired' "
                    "WHERE task_id = ? AND outcome IS NULL",
                    (row["task_id"],),
                )
                db.execute(
                    "INSERT INTO aworld_task_attempts (task_id, attempt, owner, lease_token, started_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (row["task_id"], attempt, owner, token, now),
                )
                claims.append(Claim(AworldTask.model_validate_json(row["task_json"]), attempt, token, now))
            return claims

        return self._tx(body)

    @staticmethod
    def _settle_expired(db: sqlite3.Connection, now: float, max_attempts: int, lapsed: float) -> None:
        """Expired leases (seen expired since ``lapsed`` or before) that must not be re-run:
        cancel requested, or too many attempts."""
        rows = db.execute(
            "SELECT task_id, attempts, cancel_requested FROM aworld_tasks WHERE status = ? AND lease_expires_at < ? "
            "AND lease_lapsed_at <= ? AND (cancel_requested = 1 OR attempts >= ?)",
            (_RUNNING, now, lapsed, max_attempts),
        ).fetchall()
        for row in rows:
            status, error = expired_outcome(row)
            db.execute(
                "UPDATE aworld_tasks SET status = ?, error = ?, ended_at = ?, lease_expires_at = NULL "
                "WHERE task_id = ?",
                (status.value, error, now, row["task_id"]),
            )
            db.execute(
                "UPDATE aworld_task_attempts SET outcome = 'lease_expired' WHERE task_id = ? AND outcome IS NULL",
                (row["task_id"],),
            )

    async def claim(
        self, owner: str, agent_ids: Sequence[str], limit: int, lease_s: float, max_attempts: int
    ) -> list[Claim]:
        return await self._write(self._claim, owner, list(agent_ids), limit, lease_s, max_attempts)

    def _renew(self, owner: str, leases: dict[str, str], lease_s: float) -> Renewal:
        def body(db: sqlite3.Connection) -> Renewal:
            now = time.time()
            held, cancel = set(), set()
            for task_id, token in leases.items():
                row = db.execute(
                    # an expired lease nobody re-claimed is still this host's (store.py, "Stalls")
                    "UPDATE aworld_tasks SET lease_expires_at = ?, lease_lapsed_at = NULL WHERE task_id = ? "
                    "AND lease_token = ? AND owner = ? AND status = ? RETURNING cancel_requested",
                    (now + lease_s, task_id, token, owner, _RUNNING),
                ).fetchone()
                if row is not None:
                    held.add(task_id)
                    if row["cancel_requested"]:
                        cancel.add(task_id)
            return Renewal(frozenset(held), frozenset(cancel))

        return self._tx(body)

    async def renew(self, owner: str, leases: dict[str, str], lease_s: float) -> Renewal:
        if not leases:
            return Renewal(frozenset(), frozenset())
        return await self._write(self._renew, owner, dict(leases), lease_s)

    def _finish(self, task_id: str, token: str, outcome: Outcome) -> bool:
        states.check(TaskStatus.RUNNING, outcome.status, task_id)

        def body(db: sqlite3.Connection) -> bool:
            now = time.time()
            cursor = db.execute(
                "UPDATE aworld_tasks SET status = ?, answer = ?, reward = ?, error = ?, episode_json = ?, "
                "ended_at = ?, lease_expires_at = NULL, lease_lapsed_at = NULL WHERE task_id = ? "
                "AND lease_token = ? AND status = ?",
                (
                    outcome.status.value,
                    outcome.answer,
                    outcome.reward,
                    outcome.error,
                    outcome.episode.model_dump_json() if outcome.episode is not None else None,
                    now,
                    task_id,
                    token,
                    _RUNNING,
                ),
            )
            won = cursor.rowcount == 1
            if won:
                db.execute(
                    "UPDATE aworld_task_attempts SET ended_at = ?, outcome = ? WHERE task_id = ? AND lease_token = ?",
                    (now, outcome.status.value, task_id, token),
                )
            else:
                db.execute(FENCED_ATTEMPT.replace("%s", "?"), (now, task_id, token))
            return won

        return self._tx(body)

    async def finish(self, task_id: str, lease_token: str, outcome: Outcome) -> bool:
        return await self._write(self._finish, task_id, lease_token, outcome)

    def _release(self, task_id: str, token: str) -> bool:
        def body(db: sqlite3.Connection) -> bool:
            now = time.time()
            cursor = db.execute(
                "UPDATE aworld_tasks SET status = ?, owner = NULL, lease_token = NULL, lease_expires_at = NULL "
                "WHERE task_id = ? AND lease_token = ? AND status = ?",
                (_INIT, task_id, token, _RUNNING),
            )
            if cursor.rowcount != 1:
                return False
            db.execute(
                "UPDATE aworld_task_attempts SET ended_at = ?, outcome = 'released' "
                "WHERE task_id = ? AND lease_token = ?",
                (now, task_id, token),
            )
            return True

        return self._tx(body)

    async def release(self, task_id: str, lease_token: str) -> bool:
        return await self._write(self._release, task_id, lease_token)

    def _cancel(self, task_id: str) -> TaskState:
        def body(db: sqlite3.Connection) -> TaskState:
            row = db.execute(f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id = ?", (task_id,)).fetchone()
            if row is None:
                raise task_not_found(task_id)
            status = TaskStatus(row["status"])
            states.check(status, TaskStatus.CANCELLED, task_id)
            if status is TaskStatus.INIT:
                db.execute(
                    "UPDATE aworld_tasks SET status = ?, ended_at = ?, error = ? WHERE task_id = ?",
                    (TaskStatus.CANCELLED.value, time.time(), CANCELLED_BEFORE_RUN, task_id),
                )
            else:
                db.execute("UPDATE aworld_tasks SET cancel_requested = 1 WHERE task_id = ?", (task_id,))
            return state_from_row(
                db.execute(f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id = ?", (task_id,)).fetchone()
            )

        return self._tx(body)

    async def cancel(self, task_id: str) -> TaskState:
        return await self._write(self._cancel, task_id)

    # --- reading ---------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskState | None:
        def read() -> TaskState | None:
            row = self._db.execute(
                f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
            return state_from_row(row) if row is not None else None

        return await self._run(read)

    async def get_many(self, task_ids: Sequence[str]) -> list[TaskState]:
        ids = list(dict.fromkeys(task_ids))

        def read() -> list[TaskState]:
            out: list[TaskState] = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" for _ in chunk)
                rows = self._db.execute(
                    f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id IN ({marks})", chunk
                ).fetchall()
                out.extend(state_from_row(r) for r in rows)
            return out

        return await self._run(read)

    async def get_result(self, task_id: str) -> TaskResult | None:
        def read() -> TaskResult | None:
            row = self._db.execute(
                f"SELECT {RESULT_COLUMNS} FROM aworld_tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
            return result_from_row(row) if row is not None else None

        return await self._run(read)

    @staticmethod
    def _where(filter: TaskFilter, statuses: Sequence[TaskStatus] | None) -> tuple[str, list[Any]]:
        clauses, params = ["seq > ?"], [filter.after]
        if statuses:
            clauses.append(f"status IN ({','.join('?' for _ in statuses)})")
            params.extend(s.value for s in statuses)
        for column in ("agent_id", "user_id", "session_id"):
            value = getattr(filter, column)
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if filter.task_ids is not None:
            ids = list(filter.task_ids) or [""]
            clauses.append(f"task_id IN ({','.join('?' for _ in ids)})")
            params.extend(ids)
        return " AND ".join(clauses), params

    def _page(self, columns: str, filter: TaskFilter, statuses: Sequence[TaskStatus] | None, make: Any) -> Page:
        where, params = self._where(filter, statuses)
        rows = self._db.execute(
            f"SELECT {columns} FROM aworld_tasks WHERE {where} ORDER BY seq LIMIT ?", (*params, filter.limit + 1)
        ).fetchall()
        return page_from_rows(rows, filter, make)

    async def list(self, filter: TaskFilter) -> Page:
        return await self._run(self._page, STATE_COLUMNS, filter, filter.statuses, state_from_row)

    async def results(self, filter: TaskFilter) -> Page:
        return await self._run(self._page, RESULT_COLUMNS, filter, result_statuses(filter), result_from_row)

    async def counts(self) -> dict[TaskStatus, int]:
        def read() -> dict[TaskStatus, int]:
            return counts_from_rows(
                self._db.execute("SELECT status, count(*) AS n FROM aworld_tasks GROUP BY status").fetchall()
            )

        return await self._run(read)

    async def count(self, status: TaskStatus) -> int:
        def read() -> int:
            return self._db.execute("SELECT count(*) FROM aworld_tasks WHERE status = ?", (status.value,)).fetchone()[0]

        return await self._run(read)

    async def attempts(self, task_id: str) -> list[TaskAttempt]:
        def read() -> list[TaskAttempt]:
            rows = self._db.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM aworld_task_attempts WHERE task_id = ? ORDER BY attempt",
                (task_id,),
            ).fetchall()
            return [TaskAttempt(**dict(r)) for r in rows]

        return await self._run(read)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
