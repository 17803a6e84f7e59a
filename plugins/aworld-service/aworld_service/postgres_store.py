"""PostgreSQL task store: many hosts sharing one queue.

Claims are ``UPDATE … FROM (SELECT … ORDER BY priority, seq LIMIT n FOR UPDATE SKIP LOCKED)``:
two hosts claiming at once lock different rows, and neither waits on the other. Lease times come
from the database's clock (``statement_timestamp()``), so hosts' clocks need not agree. Every
write for a run names its lease token (see :mod:`aworld_service.store`), which is the fence
that keeps a host whose lease expired from overwriting the host that took the task over.

Needs psycopg 3 (``pip install 'aworld-service[postgres]'``). Connections come from a small pool
owned by the store; a broken connection (the database restarted) is dropped and replaced.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from aworld_core.errors import FrameworkNotInstalledError
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

NOW = "extract(epoch from statement_timestamp())::double precision"
SCHEMA_LOCK = 0x617764  # pg_advisory_xact_lock key: hosts starting together create tables once

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS aworld_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS aworld_tasks (
        seq BIGSERIAL PRIMARY KEY,
        task_id TEXT NOT NULL UNIQUE,
        agent_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT,
        priority INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL,
        task_json TEXT NOT NULL,
        payload_hash TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        started_at DOUBLE PRECISION,
        ended_at DOUBLE PRECISION,
        attempts INTEGER NOT NULL DEFAULT 0,
        owner TEXT,
        lease_token TEXT,
        lease_expires_at DOUBLE PRECISION,
        lease_lapsed_at DOUBLE PRECISION,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        answer TEXT,
        reward DOUBLE PRECISION,
        error TEXT,
        episode_json TEXT
    )""",
    # a store made before the column existed
    "ALTER TABLE aworld_tasks ADD COLUMN IF NOT EXISTS lease_lapsed_at DOUBLE PRECISION",
    "CREATE INDEX IF NOT EXISTS aworld_tasks_queue ON aworld_tasks (status, priority DESC, seq)",
    """CREATE TABLE IF NOT EXISTS aworld_task_attempts (
        task_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        owner TEXT NOT NULL,
        lease_token TEXT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        ended_at DOUBLE PRECISION,
        outcome TEXT,
        PRIMARY KEY (task_id, attempt)
    )""",
]

_RUNNING = TaskStatus.RUNNING.value
_INIT = TaskStatus.INIT.value


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise FrameworkNotInstalledError(
            "the PostgreSQL task store needs psycopg 3: pip install 'aworld-service[postgres]'"
        ) from exc
    return psycopg


def _idle(conn: Any) -> bool:
    from psycopg import pq

    return not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE


class _Pool:
    """At most ``size`` autocommit connections; broken ones are closed and replaced on demand."""

    def __init__(self, url: str, size: int, connect_timeout_s: float):
        self.url = url
        self.size = size
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[Any] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False

    async def _connect(self) -> Any:
        psycopg = _psycopg()
        from psycopg.rows import dict_row

        return await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=dict_row, connect_timeout=max(1, int(self.connect_timeout_s))
        )

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        if self._closed:
            raise RuntimeError("the PostgreSQL task store is closed")
        async with self._slots:
            conn = None
            while self._idle and conn is None:
                candidate = self._idle.pop()
                if candidate.closed or candidate.broken:
                    await candidate.close()
                else:
                    conn = candidate
            if conn is None:
                conn = await self._connect()
            reusable = False
            try:
                yield conn
                reusable = True
            except Exception:  # an SQL error inside a finished transaction leaves it reusable
                reusable = _idle(conn)
                raise
            finally:  # a cancelled query (a timeout) may leave it mid-statement: never reuse that
                if not reusable or conn.closed or conn.broken or self._closed:
                    await conn.close()
                else:
                    self._idle.append(conn)

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            await self._idle.pop().close()


