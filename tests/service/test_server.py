"""A real task server (uvicorn on 127.0.0.1) with real agents calling the loopback LLM stub,
driven through the real client and through raw HTTP for the error paths."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import service_agents
from service_agents import ref

from aworld_core.schemas import AworldTask, EpisodeStatus, TaskResult, TaskStatus
from aworld_service.client import AworldTaskClient
from aworld_service.errors import QueueFullError, TaskConflictError, TaskNotFoundError, TaskServiceError
from aworld_service.server import ServerConfig


def config(tmp_path: Path, **overrides: Any) -> ServerConfig:
    agents = overrides.pop(
        "agents",
        {
            "calc": ref("calc_agent"),
            "calc_per_task": ref("calc_agent_for_task"),
            "echo": ref("echo"),
            "slow": ref("slow"),
            "broken": ref("broken"),
        },
    )
    values: dict[str, Any] = {
        "store_url": f"sqlite:///{tmp_path / 'tasks.sqlite'}",
        "concurrency": 4,
        "lease_s": 3.0,
        "poll_s": 0.1,
        "drain_s": 0.0,
        **overrides,
    }
    return ServerConfig(agents=agents, **values)


async def http(method: str, url: str, **kwargs: Any) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as resp:
        raw = await resp.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode()
        return resp.status, body, resp.headers.copy()  # case-insensitive


async def test_a_real_agent_runs_a_task_end_to_end(llm_stub: Any, serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, _), AworldTaskClient(know_hosts=[host]) as client:
        submitted = await client.submit_task(
            AworldTask(task_id="q1", agent_id="calc", agent_input="add 2 and 3", user_id="alice", session_id="s1")
        )
        assert submitted.status is TaskStatus.INIT and submitted.user_id == "alice"
        state = await client.wait("q1", timeout=30)
        assert state.status is TaskStatus.SUCCESS and state.answer == "<answer>5</answer>"
        assert state.error is None and state.attempts == 1 and state.duration_s is not None

        result = await client.get_result("q1")
        episode = result.episode
        assert episode is not None and episode.status is EpisodeStatus.SUCCESS
        assert episode.task_id == "q1" and episode.id == "ep-q1-1"
        tool_results = [r for step in episode.steps for r in step.exp_data.state.action_result]
        assert [(r.tool_name, r.content) for r in tool_results] == [("add", "5")]
        assert result.task is not None and result.task.agent_input == "add 2 and 3"

        # the stub saw the real conversation: question, tool call, tool result
        assert [m["role"] for m in llm_stub.requests[-1]["messages"]][-2:] == ["assistant", "tool"]

        lines = tmp_path / "out" / "trajectories.jsonl"
        assert await client.download_trajectories(lines) == 1
        (row,) = [TaskResult.model_validate_json(line) for line in lines.read_text().splitlines()]
        assert row.task_id == "q1" and row.episode is not None and row.episode.final_answer == "<answer>5</answer>"


async def test_rewards_are_scored_when_configured(llm_stub: Any, serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path, reward="gaia")) as (host, _), AworldTaskClient(know_hosts=[host]) as client:
        await client.submit_tasks(
            [
                AworldTask(task_id="right", agent_id="calc", agent_input="add 20 and 22", ground_truth="42"),
                AworldTask(task_id="wrong", agent_id="calc", agent_input="add 1 and 1", ground_truth="3"),
                AworldTask(task_id="fmt", agent_id="calc", agent_input="add 1 and 2", reward="format"),
                AworldTask(task_id="no-truth", agent_id="calc", agent_input="add 1 and 3"),
            ]
        )
        states = {s.task_id: s for s in await client.wait(["right", "wrong", "fmt", "no-truth"], timeout=30)}
        assert states["right"].reward == 1.0 and states["wrong"].reward == 0.0
        assert states["fmt"].reward == pytest.approx(0.1)
        # a reward that fails is recorded, never turned into 0
        assert states["no-truth"].reward is None and states["no-truth"].status is TaskStatus.SUCCESS
        assert "reward failed: gaia" in (states["no-truth"].error or "")
        assert "needs a ground truth" in (states["no-truth"].error or "")
        result = await client.get_result("right")
        assert result.episode is not None and result.episode.rewards == {"gaia": 1.0}


async def test_failures_are_recorded_as_failed_with_their_trajectory(
    llm_stub: Any, serve: Any, tmp_path: Path
) -> None:
    async with serve(config(tmp_path)) as (host, _), AworldTaskClient(know_hosts=[host]) as client:
        await client.submit_tasks(
            [
                AworldTask(task_id="raises", agent_id="broken", agent_input="x"),
                AworldTask(task_id="llm-refuses", agent_id="calc", agent_input="fail-llm 1 2"),
                AworldTask(task_id="too-slow", agent_id="slow", agent_input="x", timeout=0.3),
            ]
        )
        states = {s.task_id: s for s in await client.wait(["raises", "llm-refuses", "too-slow"], timeout=30)}
        assert states["raises"].status is TaskStatus.FAILED
        assert "RuntimeError: broken agent on purpose for raises" in (states["raises"].error or "")
        assert states["llm-refuses"].status is TaskStatus.FAILED
        assert "stub refuses this task" in (states["llm-refuses"].error or "")
        assert states["too-slow"].status is TaskStatus.TIMEOUT
        assert "timed out after 0.3 s" in (states["too-slow"].error or "")
        for task_id in states:
            episode = (await client.get_result(task_id)).episode
            assert episode is not None and not episode.trainable and episode.status is not EpisodeStatus.SUCCESS
        # a failed task is never exported as a success
        path = tmp_path / "ok.jsonl"
        assert await client.download_trajectories(path, status="success") == 0


async def test_the_servers_default_timeout_applies(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path, default_timeout_s=0.3)) as (host, _), AworldTaskClient(know_hosts=[host]) as c:
        await c.submit_task(AworldTask(task_id="s", agent_id="slow", agent_input="x"))
        assert (await c.wait("s", timeout=30)).status is TaskStatus.TIMEOUT


async def test_task_overrides_reach_the_llm(llm_stub: Any, serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, _), AworldTaskClient(know_hosts=[host]) as client:
        await client.submit_tasks(
            [
                AworldTask(
                    task_id="o1",
                    agent_id="calc",
                    agent_input="add 4 and 4",
                    llm_model_name="override-model",
                    llm_api_key="sk-task-key",
                    system_prompt="You are the override prompt.",
                    sampling={"temperature": 0.25},
                ),
                AworldTask(task_id="o2", agent_id="calc_per_task", agent_input="add 5 and 5", llm_model_name="m2"),
                AworldTask(task_id="o3", agent_id="calc", agent_input="add 6 and 6"),
            ]
        )
        states = {s.task_id: s for s in await client.wait(["o1", "o2", "o3"], timeout=30)}
        assert {s.status for s in states.values()} == {TaskStatus.SUCCESS}
    by_input = {}
    for call in llm_stub.calls:
        user = next(m["content"] for m in call["json"]["messages"] if m["role"] == "user")
        by_input.setdefault(user, []).append(call)
    o1 = by_input["add 4 and 4"][0]
    assert o1["json"]["model"] == "override-model" and o1["json"]["temperature"] == 0.25
    assert o1["json"]["messages"][0] == {"role": "system", "content": "You are the override prompt."}
    assert o1["headers"]["Authorization"] == "Bearer sk-task-key"
    assert by_input["add 5 and 5"][0]["json"]["model"] == "m2"
    plain = by_input["add 6 and 6"][0]
    assert plain["json"]["model"] == "stub-model" and plain["headers"]["Authorization"] == "Bearer test-key"


async def test_a_bad_override_fails_the_task_naming_the_field(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, _), AworldTaskClient(know_hosts=[host]) as client:
        await client.submit_task(AworldTask(task_id="bad", agent_id="calc", agent_input="x", llm_provider="anthropic"))
        state = await client.wait("bad", timeout=30)
    assert state.status is TaskStatus.FAILED
    assert "task.llm_provider: got 'anthropic'; expected one of 'openai'" in (state.error or "")


async def test_bad_payloads_get_422_naming_the_field(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, _):
        url = f"http://{host}/v1/tasks"
        cases = [
            (b"{not json", "(body)", "not valid JSON"),
            (json.dumps({"agent_input": "x"}).encode(), "agent_id", "Field required"),
            (json.dumps({"agent_id": "echo", "agent_input": "x", "max_steps": "many"}).encode(), "max_steps", ""),
            (json.dumps({"agent_id": "echo", "agent_input": "x", "bogus": 1}).encode(), "bogus", "Extra inputs"),
            (json.dumps({"agent_id": "echo", "agent_input": "x", "task_id": "a/b"}).encode(), "task_id", ""),
            (json.dumps({"agent_id": "echo", "agent_input": "x", "task_id": "a,b"}).encode(), "task_id", ""),
            (json.dumps({"agent_id": "nobody", "agent_input": "x"}).encode(), "agent_id", "this server runs calc"),
            (json.dumps(["a list"]).encode(), "(body)", "JSON object"),
        ]
        for body, field, text in cases:
            status, reply, _ = await http("POST", url, data=body, headers={"Content-Type": "application/json"})
            assert status == 422, (body, reply)
            assert field in [p["field"] for p in reply["problems"]], (body, reply)
            assert text in json.dumps(reply), (body, reply)

        batch = {"tasks": [{"agent_id": "echo", "agent_input": "ok"}, {"agent_id": "echo", "agent_input": 5}]}
        status, reply, _ = await http("POST", f"{url}/batch", json=batch)
        assert status == 422 and reply["problems"][0]["field"] == "tasks.1.agent_input"
        status, reply, _ = await http("GET", f"{url}?status=bogus")
        assert status == 422 and reply["problems"][0]["field"] == "status"
        assert (await http("GET", f"{url}?status=init"))[0] == 200  # nothing of the bad batch was stored
        assert (await http("GET", f"{url}?status=init"))[1]["tasks"] == []

        async with AworldTaskClient(know_hosts=[host], retries=1) as client:
            with pytest.raises(TaskServiceError, match=f"http://{host} answered 422 .*unknown agent_id 'nobody'") as info:
                await client.submit_task(AworldTask(agent_id="nobody", agent_input="x"))
            assert info.value.status == 422 and info.value.host == f"http://{host}"


async def test_a_deeply_nested_body_gets_422_not_503(serve: Any, tmp_path: Path) -> None:
    """A 503 tells clients "this host failed, retry elsewhere": a body too deep to parse is the
    request's fault, on every host."""
    async with serve(config(tmp_path)) as (host, _):
        url = f"http://{host}/v1/tasks"
        deep = b"[" * 100_000 + b"]" * 100_000  # past the JSON parser's recursion limit
        nested: Any = "x"
        for _ in range(500):  # parses, but deeper than a request may be
            nested = {"k": nested}
        medium = json.dumps({"agent_id": "echo", "agent_input": "x", "metadata": nested}).encode()
        for path in ("", "/batch", "/states"):
            for body in (deep, medium):
                status, reply, _ = await http("POST", url + path, data=body, headers={"Content-Type": "application/json"})
                assert status == 422, (path, len(body), reply)
                assert "nested more than" in reply["error"] and reply["problems"][0]["field"] == "(body)"
        assert (await http("GET", f"http://{host}/health"))[0] == 200


