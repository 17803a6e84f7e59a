"""The client against several real servers: load-based choice, failover, finding tasks on the
host that has them, and downloading each trajectory exactly once."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from service_agents import ref

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, TaskResult, TaskStatus
from aworld_service.client import AworldTaskClient
from aworld_service.errors import TaskServiceError
from aworld_service.server import ServerConfig
from support.openai_stub import free_port


def config(store: Path, **overrides: Any) -> ServerConfig:
    values: dict[str, Any] = {
        "store_url": f"sqlite:///{store}",
        "concurrency": 2,
        "lease_s": 3.0,
        "poll_s": 0.1,
        "drain_s": 0.0,
        **overrides,
    }
    return ServerConfig(agents={"echo": ref("echo"), "slow": ref("slow")}, **values)


def echo_tasks(n: int, prefix: str = "t") -> list[AworldTask]:
    return [AworldTask(task_id=f"{prefix}{i}", agent_id="echo", agent_input=f"q{i}") for i in range(n)]


async def test_a_dead_host_is_skipped(serve: Any, tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with serve(config(tmp_path / "a.sqlite")) as (live, _):
        async with AworldTaskClient(know_hosts=[dead, live], retries=3, backoff_s=0.01) as client:
            states = [await client.submit_task(task) for task in echo_tasks(4)]
            assert all(s.status in (TaskStatus.INIT, TaskStatus.RUNNING, TaskStatus.SUCCESS) for s in states)
            assert (await client.wait("t3", timeout=10)).answer == "echo: q3"
            health = await client.health()
            assert health[f"http://{dead}"]["status"] == "unreachable"
            assert health[f"http://{live}"]["status"] == "ok"


async def test_no_reachable_host_raises_naming_every_host(tmp_path: Path) -> None:
    hosts = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    async with AworldTaskClient(know_hosts=hosts, retries=2, backoff_s=0.01) as client:
        with pytest.raises(TaskServiceError, match="failed after 3 tries on 2 host") as info:
            await client.submit_task(AworldTask(agent_id="echo", agent_input="x"))
        for host in hosts:
            assert f"http://{host}: unreachable" in str(info.value)
        assert info.value.status is None


async def test_tasks_are_found_on_the_host_whose_store_has_them(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path / "a.sqlite")) as (a, _), serve(config(tmp_path / "b.sqlite")) as (b, _):
        async with AworldTaskClient(know_hosts=[a, b], batch_size=5) as client:
            states = await client.submit_tasks(echo_tasks(30))
            assert [s.task_id for s in states] == [f"t{i}" for i in range(30)]
            await client.wait([s.task_id for s in states], timeout=30)

        # a client that did not submit them asks the servers, not its memory
        async with AworldTaskClient(know_hosts=[a, b]) as fresh:
            finished = await fresh.wait([f"t{i}" for i in range(30)], timeout=10)
            assert {s.status for s in finished} == {TaskStatus.SUCCESS}
            hosts = Counter(s.host for s in finished)
            assert len(hosts) == 2, f"load-based choice should use both hosts: {hosts}"
            one = await fresh.get_task_state("t7")
            assert one.status is TaskStatus.SUCCESS and one.answer == "echo: q7"
            path = tmp_path / "all.jsonl"
            assert await fresh.download_trajectories(path) == 30
            rows = [TaskResult.model_validate_json(line) for line in path.read_text().splitlines()]
            assert sorted(r.task_id for r in rows) == sorted(f"t{i}" for i in range(30))
            assert len(await fresh.list_tasks()) == 30


async def test_hosts_sharing_a_store_are_asked_once(serve: Any, tmp_path: Path) -> None:
    shared = tmp_path / "shared.sqlite"  # two processes' worth of servers on one SQLite file
    async with serve(config(shared)) as (a, server_a), serve(config(shared)) as (b, server_b):
        assert server_a.store_id == server_b.store_id
        async with AworldTaskClient(know_hosts=[a, b], batch_size=4) as client:
            await client.submit_tasks(echo_tasks(20))
            await client.wait([f"t{i}" for i in range(20)], timeout=30)
            assert await client.download_trajectories(tmp_path / "out.jsonl") == 20
            assert len(await client.list_tasks()) == 20
            ran_on = {s.host for s in await client.get_task_states([f"t{i}" for i in range(20)])}
            assert ran_on <= {server_a.config.owner, server_b.config.owner}


async def test_waiting_too_long_names_what_is_unfinished(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path / "a.sqlite", lease_s=1.0)) as (host, _):
        async with AworldTaskClient(know_hosts=[host]) as client:
            await client.submit_task(AworldTask(task_id="long", agent_id="slow", agent_input="x"))
            with pytest.raises(TimeoutError, match=r"1 of 1 task\(s\) not finished after 0.3 s: long"):
                await client.wait(["long"], timeout=0.3, poll_s=0.05)
            with contextlib.suppress(TaskServiceError):
                await client.cancel("long")


def test_hosts_are_required_and_normalized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWORLD_TASK_HOSTS", raising=False)
    with pytest.raises(UsageError, match="needs at least one host"):
        AworldTaskClient(know_hosts=[])
    client = AworldTaskClient(know_hosts="localhost:9299, https://tasks.example:443/ ,localhost:9299")
    assert [h.url for h in client.hosts] == ["http://localhost:9299", "https://tasks.example:443"]
    assert [h.url for h in AworldTaskClient(known_hosts=["a:1"]).hosts] == ["http://a:1"]
    monkeypatch.setenv("AWORLD_TASK_HOSTS", "x:1,y:2")
    assert [h.url for h in AworldTaskClient().hosts] == ["http://x:1", "http://y:2"]
    with pytest.raises(UsageError, match="bad host 'ftp://x'"):
        AworldTaskClient(know_hosts=["ftp://x"])


async def test_downloading_chosen_tasks_in_several_requests(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path / "a.sqlite", concurrency=32)) as (host, _):
        async with AworldTaskClient(know_hosts=[host]) as client:
            tasks = echo_tasks(450)
            await client.submit_tasks(tasks)
            await client.wait([t.task_id for t in tasks], timeout=60, poll_s=0.1)
            chosen = [t.task_id for t in tasks[::2]] + ["never-submitted"]  # 226 ids: two requests
            path = tmp_path / "chosen.jsonl"
            assert await client.download_trajectories(path, task_ids=chosen) == 225
            rows = [TaskResult.model_validate_json(line) for line in path.read_text().splitlines()]
            assert sorted(r.task_id for r in rows) == sorted(chosen[:-1])
            assert await client.download_trajectories(tmp_path / "none.jsonl", task_ids=[]) == 0
            assert (tmp_path / "none.jsonl").read_text() == ""
            rows = [r async for r in client.iter_trajectories(status="success", task_ids=["t1", "t2"])]
            assert sorted(r.task_id for r in rows) == ["t1", "t2"]


def test_the_client_moved_out_of_the_core_and_the_core_says_where() -> None:
    import aworld_core

    with pytest.raises(ImportError, match=r"pip install aworld-service.*from aworld_service import AworldTaskClient"):
        aworld_core.AworldTaskClient  # noqa: B018
    assert "AworldTaskClient" not in aworld_core.__all__
