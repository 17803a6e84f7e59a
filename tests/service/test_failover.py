"""Fault tests with servers as separate processes: hosts are killed with SIGKILL mid-run.

Every run of the test agent writes when it starts and ends (``service_agents.witnessed_calc``),
independently of the store, so "never two hosts at once" is checked against what really ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from service_agents import ref

from aworld_core.schemas import AworldTask, TaskResult, TaskStatus
from aworld_service.client import AworldTaskClient
from support.openai_stub import free_port

pytestmark = pytest.mark.slow


def calc_tasks(n: int) -> list[AworldTask]:
    return [AworldTask(task_id=f"task-{i:03d}", agent_id="calc", agent_input=f"add {i} and {i + 1}") for i in range(n)]


def server_args(store: str, *, concurrency: int, lease_s: float = 3.0) -> list[str]:
    return [
        "--agents", f"calc={ref('witnessed_calc')}",
        "--store", store,
        "--concurrency", str(concurrency),
        "--lease-s", str(lease_s),
        "--poll-s", "0.1",
        "--drain-s", "0",
        "--max-attempts", "5",
        "--log-level", os.environ.get("AWORLD_TEST_SERVER_LOG", "warning"),
    ]  # fmt: skip


def read_witness(folder: Path) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in folder.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # a line cut by SIGKILL
                continue
            runs[event["task_id"]].append(event)
    return runs


def assert_no_overlap(runs: dict[str, list[dict[str, Any]]], killed: dict[int, float]) -> set[str]:
    """Per task, each run must end before the next starts; a run of a killed host ended when it
    was killed. Returns the tasks that ran more than once."""
    rerun: set[str] = set()
    for task_id, events in runs.items():
        intervals = []
        by_pid: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for event in sorted(events, key=lambda e: e["t"]):
            by_pid[event["pid"]].append(event)
        for pid, pid_events in by_pid.items():
            open_start = None
            for event in pid_events:
                if event["event"] == "start":
                    assert open_start is None, f"{task_id}: pid {pid} started it twice without ending"
                    open_start = event["t"]
                else:
                    assert open_start is not None, f"{task_id}: pid {pid} ended a run it never started"
                    intervals.append((open_start, event["t"], pid))
                    open_start = None
            if open_start is not None:
                assert pid in killed, f"{task_id}: pid {pid} (alive) started a run that never ended"
                intervals.append((open_start, killed[pid], pid))
        intervals.sort()
        for (start_a, end_a, pid_a), (start_b, _, pid_b) in zip(intervals, intervals[1:], strict=False):
            assert end_a <= start_b, (
                f"{task_id} ran on two hosts at once: pid {pid_a} [{start_a:.3f}, {end_a:.3f}] "
                f"overlaps pid {pid_b} starting {start_b:.3f}"
            )
        if len(intervals) > 1:
            rerun.add(task_id)
    return rerun


async def wait_for(read: Any, done: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout} s: {value!r}")
        await asyncio.sleep(0.05)


@pytest.mark.postgres
async def test_three_servers_on_postgres_lose_nothing_when_one_is_killed(
    pg_url: str, llm_stub: Any, server_processes: Any, tmp_path: Path
) -> None:
    llm_stub.latency_s = 0.15  # two LLM calls per task: each run takes ~0.3 s
    witness = tmp_path / "witness"
    witness.mkdir()
    env = {"AWORLD_TEST_LLM_URL": llm_stub.base_url, "AWORLD_TEST_WITNESS_DIR": str(witness)}
    servers = [server_processes(server_args(pg_url, concurrency=8), env=env) for _ in range(3)]
    tasks = calc_tasks(200)
    ids = [t.task_id for t in tasks]

    async with AworldTaskClient(know_hosts=[s.host for s in servers], batch_size=25, backoff_s=0.05) as client:
        await client.submit_tasks(tasks)

        # kill a host once a quarter of the work is done
        await wait_for(
            lambda: client.list_tasks(status="success"), lambda done: len(done) >= 50, timeout=60
        )
        victim = servers[1]
        killed_at = victim.kill()
        # what it held when it died (nobody can take these over before their leases expire)
        in_flight = {
            s.task_id
            for s in await client.list_tasks(status="running")
            if (s.host or "").endswith(f":{victim.port}")
        }
        assert in_flight, "the victim should have been running tasks when it died"

        states = await client.wait(ids, timeout=120, poll_s=0.2)
        assert {s.status for s in states} == {TaskStatus.SUCCESS}, [s for s in states if s.status is not TaskStatus.SUCCESS][:3]
        for i, state in enumerate(states):
            assert state.answer == f"<answer>{2 * i + 1}</answer>"
        # every task the victim held was finished by another host, on a later attempt
        for state in states:
            if state.task_id in in_flight:
                assert state.attempts >= 2 and not (state.host or "").endswith(f":{victim.port}")

        path = tmp_path / "trajectories.jsonl"
        assert await client.download_trajectories(path) == 200
        rows = [TaskResult.model_validate_json(line) for line in path.read_text().splitlines()]
        assert sorted(r.task_id for r in rows) == ids
        assert all(r.episode is not None and r.episode.steps and r.episode.final_answer for r in rows)

    # the store: exactly one successful attempt per task, and the victim's runs expired
    import psycopg

    with psycopg.connect(pg_url) as conn:
        outcomes = conn.execute(
            "SELECT task_id, count(*) FILTER (WHERE outcome = 'success'), "
            "count(*) FILTER (WHERE outcome IS NULL) FROM aworld_task_attempts GROUP BY task_id"
        ).fetchall()
        assert len(outcomes) == 200
        assert all(success == 1 and unfinished == 0 for _, success, unfinished in outcomes), outcomes[:5]
        expired = conn.execute(
            "SELECT count(*) FROM aworld_task_attempts WHERE outcome = 'lease_expired' AND owner LIKE %s",
            (f"%:{victim.port}",),
        ).fetchone()[0]
        assert expired == len(in_flight)

    runs = read_witness(witness)
    assert set(runs) == set(ids)
    # only what the victim held ran twice (a task it had claimed but not started runs once)
    rerun = assert_no_overlap(runs, {victim.pid: killed_at})
    assert rerun <= in_flight and rerun


async def test_a_killed_sqlite_server_restarts_without_losing_anything(
    llm_stub: Any, server_processes: Any, tmp_path: Path
) -> None:
    llm_stub.latency_s = 0.15
    witness = tmp_path / "witness"
    witness.mkdir()
    env = {"AWORLD_TEST_LLM_URL": llm_stub.base_url, "AWORLD_TEST_WITNESS_DIR": str(witness)}
    db = tmp_path / "tasks.sqlite"
    args = server_args(f"sqlite:///{db}", concurrency=4)
    port = free_port()
    first = server_processes(args, port=port, env=env)
    tasks = calc_tasks(40)
    ids = [t.task_id for t in tasks]

    async with AworldTaskClient(know_hosts=[first.host], backoff_s=0.05, retries=8) as client:
        await client.submit_tasks(tasks)
        done_before = await wait_for(
            lambda: client.list_tasks(status="success"), lambda done: len(done) >= 10, timeout=60
        )
        killed_at = first.kill()
        with sqlite3.connect(db) as conn:  # what the dead server left behind
            running = {r[0] for r in conn.execute("SELECT task_id FROM aworld_tasks WHERE status = 'running'")}
            finished = {
                r[0]: (r[1], r[2])
                for r in conn.execute("SELECT task_id, answer, ended_at FROM aworld_tasks WHERE status = 'success'")
            }
        assert running, "the server should have been running tasks when it was killed"
        assert {s.task_id for s in done_before} <= set(finished)

        second = server_processes(args, port=port, env=env)  # same port, same file
        states = await client.wait(ids, timeout=90, poll_s=0.2)
        assert {s.status for s in states} == {TaskStatus.SUCCESS}
        by_id = {s.task_id: s for s in states}
        for task_id, (answer, ended_at) in finished.items():  # results from before the crash are intact
            assert (by_id[task_id].answer, by_id[task_id].ended_at, by_id[task_id].attempts) == (answer, ended_at, 1)
        for task_id in running:
            assert by_id[task_id].attempts == 2
            attempts = await client.get_attempts(task_id)
            assert [a.outcome for a in attempts] == ["lease_expired", "success"]
        assert await client.download_trajectories(tmp_path / "out.jsonl") == 40

    runs = read_witness(witness)
    assert set(runs) == set(ids)
    rerun = assert_no_overlap(runs, {first.pid: killed_at})
    assert rerun <= running
    assert second.proc is not None and second.proc.poll() is None


async def test_sigterm_hands_running_tasks_back_to_the_queue(server_processes: Any, tmp_path: Path) -> None:
    db = tmp_path / "tasks.sqlite"
    args = ["--agents", f"slow={ref('slow')}", "--store", f"sqlite:///{db}", "--concurrency", "2",
            "--lease-s", "5", "--poll-s", "0.1", "--drain-s", "0", "--log-level", "warning"]  # fmt: skip
    port = free_port()
    server = server_processes(args, port=port)
    async with AworldTaskClient(know_hosts=[server.host], backoff_s=0.05, retries=8) as client:
        await client.submit_tasks(
            [AworldTask(task_id=f"s{i}", agent_id="slow", agent_input="x", metadata={"sleep_s": 4.0}) for i in range(3)]
        )
        await wait_for(lambda: client.list_tasks(status="running"), lambda r: len(r) == 2, timeout=20)
        server.stop()  # SIGTERM: no drain time, so both runs go back to the queue at once
        assert server.proc is not None and server.proc.returncode == 0, server.tail()
        with sqlite3.connect(db) as conn:
            statuses = dict(conn.execute("SELECT task_id, status FROM aworld_tasks").fetchall())
            released = conn.execute("SELECT count(*) FROM aworld_task_attempts WHERE outcome = 'released'").fetchone()
        assert set(statuses.values()) == {"init"} and released == (2,)

        server_processes(args, port=port)
        states = await client.wait(["s0", "s1", "s2"], timeout=30, poll_s=0.1)
        assert [s.status for s in states] == [TaskStatus.SUCCESS] * 3
