"""The durable task stores (SQLite, and a real PostgreSQL server): queue, leases, fencing."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, Episode, EpisodeStatus, TaskStatus
from aworld_service.errors import IllegalTransitionError, TaskConflictError, TaskNotFoundError
from aworld_service.store import Outcome, TaskFilter, TaskStore, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tasks.sqlite'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[TaskStore]:
    s = open_store(store_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def tasks(n: int, agent: str = "a", prefix: str = "t", **fields: object) -> list[AworldTask]:
    return [AworldTask(task_id=f"{prefix}{i}", agent_id=agent, agent_input=f"q{i}", **fields) for i in range(n)]


def success(task_id: str, answer: str = "42") -> Outcome:
    episode = Episode(task_id=task_id, agent_id="a", final_answer=answer)
    episode.finish(EpisodeStatus.SUCCESS)
    return Outcome(TaskStatus.SUCCESS, episode, answer)


async def test_submit_is_idempotent_and_a_conflict_inserts_nothing(store: TaskStore) -> None:
    first = await store.submit(tasks(3))
    assert [s.created for s in first] == [True, True, True]
    assert all(s.state.status is TaskStatus.INIT for s in first)
    again = await store.submit(tasks(3))
    assert [s.created for s in again] == [False, False, False]
    assert [s.state.created_at for s in again] == [s.state.created_at for s in first]

    changed = AworldTask(task_id="t1", agent_id="a", agent_input="another question")
    with pytest.raises(TaskConflictError, match="task 't1' was already submitted with a different payload"):
        await store.submit([AworldTask(task_id="new", agent_id="a", agent_input="x"), changed])
    assert await store.get("new") is None  # all or nothing
    assert await store.count(TaskStatus.INIT) == 3

    twice = AworldTask(task_id="twice", agent_id="a", agent_input="x")
    assert [s.created for s in await store.submit([twice, twice])] == [True, False]
    other = AworldTask(task_id="other", agent_id="a", agent_input="x")
    with pytest.raises(TaskConflictError, match="'other'"):
        await store.submit([other, other.model_copy(update={"agent_input": "y"})])
    assert await store.get("other") is None


async def test_claims_follow_priority_then_age_and_only_the_hosts_agents(store: TaskStore) -> None:
    await store.submit(tasks(3, prefix="low"))
    await store.submit(tasks(2, prefix="high", priority=5))
    await store.submit(tasks(2, agent="other", prefix="o"))
    claims = await store.claim("h1", ["a"], 4, 30, 3)
    assert [c.task.task_id for c in claims] == ["high0", "high1", "low0", "low1"]
    assert all(c.attempt == 1 for c in claims) and len({c.lease_token for c in claims}) == 4
    rest = await store.claim("h1", ["a"], 10, 30, 3)
    assert [c.task.task_id for c in rest] == ["low2"]
    assert await store.claim("h1", ["a"], 10, 30, 3) == []
    state = await store.get("high0")
    assert state is not None and state.status is TaskStatus.RUNNING and state.host == "h1"
    assert await store.count(TaskStatus.INIT) == 2  # the other agent's tasks wait for a host that runs it


async def test_an_expired_lease_is_reclaimed_and_the_old_host_is_fenced(store: TaskStore) -> None:
    await store.submit(tasks(1))
    (old,) = await store.claim("h1", ["a"], 1, 0.3, 3)  # (a held lease is not re-claimed: the priority test)
    await asyncio.sleep(0.45)
    assert await store.claim("h2", ["a"], 1, 0.3, 3) == []  # first seen expired: only noted
    await asyncio.sleep(0.4)
    (new,) = await store.claim("h2", ["a"], 1, 0.3, 3)  # a lease after that: re-claimed
    assert new.attempt == 2 and new.lease_token != old.lease_token

    # the old host can neither renew nor write its result
    assert (await store.renew("h1", {"t0": old.lease_token}, 30)).held == frozenset()
    assert await store.finish("t0", old.lease_token, success("t0", "stale")) is False
    assert await store.release("t0", old.lease_token) is False
    assert await store.finish("t0", new.lease_token, success("t0", "fresh")) is True
    result = await store.get_result("t0")
    assert result is not None and result.status is TaskStatus.SUCCESS and result.answer == "fresh"
    assert result.host == "h2" and result.attempts == 2
    assert result.episode is not None and result.episode.final_answer == "fresh"

    attempts = await store.attempts("t0")
    assert [(a.attempt, a.owner, a.outcome) for a in attempts] == [(1, "h1", "fenced"), (2, "h2", "success")]
    # a second write of the same run is refused and does not hide the real outcome
    assert await store.finish("t0", new.lease_token, success("t0", "again")) is False
    assert (await store.attempts("t0"))[1].outcome == "success"


async def test_an_expired_lease_nobody_reclaimed_still_renews_and_writes(store: TaskStore) -> None:
    """A store stall expires leases of live hosts: until another host re-claims the task, its
    host may renew it (which clears the lapse) and write its result."""
    await store.submit(tasks(1))
    (claim,) = await store.claim("h1", ["a"], 1, 0.3, 3)
    await asyncio.sleep(0.45)
    assert await store.claim("h2", ["a"], 1, 0.3, 3) == []  # noted as lapsed
    assert (await store.renew("h1", {"t0": claim.lease_token}, 0.3)).held == {"t0"}
    await asyncio.sleep(0.45)  # lapsed twice as long as a lease since the claim, renewed in between
    assert await store.claim("h2", ["a"], 1, 0.3, 3) == []  # the renewal cleared the note
    await asyncio.sleep(0.4)
    assert await store.finish("t0", claim.lease_token, success("t0")) is True
    state = await store.get("t0")
    assert state is not None and state.status is TaskStatus.SUCCESS and state.attempts == 1
    assert [a.outcome for a in await store.attempts("t0")] == ["success"]


async def test_renewal_keeps_the_lease_and_checks_owner_and_token(store: TaskStore) -> None:
    await store.submit(tasks(2))
    claims = await store.claim("h1", ["a"], 2, 0.5, 3)
    leases = {c.task.task_id: c.lease_token for c in claims}
    for _ in range(3):
        await asyncio.sleep(0.25)
        assert (await store.renew("h1", leases, 0.5)).held == set(leases)
    assert await store.claim("h2", ["a"], 2, 0.5, 3) == []  # renewed past its first expiry
    assert (await store.renew("h2", leases, 0.5)).held == frozenset()  # not the owner
    assert (await store.renew("h1", {"t0": "forged"}, 0.5)).held == frozenset()


async def test_cancel_in_each_status(store: TaskStore) -> None:
    await store.submit(tasks(3))
    cancelled = await store.cancel("t0")
    assert cancelled.status is TaskStatus.CANCELLED and cancelled.ended_at is not None

    claims = await store.claim("h1", ["a"], 2, 30, 3)
    assert {c.task.task_id for c in claims} == {"t1", "t2"}
    running = await store.cancel("t1")
    assert running.status is TaskStatus.RUNNING and running.cancel_requested
    renewal = await store.renew("h1", {c.task.task_id: c.lease_token for c in claims}, 30)
    assert renewal.cancel_requested == {"t1"} and renewal.held == {"t1", "t2"}

    with pytest.raises(IllegalTransitionError, match="cannot move from cancelled to cancelled: cancelled is final"):
        await store.cancel("t0")
    with pytest.raises(TaskNotFoundError, match="unknown task id 'nope'"):
        await store.cancel("nope")


async def test_a_cancel_requested_task_whose_host_died_ends_cancelled(store: TaskStore) -> None:
    await store.submit(tasks(1))
    await store.claim("h1", ["a"], 1, 0.3, 3)
    await store.cancel("t0")
    await asyncio.sleep(0.45)
    assert await store.claim("h2", ["a"], 1, 0.3, 3) == []  # noted as lapsed
    assert (await store.get("t0")).status is TaskStatus.RUNNING  # type: ignore[union-attr]
    await asyncio.sleep(0.4)
    assert await store.claim("h2", ["a"], 1, 0.3, 3) == []
    state = await store.get("t0")
    assert state is not None and state.status is TaskStatus.CANCELLED


async def test_a_task_whose_hosts_keep_dying_is_abandoned_after_max_attempts(store: TaskStore) -> None:
    await store.submit(tasks(1))
    for attempt in (1, 2):
        (claim,) = await store.claim(f"h{attempt}", ["a"], 1, 0.2, 2)
        assert claim.attempt == attempt
        await asyncio.sleep(0.3)
        assert await store.claim("h3", ["a"], 1, 0.2, 2) == []  # noted as lapsed
        await asyncio.sleep(0.3)
    assert await store.claim("h3", ["a"], 1, 0.2, 2) == []
    state = await store.get("t0")
    assert state is not None and state.status is TaskStatus.FAILED
    assert state.error is not None and "abandoned after 2 attempts" in state.error
    assert [a.outcome for a in await store.attempts("t0")] == ["lease_expired", "lease_expired"]


async def test_release_puts_a_task_back_in_the_queue(store: TaskStore) -> None:
    await store.submit(tasks(1))
    (claim,) = await store.claim("h1", ["a"], 1, 30, 3)
    assert await store.release("t0", claim.lease_token) is True
    (again,) = await store.claim("h2", ["a"], 1, 30, 3)
    assert again.task.task_id == "t0" and again.attempt == 2
    assert [a.outcome for a in await store.attempts("t0")] == ["released", None]


async def test_listing_results_and_counts(store: TaskStore) -> None:
    await store.submit(tasks(5, user_id="alice", session_id="s1"))
    await store.submit(tasks(2, prefix="b", user_id="bob"))
    claims = await store.claim("h1", ["a"], 3, 30, 3)
    for claim in claims:
        await store.finish(claim.task.task_id, claim.lease_token, success(claim.task.task_id))

    page = await store.list(TaskFilter(limit=3))
    assert [s.task_id for s in page.items] == ["t0", "t1", "t2"] and page.next_after is not None
    page2 = await store.list(TaskFilter(limit=3, after=page.next_after))
    assert [s.task_id for s in page2.items] == ["t3", "t4", "b0"]
    bob = await store.list(TaskFilter(user_id="bob"))
    assert [s.task_id for s in bob.items] == ["b0", "b1"] and bob.next_after is None
    done = await store.list(TaskFilter(statuses=[TaskStatus.SUCCESS]))
    assert [s.task_id for s in done.items] == ["t0", "t1", "t2"]
    chosen = await store.get_many(["t4", "nope", "t0"])
    assert {s.task_id for s in chosen} == {"t0", "t4"}

    results = [r async for r in store.iter_results(TaskFilter(limit=2, session_id="s1"))]
    assert [r.task_id for r in results] == ["t0", "t1", "t2"]
    assert all(r.episode is not None and r.task is not None for r in results)

    counts = await store.counts()
    assert counts[TaskStatus.SUCCESS] == 3 and counts[TaskStatus.INIT] == 4 and counts[TaskStatus.RUNNING] == 0


async def test_the_api_key_is_stored_for_other_hosts_but_never_returned(store: TaskStore) -> None:
    (task,) = tasks(1, llm_api_key="sk-secret")
    await store.submit([task])
    (claim,) = await store.claim("h1", ["a"], 1, 30, 3)
    assert claim.task.llm_api_key == "sk-secret"  # the host that runs it needs it
    await store.finish("t0", claim.lease_token, success("t0"))
    result = await store.get_result("t0")
    assert result is not None and result.task is not None and result.task.llm_api_key == "***"


async def test_reopening_the_store_loses_nothing(store_url: str) -> None:
    first = open_store(store_url)
    await first.open()
    store_id = await first.store_id()
    await first.submit(tasks(3))
    (claim,) = await first.claim("h1", ["a"], 1, 30, 3)
    await first.finish(claim.task.task_id, claim.lease_token, success(claim.task.task_id, "kept"))
    await first.close()

    second = open_store(store_url)
    await second.open()
    try:
        assert await second.store_id() == store_id
        result = await second.get_result("t0")
        assert result is not None and result.answer == "kept" and result.episode is not None
        assert await second.count(TaskStatus.INIT) == 2
    finally:
        await second.close()


async def test_hosts_claiming_at_once_never_get_the_same_task(store_url: str) -> None:
    """Six hosts, each with its own connection(s), drain one queue concurrently."""
    hosts = [open_store(store_url) for _ in range(6)]
    for host in hosts:
        await host.open()
    try:
        await hosts[0].submit(tasks(240))
        claimed: Counter[str] = Counter()

        async def drain(index: int, host: TaskStore) -> None:
            while True:
                claims = await host.claim(f"h{index}", ["a"], 7, 30, 3)
                if not claims:
                    return
                claimed.update(c.task.task_id for c in claims)

        await asyncio.gather(*(drain(i, h) for i, h in enumerate(hosts)))
        assert len(claimed) == 240 and set(claimed.values()) == {1}
    finally:
        for host in hosts:
            await host.close()


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://x", "unknown task store URL 'mysql://x'"),
        ("sqlite://host/x.sqlite", "bad SQLite store URL"),
        ("sqlite:///x.sqlite?synchronous=off", "bad synchronous='OFF'"),
    ],
)
def test_a_bad_store_url_says_what_to_write(url: str, message: str, tmp_path: Path, chdir: Callable[..., object]) -> None:
    with pytest.raises(UsageError, match=message):
        open_store(url)


@pytest.fixture
def chdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., object]:
    monkeypatch.chdir(tmp_path)
    return monkeypatch.chdir