async def test_size_limits(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path, max_body_bytes=2000, max_batch=3)) as (host, _):
        status, reply, _ = await http(
            "POST", f"http://{host}/v1/tasks", json={"agent_id": "echo", "agent_input": "x" * 5000}
        )
        assert status == 413 and "--max-body-bytes" in reply["error"]
        tasks = [{"agent_id": "echo", "agent_input": str(i)} for i in range(4)]
        status, reply, _ = await http("POST", f"http://{host}/v1/tasks/batch", json={"tasks": tasks})
        assert status == 413 and "--max-batch" in reply["error"]


async def test_unknown_task_ids(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, _), AworldTaskClient(know_hosts=[host], retries=1) as client:
        for path in ("/v1/tasks/nope", "/v1/tasks/nope/result", "/v1/tasks/nope/attempts"):
            status, reply, _ = await http("GET", f"http://{host}{path}")
            assert status == 404 and reply["error"] == "unknown task id 'nope'"
        with pytest.raises(TaskNotFoundError, match="no server knows task id 'nope'"):
            await client.get_task_state("nope")
        with pytest.raises(TaskNotFoundError):
            await client.get_result("nope")
        with pytest.raises(TaskNotFoundError):
            await client.cancel("nope")
        with pytest.raises(TaskNotFoundError, match="nope"):
            await client.wait(["nope"], timeout=5)


