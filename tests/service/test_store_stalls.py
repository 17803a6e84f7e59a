"""The store stalls for longer than a lease while runs finish (three server processes): no host
died, so no task's side effect may happen twice, and still no task runs on two hosts at once.

SQLite is stalled by another connection holding its write lock; PostgreSQL becomes unreachable
(every connection cut, new ones refused) through a loopback TCP relay the hosts connect by.
The side effects are counted outside the store (``service_agents.side_effect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from service_agents import ref
from test_failover import assert_no_overlap, read_witness, wait_for

from aworld_core.schemas import AworldTask, TaskStatus
from aworld_service.client import AworldTaskClient

pytestmark = pytest.mark.slow

LEASE_S = 1.5
STALL_S = 4.0  # longer than a lease: every lease held when it starts expires during it
N_TASKS = 150


def stall_tasks() -> list[AworldTask]:
    # most runs take 0.2 s (they finish early in the stall and wait to write); every fifth takes
    # 2.5 s, so the stall stops it before its side effect (it runs again afterwards, once)
    return [
        AworldTask(task_id=f"s-{i:03d}", agent_id="fx", agent_input=str(i), metadata={"work_s": 2.5 if i % 5 == 4 else 0.2})
        for i in range(N_TASKS)
    ]


def host_args(store: str) -> list[str]:
    return [
        "--agents", f"fx={ref('side_effect')}",
        "--store", store,
        "--concurrency", "8",
        "--lease-s", str(LEASE_S),
        "--poll-s", "0.1",
        "--drain-s", "0",
        "--max-attempts", "5",
        "--log-level", "warning",
    ]  # fmt: skip


class Relay:
    """A loopback TCP relay to PostgreSQL that can be cut: open connections are reset and new
    ones are closed on arrival, as when the database server is stopped. It runs on its own event
    loop in a thread (the test's loop blocks while server processes start)."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.cut = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pg-relay", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def _abort_all(self) -> None:
        self.cut = True
        for writer in list(self._writers):
            writer.transport.abort()  # a reset, not a polite close

    def disconnect(self) -> None:
        self._loop.call_soon_threadsafe(self._abort_all)

    def reconnect(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self, "cut", False)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._abort_all()
        current = asyncio.current_task()
        for task in asyncio.all_tasks():  # connections still being opened add writers after the abort
            if task is not current:
                task.cancel()
        await asyncio.sleep(0.1)
        self._abort_all()
        await asyncio.sleep(0.1)  # the aborted transports close their sockets in later loop turns

    def close(self) -> None:
        """Every relayed socket is closed before the loop stops. Stopping it right after the
        aborts left them open when its connection_lost callbacks had not run yet: each host's
        pooled connection then hung unanswered, and its SIGTERM shutdown waited 5 s (psycopg:
        "query not terminated after cancellation", the cancel request refused by the closed
        relay) before closing it: 16 s of teardown for three hosts in some runs."""
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def run_with_a_stall(servers: list[Any], stall: Any, witness: Path) -> None:
    tasks = stall_tasks()
    ids = [t.task_id for t in tasks]
    async with AworldTaskClient(know_hosts=[s.host for s in servers], batch_size=50, backoff_s=0.05) as client:
        await client.submit_tasks(tasks)
        await wait_for(lambda: client.list_tasks(status="success"), lambda done: len(done) >= N_TASKS // 4, timeout=60)
        await stall()
        states = await client.wait(ids, timeout=120, poll_s=0.2)
        assert {s.status for s in states} == {TaskStatus.SUCCESS}, [s for s in states if s.status is not TaskStatus.SUCCESS][:3]
        assert all(s.answer == f"did {s.task_id}" for s in states)

    runs = read_witness(witness)
    effects = Counter(e["task_id"] for events in runs.values() for e in events if e["event"] == "effect")
    repeated = {task_id: n for task_id, n in effects.items() if n > 1}
    assert not repeated, f"side effects repeated although no host died: {repeated}"
    assert set(effects) == set(ids)
    # still never two hosts at once (start/end frame every run, a stopped one too)
    framed = {tid: [e for e in events if e["event"] in ("start", "end")] for tid, events in runs.items()}
    stopped = assert_no_overlap(framed, {})
    assert stopped, "the stall should have stopped some long runs (they ran again after it)"
    for server in servers:
        assert server.proc.poll() is None, server.tail()


async def test_a_sqlite_store_locked_longer_than_a_lease_repeats_no_side_effect(
    server_processes: Any, tmp_path: Path
) -> None:
    witness = tmp_path / "witness"
    witness.mkdir()
    db = tmp_path / "tasks.sqlite"
    env = {"AWORLD_TEST_WITNESS_DIR": str(witness)}
    servers = [server_processes(host_args(f"sqlite:///{db}"), env=env) for _ in range(3)]

    async def stall() -> None:
        locker = sqlite3.connect(db, isolation_level=None, timeout=30)
        try:
            locker.execute("BEGIN EXCLUSIVE")  # every host's writes wait (busy timeout)
            started = time.monotonic()
            await asyncio.sleep(STALL_S)
            running = locker.execute("SELECT count(*) FROM aworld_tasks WHERE status = 'running'").fetchone()[0]
            assert running, "runs should have been under way when the store stalled"
            assert time.monotonic() - started >= STALL_S
        finally:
            locker.execute("COMMIT")
            locker.close()

    await run_with_a_stall(servers, stall, witness)


@pytest.mark.postgres
async def test_a_postgres_store_unreachable_longer_than_a_lease_repeats_no_side_effect(
    pg_url: str, server_processes: Any, tmp_path: Path
) -> None:
    witness = tmp_path / "witness"
    witness.mkdir()
    parts = urlsplit(pg_url)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 5432).start()
    netloc = f"{parts.username}@127.0.0.1:{relay.port}" if parts.username else f"127.0.0.1:{relay.port}"
    url = urlunsplit(parts._replace(netloc=netloc))
    env = {"AWORLD_TEST_WITNESS_DIR": str(witness)}
    try:
        servers = [server_processes(host_args(url), env=env) for _ in range(3)]

        async def stall() -> None:
            relay.disconnect()
            await asyncio.sleep(STALL_S)
            relay.reconnect()

        await run_with_a_stall(servers, stall, witness)
    finally:
        relay.close()