class PostgresTaskStore(TaskStore):
    kind = "postgresql"

    def __init__(self, url: str, *, pool_size: int = 4, connect_timeout_s: float = 10.0):
        _psycopg()
        self.url = url
        self._pool = _Pool(url, pool_size, connect_timeout_s)
        self._store_id: str | None = None

    async def open(self) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            for statement in SCHEMA:
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO aworld_meta (key, value) VALUES ('store_id', %s), ('schema_version', '1') "
                "ON CONFLICT (key) DO NOTHING",
                (uuid.uuid4().hex,),
            )
            row = await (await conn.execute("SELECT value FROM aworld_meta WHERE key = 'store_id'")).fetchone()
            self._store_id = row["value"]

    async def close(self) -> None:
        await self._pool.close()

    async def store_id(self) -> str:
        assert self._store_id is not None, "open() the store first"
        return self._store_id

    async def _fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    # --- submitting ------------------------------------------------------------------------

    async def submit(self, tasks: Sequence[AworldTask]) -> list[Submitted]:
        if not tasks:
            return []
        digests = [payload_hash(t) for t in tasks]
        columns: dict[str, list[Any]] = {
            "task_id": [t.task_id for t in tasks],
            "agent_id": [t.agent_id for t in tasks],
            "user_id": [t.user_id for t in tasks],
            "session_id": [t.session_id for t in tasks],
            "priority": [t.priority for t in tasks],
            "task_json": [t.model_dump_json() for t in tasks],
            "payload_hash": digests,
        }
        async with self._pool.connection() as conn, conn.transaction():
            inserted = await (
                await conn.execute(
                    f"INSERT INTO aworld_tasks (task_id, agent_id, user_id, session_id, priority, status, "
                    f"task_json, payload_hash, created_at) "
                    f"SELECT i, a, u, s, p, '{_INIT}', j, h, {NOW} FROM unnest("
                    f"%(task_id)s::text[], %(agent_id)s::text[], %(user_id)s::text[], %(session_id)s::text[], "
                    f"%(priority)s::int[], %(task_json)s::text[], %(payload_hash)s::text[]) AS x(i, a, u, s, p, j, h) "
                    f"ON CONFLICT (task_id) DO NOTHING RETURNING {STATE_COLUMNS}",
                    columns,
                )
            ).fetchall()
            created = {row["task_id"]: row for row in inserted}
            existing: dict[str, dict[str, Any]] = {}
            missing = [t.task_id for t in tasks if t.task_id not in created]
            if missing:
                rows = await (
                    await conn.execute(
                        f"SELECT {STATE_COLUMNS}, payload_hash FROM aworld_tasks WHERE task_id = ANY(%s)",
                        (missing,),
                    )
                ).fetchall()
                existing = {row["task_id"]: row for row in rows}
            out = []
            first: dict[str, str] = {}  # digest of the first time an id appears in this batch
            for task, digest in zip(tasks, digests, strict=True):
                if task.task_id in created:
                    if task.task_id not in first:
                        first[task.task_id] = digest
                        out.append(Submitted(state_from_row(created[task.task_id]), True))
                        continue
                    stored_digest, row = first[task.task_id], created[task.task_id]
                else:
                    row = existing[task.task_id]
                    stored_digest = row["payload_hash"]
                if stored_digest != digest:
                    raise TaskConflictError(conflict_message(task.task_id), status=409)
                out.append(Submitted(state_from_row(row), False))
            return out

    # --- running ---------------------------------------------------------------------------

    async def claim(
        self, owner: str, agent_ids: Sequence[str], limit: int, lease_s: float, max_attempts: int
    ) -> list[Claim]:
        if limit <= 0 or not agent_ids:
            return []
        agents = list(agent_ids)
        async with self._pool.connection() as conn, conn.transaction():
            # a lease first seen expired is only noted (store.py, "Stalls"): its host, if alive,
            # has another lease_s to renew it or write its result before anyone takes the task
            await conn.execute(
                f"UPDATE aworld_tasks t SET lease_lapsed_at = {NOW} FROM (SELECT seq FROM aworld_tasks "
                f"WHERE status = '{_RUNNING}' AND lease_expires_at < {NOW} AND lease_lapsed_at IS NULL "
                f"FOR UPDATE SKIP LOCKED) seen WHERE t.seq = seen.seq"
            )
            await self._settle_expired(conn, max_attempts, lease_s)
            rows: list[dict[str, Any]] = []
            lapsed = f"lease_lapsed_at <= {NOW} - %(lease)s"
            # expired leases first (they waited longest), then the queue in priority order
            for where in (f"status = '{_RUNNING}' AND lease_expires_at < {NOW} AND {lapsed}", f"status = '{_INIT}'"):
                if len(rows) >= limit:
                    break
                rows += await (
                    await conn.execute(
                        f"UPDATE aworld_tasks t SET status = '{_RUNNING}', owner = %(owner)s, "
                        f"lease_token = md5(random()::text || clock_timestamp()::text || t.task_id), "
                        f"lease_expires_at = {NOW} + %(lease)s, lease_lapsed_at = NULL, attempts = t.attempts + 1, "
                        f"started_at = {NOW} "
                        f"FROM (SELECT seq FROM aworld_tasks WHERE {where} AND agent_id = ANY(%(agents)s) "
                        f"ORDER BY priority DESC, seq LIMIT %(n)s FOR UPDATE SKIP LOCKED) picked "
                        f"WHERE t.seq = picked.seq "
                        f"RETURNING t.task_id, t.task_json, t.attempts, t.lease_token, t.started_at",
                        {"owner": owner, "lease": lease_s, "agents": agents, "n": limit - len(rows)},
                    )
                ).fetchall()
            if not rows:
                return []
            ids = [r["task_id"] for r in rows]
            await conn.execute(
                "UPDATE aworld_task_attempts SET outcome = 'lease_expired' "
                "WHERE task_id = ANY(%s) AND outcome IS NULL",
                (ids,),
            )
            await conn.execute(
                "INSERT INTO aworld_task_attempts (task_id, attempt, owner, lease_token, started_at) "
                "SELECT i, a, %s, t, s FROM unnest(%s::text[], %s::int[], %s::text[], %s::float8[]) AS x(i, a, t, s)",
                (
                    owner,
                    ids,
                    [r["attempts"] for r in rows],
                    [r["lease_token"] for r in rows],
                    [r["started_at"] for r in rows],
                ),
            )
        return [
            Claim(AworldTask.model_validate_json(r["task_json"]), r["attempts"], r["lease_token"], r["started_at"])
            for r in rows
        ]

    @staticmethod
    async def _settle_expired(conn: Any, max_attempts: int, lease_s: float) -> None:
        """Expired leases (seen expired ``lease_s`` ago or more) that must not be re-run: cancel
        requested, or too many attempts."""
        rows = await (
            await conn.execute(
                f"SELECT task_id, attempts, cancel_requested FROM aworld_tasks WHERE status = '{_RUNNING}' "
                f"AND lease_expires_at < {NOW} AND lease_lapsed_at <= {NOW} - %s "
                f"AND (cancel_requested OR attempts >= %s) FOR UPDATE SKIP LOCKED",
                (lease_s, max_attempts),
            )
        ).fetchall()
        for row in rows:
            status, error = expired_outcome(row)
            await conn.execute(
                f"UPDATE aworld_tasks SET status = %s, error = %s, ended_at = {NOW}, lease_expires_at = NULL "
                f"WHERE task_id = %s",
                (status.value, error, row["task_id"]),
            )
            await conn.execute(
                "UPDATE aworld_task_attempts SET outcome = 'lease_expired' WHERE task_id = %s AND outcome IS NULL",
                (row["task_id"],),
            )

    async def renew(self, owner: str, leases: dict[str, str], lease_s: float) -> Renewal:
        if not leases:
            return Renewal(frozenset(), frozenset())
        rows = await self._fetch(
            # an expired lease nobody re-claimed is still this host's (store.py, "Stalls")
            f"UPDATE aworld_tasks t SET lease_expires_at = {NOW} + %s, lease_lapsed_at = NULL "
            f"FROM unnest(%s::text[], %s::text[]) AS l(task_id, token) "
            f"WHERE t.task_id = l.task_id AND t.lease_token = l.token AND t.owner = %s "
            f"AND t.status = '{_RUNNING}' "
            f"RETURNING t.task_id, t.cancel_requested",
            (lease_s, list(leases), list(leases.values()), owner),
        )
        return Renewal(
            frozenset(r["task_id"] for r in rows), frozenset(r["task_id"] for r in rows if r["cancel_requested"])
        )

    async def finish(self, task_id: str, lease_token: str, outcome: Outcome) -> bool:
        states.check(TaskStatus.RUNNING, outcome.status, task_id)
        episode = outcome.episode.model_dump_json() if outcome.episode is not None else None
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"UPDATE aworld_tasks SET status = %s, answer = %s, reward = %s, error = %s, episode_json = %s, "
                f"ended_at = {NOW}, lease_expires_at = NULL, lease_lapsed_at = NULL WHERE task_id = %s "
                f"AND lease_token = %s AND status = '{_RUNNING}'",
                (outcome.status.value, outcome.answer, outcome.reward, outcome.error, episode, task_id, lease_token),
            )
            won = cursor.rowcount == 1
            if won:
                await conn.execute(
                    f"UPDATE aworld_task_attempts SET ended_at = {NOW}, outcome = %s "
                    f"WHERE task_id = %s AND lease_token = %s",
                    (outcome.status.value, task_id, lease_token),
                )
            else:
                await conn.execute(FENCED_ATTEMPT.replace("%s", NOW, 1), (task_id, lease_token))
        return won

    async def release(self, task_id: str, lease_token: str) -> bool:
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"UPDATE aworld_tasks SET status = '{_INIT}', owner = NULL, lease_token = NULL, "
                f"lease_expires_at = NULL WHERE task_id = %s AND lease_token = %s AND status = '{_RUNNING}'",
                (task_id, lease_token),
            )
            if cursor.rowcount != 1:
                return False
            await conn.execute(
                f"UPDATE aworld_task_attempts SET ended_at = {NOW}, outcome = 'released' "
                f"WHERE task_id = %s AND lease_token = %s",
                (task_id, lease_token),
            )
        return True

    async def cancel(self, task_id: str) -> TaskState:
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id = %s FOR UPDATE", (task_id,))
            ).fetchone()
            if row is None:
                raise task_not_found(task_id)
            status = TaskStatus(row["status"])
            states.check(status, TaskStatus.CANCELLED, task_id)
            if status is TaskStatus.INIT:
                sql = (
                    f"UPDATE aworld_tasks SET status = '{TaskStatus.CANCELLED.value}', ended_at = {NOW}, "
                    f"error = %s WHERE task_id = %s RETURNING {STATE_COLUMNS}"
                )
                params: tuple[Any, ...] = (CANCELLED_BEFORE_RUN, task_id)
            else:
                sql = f"UPDATE aworld_tasks SET cancel_requested = TRUE WHERE task_id = %s RETURNING {STATE_COLUMNS}"
                params = (task_id,)
            row = await (await conn.execute(sql, params)).fetchone()
        return state_from_row(row)

    # --- reading ---------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskState | None:
        rows = await self._fetch(f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id = %s", (task_id,))
        return state_from_row(rows[0]) if rows else None

    async def get_many(self, task_ids: Sequence[str]) -> list[TaskState]:
        ids = list(dict.fromkeys(task_ids))
        if not ids:
            return []
        rows = await self._fetch(f"SELECT {STATE_COLUMNS} FROM aworld_tasks WHERE task_id = ANY(%s)", (ids,))
        return [state_from_row(r) for r in rows]

    async def get_result(self, task_id: str) -> TaskResult | None:
        rows = await self._fetch(f"SELECT {RESULT_COLUMNS} FROM aworld_tasks WHERE task_id = %s", (task_id,))
        return result_from_row(rows[0]) if rows else None

    @staticmethod
    def _where(filter: TaskFilter, statuses: Sequence[TaskStatus] | None) -> tuple[str, dict[str, Any]]:
        clauses, params = ["seq > %(after)s"], {"after": filter.after}
        if statuses:
            clauses.append("status = ANY(%(statuses)s)")
            params["statuses"] = [s.value for s in statuses]
        for column in ("agent_id", "user_id", "session_id"):
            value = getattr(filter, column)
            if value is not None:
                clauses.append(f"{column} = %({column})s")
                params[column] = value
        if filter.task_ids is not None:
            clauses.append("task_id = ANY(%(task_ids)s)")
            params["task_ids"] = list(filter.task_ids)
        return " AND ".join(clauses), params

    async def _page(self, columns: str, filter: TaskFilter, statuses: Sequence[TaskStatus] | None, make: Any) -> Page:
        where, params = self._where(filter, statuses)
        rows = await self._fetch(
            f"SELECT {columns} FROM aworld_tasks WHERE {where} ORDER BY seq LIMIT %(limit)s",
            {**params, "limit": filter.limit + 1},
        )
        return page_from_rows(rows, filter, make)

    async def list(self, filter: TaskFilter) -> Page:
        return await self._page(STATE_COLUMNS, filter, filter.statuses, state_from_row)

    async def results(self, filter: TaskFilter) -> Page:
        return await self._page(RESULT_COLUMNS, filter, result_statuses(filter), result_from_row)

    async def counts(self) -> dict[TaskStatus, int]:
        return counts_from_rows(await self._fetch("SELECT status, count(*) AS n FROM aworld_tasks GROUP BY status"))

    async def count(self, status: TaskStatus) -> int:
        rows = await self._fetch("SELECT count(*) AS n FROM aworld_tasks WHERE status = %s", (status.value,))
        return rows[0]["n"]

    async def attempts(self, task_id: str) -> list[TaskAttempt]:
        rows = await self._fetch(
            f"SELECT {ATTEMPT_COLUMNS} FROM aworld_task_attempts WHERE task_id = %s ORDER BY attempt",
            (task_id,),
        )
        return [TaskAttempt(**r) for r in rows]