async def test_the_bearer_token(serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWORLD_TASK_TOKEN", raising=False)
    async with serve(config(tmp_path, token="s3cret")) as (host, _):
        task = AworldTask(task_id="t", agent_id="echo", agent_input="hi")
        async with AworldTaskClient(know_hosts=[host], retries=1) as anonymous:
            with pytest.raises(TaskServiceError, match=f"http://{host} answered 401 .*missing bearer token") as info:
                await anonymous.submit_task(task)
            assert info.value.status == 401
        async with AworldTaskClient(know_hosts=[host], token="wrong", retries=1) as wrong:
            with pytest.raises(TaskServiceError, match="401 .*wrong bearer token"):
                await wrong.get_task_state("t")
        async with AworldTaskClient(know_hosts=[host], token="s3cret") as right:
            assert (await right.submit_task(task)).task_id == "t"
            assert (await right.wait("t", timeout=10)).answer == "echo: hi"
        monkeypatch.setenv("AWORLD_TASK_TOKEN", "s3cret")
        async with AworldTaskClient(know_hosts=[host]) as from_env:
            assert (await from_env.get_task_state("t")).status is TaskStatus.SUCCESS
        status, reply, headers = await http("GET", f"http://{host}/v1/tasks")
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert (await http("GET", f"http://{host}/health"))[0] == 200  # probes need no token


async def test_a_full_queue_answers_429_with_retry_after(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path, concurrency=1, max_queue=3)) as (host, _):
        async with AworldTaskClient(know_hosts=[host], retries=1, backoff_s=0.01) as client:
            await client.submit_task(AworldTask(task_id="runs", agent_id="slow", agent_input="x"))
            await _until(lambda: client.get_task_state("runs"), lambda s: s.status is TaskStatus.RUNNING)
            await asyncio.sleep(0.6)  # the server's queue count is re-read every 0.5 s
            queued = [AworldTask(task_id=f"q{i}", agent_id="slow", agent_input="x") for i in range(3)]
            await client.submit_tasks(queued)
            status, reply, headers = await http(
                "POST", f"http://{host}/v1/tasks", json={"agent_id": "echo", "agent_input": "one too many"}
            )
            assert status == 429 and "queue full: 3 tasks wait" in reply["error"]
            assert headers["Retry-After"] == "1"
            with pytest.raises(QueueFullError, match="429") as info:
                await client.submit_task(AworldTask(agent_id="echo", agent_input="x"))
            assert info.value.retry_after == 1.0 and info.value.host == f"http://{host}"
            # resubmitting what is already queued is refused too (admission does not look ids up)
            metrics = (await http("GET", f"http://{host}/metrics"))[1]
            assert "aworld_rejected_queue_full_total " in metrics
            # cancelling makes room again
            for task in queued:
                await client.cancel(task.task_id)
            await asyncio.sleep(0.6)
            assert (await client.submit_task(AworldTask(task_id="fits", agent_id="echo", agent_input="x"))).task_id
            await client.cancel("runs")


async def test_cancel_a_queued_and_a_running_task(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path, concurrency=1)) as (host, _), AworldTaskClient(
        know_hosts=[host]
    ) as client:
        await client.submit_tasks(
            [AworldTask(task_id=f"s{i}", agent_id="slow", agent_input="x") for i in range(2)]
        )
        await _until(lambda: client.get_task_state("s0"), lambda s: s.status is TaskStatus.RUNNING)
        queued = await client.cancel("s1")
        assert queued.status is TaskStatus.CANCELLED
        running = await client.cancel("s0")
        assert running.status is TaskStatus.RUNNING and running.cancel_requested
        final = await client.wait("s0", timeout=10)  # stopped at its host's next renewal
        assert final.status is TaskStatus.CANCELLED and "cancelled by request" in (final.error or "")
        result = await client.get_result("s0")
        assert result.episode is not None and result.episode.status is EpisodeStatus.CANCELLED
        with pytest.raises(TaskConflictError, match="cancelled is final"):
            await client.cancel("s0")
        status, reply, _ = await http("POST", f"http://{host}/v1/tasks/s1/cancel")
        assert status == 409


async def test_resubmitting_is_idempotent_and_a_changed_payload_conflicts(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, server), AworldTaskClient(know_hosts=[host]) as client:
        task = AworldTask(task_id="same", agent_id="echo", agent_input="hi")
        first = await client.submit_task(task)
        second = await client.submit_task(task)
        assert first.created_at == second.created_at
        states = await client.submit_tasks([task, task])
        assert {s.created_at for s in states} == {first.created_at}
        with pytest.raises(TaskConflictError, match="task 'same' was already submitted with a different payload"):
            await client.submit_task(AworldTask(task_id="same", agent_id="echo", agent_input="other"))
        await client.wait("same", timeout=10)
        assert server.metrics.submitted == 1 and server.metrics.duplicates == 3
        status, reply, _ = await http(
            "POST", f"http://{host}/v1/tasks", json=task.model_dump(mode="json")
        )
        assert status == 200 and reply["status"] == "success"  # 200, not 201: nothing new was made


async def test_listing_states_metrics_and_health(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, server), AworldTaskClient(know_hosts=[host]) as client:
        tasks = [
            AworldTask(task_id=f"e{i}", agent_id="echo", agent_input=str(i), user_id="u1" if i < 3 else "u2")
            for i in range(5)
        ]
        await client.submit_tasks(tasks)
        await client.wait([t.task_id for t in tasks], timeout=20)
        u1 = await client.list_tasks(user_id="u1")
        assert [s.task_id for s in u1] == ["e0", "e1", "e2"]
        assert len(await client.list_tasks(status="success")) == 5
        assert await client.list_tasks(status=["failed", "timeout"]) == []
        assert len(await client.list_tasks(limit=2)) == 2
        attempts = await client.get_attempts("e0")
        assert [(a.attempt, a.owner, a.outcome) for a in attempts] == [(1, server.config.owner, "success")]

        status, text, headers = await http("GET", f"http://{host}/metrics")
        assert status == 200 and float(headers["X-Aworld-Load"]) >= 0
        assert 'aworld_tasks{status="success"} 5' in text
        assert 'aworld_finished_total{status="success"} 5' in text
        assert 'aworld_task_duration_seconds_count{status="success"} 5' in text
        assert 'aworld_task_duration_seconds_bucket{le="+Inf",status="success"} 5' in text
        assert "aworld_tasks_queued 0" in text and "aworld_submitted_total 5" in text
        health = (await client.health())[f"http://{host}"]
        assert health["status"] == "ok" and health["store"] == "sqlite" and health["concurrency"] == 4
        assert set(health["agents"]) == {"calc", "calc_per_task", "echo", "slow", "broken"}


async def test_a_bad_agent_reference_fails_at_start(tmp_path: Path) -> None:
    from aworld_core.errors import UsageError
    from aworld_service.agents import AgentRegistry, parse_agent_specs

    with pytest.raises(UsageError, match="gave int; a factory must return an Agent or Swarm"):
        AgentRegistry({"x": ref("not_an_agent")})
    with pytest.raises(UsageError, match="has no attribute 'missing'"):
        AgentRegistry({"x": ref("missing")})
    with pytest.raises(UsageError, match="bad agent spec 'calc': expected name=package.module:factory"):
        parse_agent_specs(["calc"])
    assert parse_agent_specs(["a=m:f,b=m:g", "c=x.py:h"]) == {"a": "m:f", "b": "m:g", "c": "x.py:h"}
    assert service_agents.THIS_FILE.exists()


async def _until(read: Any, done: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout} s; last value {value!r}")
        await asyncio.sleep(0.05)


class _BrokenListener:
    """A plugin whose on_episode_end raises: the result must still be recorded, with the error."""

    seen: list[str] = []

    from aworld_core.hookspecs import hookimpl

    @hookimpl
    def on_episode_end(self, episode: Any) -> None:
        _BrokenListener.seen.append(episode.task_id)
        raise ValueError("listener broke on purpose")


async def test_a_failing_episode_listener_is_recorded_not_rerun(serve: Any, tmp_path: Path) -> None:
    from aworld_core.plugins import PluginManager, reset_plugin_manager

    manager = PluginManager(load_entry_points=False)
    manager.register(_BrokenListener(), name="broken-listener")
    reset_plugin_manager(manager)
    try:
        async with serve(config(tmp_path)) as (host, _), AworldTaskClient(know_hosts=[host]) as client:
            await client.submit_task(AworldTask(task_id="l1", agent_id="echo", agent_input="hi"))
            state = await client.wait("l1", timeout=20)
            assert state.status is TaskStatus.SUCCESS and state.attempts == 1
            assert "after the episode: ValueError: listener broke on purpose" in (state.error or "")
            assert _BrokenListener.seen == ["l1"]
    finally:
        reset_plugin_manager(None)
