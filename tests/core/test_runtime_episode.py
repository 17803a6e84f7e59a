"""run_episode / Runners with a real OpenAI-compatible server and real MCP servers on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from aworld_core import Agent, AgentConfig, Runners
from aworld_core.errors import MCPConnectionError, UsageError
from aworld_core.plugins import PluginManager
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import Episode, EpisodeStatus, Sample, SamplingParams
from aworld_core.testing import McpHttpServer
from support.openai_stub import OpenAIStub, SessionRecordingLLM, free_port, reply, tool_call

TOKEN = "tok-episode"

CALLS: list[str] = []


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    CALLS.append("multiply")
    return a * b


def explode(reason: str) -> str:
    """Always raises."""
    raise ValueError(f"exploded because {reason}")


async def hang(seconds: float = 30) -> str:
    """Takes too long."""
    await asyncio.sleep(seconds)
    return "finally"


@pytest.fixture(scope="module")
def mcp():
    with McpHttpServer(name="calc", token=TOKEN) as server:
        yield server


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


def make_agent(stub: OpenAIStub, mcp: McpHttpServer | None = None, tools=(), **conf) -> Agent:
    conf.setdefault("llm_retries", 0)
    return Agent(
        "solver",
        system_prompt="You solve arithmetic with tools.",
        conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="solver-model", **conf),
        mcp_config={"mcpServers": {"calc": mcp.config()}} if mcp else None,
        tools=list(tools),
    )


def assert_typed(episode: Episode) -> None:
    """No value was stringified: no "None"/"True"/"False" strings anywhere in the record."""
    text = json.dumps(episode.model_dump(mode="json"))
    for word in ('"None"', '"True"', '"False"', '"null"'):
        assert word not in text
    again = Episode.model_validate_json(episode.model_dump_json())
    assert again == episode


# ---------------------------------------------------------------------------------------------


async def test_multi_turn_tool_use_is_recorded_step_by_step(stub, mcp):
    stub.add(
        reply(tool_calls=[tool_call("add", {"a": 2, "b": 3}, id="c1")]),
        reply("now multiply", tool_calls=[tool_call("multiply", {"a": 5, "b": 4}, id="c2")]),
        reply("The answer is 20."),
    )
    agent = make_agent(stub, mcp, tools=[multiply])
    episode = await run_episode(agent, "What is (2+3)*4?", task_id="t-1", episode_id="ep-1", source="unit")
    await agent.aclose()

    assert episode.status is EpisodeStatus.SUCCESS and episode.error is None
    assert (episode.id, episode.task_id, episode.agent_id) == ("ep-1", "t-1", "solver")
    assert episode.final_answer == "The answer is 20."
    assert episode.metadata["stop"] == "final_answer" and episode.metadata["source"] == "unit"
    assert episode.ended_at is not None and episode.training is None  # not trained: no token client
    assert len(episode.steps) == 3

    first, second, third = episode.steps
    assert [s.exp_meta.step for s in episode.steps] == [1, 2, 3]
    assert all(s.exp_meta.agent_id == "solver" and s.exp_meta.task_id == "t-1" for s in episode.steps)
    assert all(s.exp_meta.pre_agent is None and s.exp_data.state.from_agent_name == "user" for s in episode.steps)
    assert all(s.exp_meta.duration_s is not None and s.exp_meta.started_at for s in episode.steps)
    assert [a.name for a in first.exp_data.actions] == ["add"]
    [result] = first.exp_data.state.action_result
    assert (result.tool_call_id, result.tool_name, result.server, result.content, result.is_error) == (
        "c1", "add", "calc", "5", False
    )
    [result] = second.exp_data.state.action_result
    assert (result.tool_name, result.server, result.content) == ("multiply", None, "20")
    assert second.exp_data.state.content == "now multiply"
    assert third.exp_data.actions == [] and third.exp_data.state.action_result == []
    assert third.exp_data.llm_call.content == "The answer is 20."
    assert third.exp_data.llm_call.finish_reason == "stop"

    # messages recorded per step are exactly what the LLM was sent
    for step, request in zip(episode.steps, stub.requests, strict=True):
        assert step.exp_data.messages == request["messages"]
        assert request["model"] == "solver-model"
    assert stub.requests[0]["messages"][:2] == [
        {"role": "system", "content": "You solve arithmetic with tools."},
        {"role": "user", "content": "What is (2+3)*4?"},
    ]
    tool_names = [t["function"]["name"] for t in stub.requests[0]["tools"]]
    assert "add" in tool_names and "multiply" in tool_names
    assert stub.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "5"}
    # the final conversation includes the last assistant turn
    assert episode.messages[-1] == {"role": "assistant", "content": "The answer is 20."}
    assert episode.messages[:-1] == stub.requests[2]["messages"]
    assert_typed(episode)
    # every MCP request of the episode names it, so servers can keep per-episode state (workspaces)
    mine = [h for h in mcp.headers_seen if h.get("x-episode-id") == "ep-1"]
    assert mine and all(h["x-task-id"] == "t-1" for h in mine)


async def test_parallel_tool_calls_run_concurrently(stub):
    left_in, right_in = asyncio.Event(), asyncio.Event()

    async def left() -> str:
        """Waits for right."""
        left_in.set()
        await asyncio.wait_for(right_in.wait(), 5)
        return "left saw right"

    async def right() -> str:
        """Waits for left."""
        right_in.set()
        await asyncio.wait_for(left_in.wait(), 5)
        return "right saw left"

    stub.add(reply(tool_calls=[tool_call("left", id="l"), tool_call("right", id="r")]), "done")
    agent = make_agent(stub, tools=[left, right], tool_timeout_s=10)
    episode = await run_episode(agent, "go")
    await agent.aclose()
    results = episode.steps[0].exp_data.state.action_result
    # each tool waited for the other: they can only both succeed if they ran at the same time
    assert [(r.tool_call_id, r.content, r.is_error) for r in results] == [
        ("l", "left saw right", False),
        ("r", "right saw left", False),
    ]
    assert [m["tool_call_id"] for m in stub.requests[1]["messages"][-2:]] == ["l", "r"]


async def test_tool_errors_become_observations(stub, mcp):
    stub.add(
        reply(
            tool_calls=[
                tool_call("explode", {"reason": "testing"}, id="py"),
                tool_call("fail", {"reason": "remote"}, id="remote"),
                tool_call("nonexistent", {}, id="ghost"),
            ]
        ),
        "I could not do it.",
    )
    agent = make_agent(stub, mcp, tools=[explode])
    episode = await run_episode(agent, "try")
    await agent.aclose()
    assert episode.status is EpisodeStatus.SUCCESS
    py, remote, ghost = episode.steps[0].exp_data.state.action_result
    assert py.is_error and "ValueError: exploded because testing" in py.content and "ValueError" in py.error
    assert remote.is_error and remote.server == "calc" and remote.content.startswith("Error:")
    assert ghost.is_error and "no tool named 'nonexistent'" in ghost.content and "add" in ghost.content
    sent = stub.requests[1]["messages"][-3:]
    assert [m["role"] for m in sent] == ["tool"] * 3
    assert [m["content"] for m in sent] == [py.content, remote.content, ghost.content]
    assert_typed(episode)


async def test_tools_that_hang_past_their_timeout(stub, mcp):
    stub.add(
        reply(tool_calls=[tool_call("hang", {}, id="py"), tool_call("sleep", {"seconds": 30}, id="remote")]),
        "gave up waiting",
    )
    agent = make_agent(stub, mcp, tools=[hang], tool_timeout_s=0.5)
    episode = await run_episode(agent, "wait")
    await agent.aclose()
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "gave up waiting"
    py, remote = episode.steps[0].exp_data.state.action_result
    assert py.is_error and "did not answer within 0.5 s" in py.content
    assert remote.is_error and "did not answer within 0.5 s" in remote.content and remote.server == "calc"


async def test_malformed_tool_call_is_answered_not_executed(stub):
    CALLS.clear()
    stub.add(reply(tool_calls=[tool_call("multiply", '{"a": 2, "b": ', id="bad")]), "sorry")
    agent = make_agent(stub, tools=[multiply])
    episode = await run_episode(agent, "2*?")
    await agent.aclose()
    assert CALLS == []  # never executed
    [result] = episode.steps[0].exp_data.state.action_result
    assert result.is_error and result.error.startswith("malformed tool call")
    assert "could not be parsed" in result.content and "JSON" in result.content
    [call] = episode.steps[0].exp_data.actions
    assert call.error is not None and call.arguments == '{"a": 2, "b": '
    tool_message = stub.requests[1]["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "bad", "content": result.content}


async def test_mcp_server_down_mid_episode_is_an_observation(stub):
    server = McpHttpServer(name="calc", token=TOKEN).start()

    def script(request):
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if turn == 0:
            return reply(tool_calls=[tool_call("add", {"a": 1, "b": 1}, id="first")])
        if turn == 1:
            server.stop()  # the tool server dies while the model thinks
            return reply(tool_calls=[tool_call("add", {"a": 2, "b": 2}, id="second")])
        return reply("the tool server is gone; answer unknown")

    stub.set_script(script)
    agent = make_agent(stub, server)
    try:
        episode = await run_episode(agent, "add twice")
    finally:
        server.stop()
        await agent.aclose()
    assert episode.status is EpisodeStatus.SUCCESS
    ok = episode.steps[0].exp_data.state.action_result[0]
    down = episode.steps[1].exp_data.state.action_result[0]
    assert (ok.content, ok.is_error) == ("2", False)
    assert down.is_error and "calc" in down.error and down.server == "calc"
    assert stub.requests[2]["messages"][-1]["content"] == down.content


async def test_wrong_token_at_start_is_loud_and_runs_nothing(stub, mcp):
    agent = Agent(
        "solver",
        conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m", mcp_connect_retries=0),
        mcp_config={"mcpServers": {"calc": mcp.config(token="wrong")}},
    )
    with pytest.raises(MCPConnectionError) as info:
        await run_episode(agent, "anything")
    await agent.aclose()
    assert "'calc'" in str(info.value) and "401" in str(info.value) and mcp.url in str(info.value)
    assert stub.requests == []  # no episode ran without its tools


async def test_llm_endpoint_down_fails_the_episode():
    url = f"http://127.0.0.1:{free_port()}/v1"
    agent = Agent("solver", conf=AgentConfig(llm_base_url=url, llm_model_name="m", llm_retries=1))
    agent.own_llm().backoff_s = 0.01
    episode = await run_episode(agent, "hello?")
    await agent.aclose()
    assert episode.status is EpisodeStatus.FAILED
    assert url in episode.error and "no HTTP response" in episode.error
    assert episode.steps == [] and not episode.trainable and episode.ended_at is not None
    assert_typed(episode)


async def test_llm_failure_mid_episode_keeps_the_steps_so_far(stub):
    stub.add(reply(tool_calls=[tool_call("multiply", {"a": 1, "b": 2})]), reply(status=500, body="engine crashed"))
    agent = make_agent(stub, tools=[multiply])
    episode = await run_episode(agent, "go")
    await agent.aclose()
    assert episode.status is EpisodeStatus.FAILED and "HTTP 500" in episode.error and "engine crashed" in episode.error
    assert len(episode.steps) == 1


async def test_episode_timeout(stub):
    stub.add(reply(tool_calls=[tool_call("multiply", {"a": 1, "b": 2})]), reply("too late", delay_s=10))
    agent = make_agent(stub, tools=[multiply])
    episode = await run_episode(agent, "slow", timeout=2)  # step 1 fits in 2 s on a loaded machine
    await agent.aclose()
    assert episode.status is EpisodeStatus.TIMEOUT
    assert "2 s timeout" in episode.error and episode.final_answer is None
    assert len(episode.steps) == 1 and not episode.trainable


async def test_agent_episode_timeout_setting(stub):
    stub.add(reply("too late", delay_s=3))
    agent = make_agent(stub, episode_timeout_s=0.3)
    episode = await run_episode(agent, "slow")
    await agent.aclose()
    assert episode.status is EpisodeStatus.TIMEOUT


async def test_max_steps_is_a_normal_termination(stub):
    stub.set_script(lambda request: reply(tool_calls=[tool_call("multiply", {"a": 1, "b": 1})]))
    agent = make_agent(stub, tools=[multiply], max_steps=5)
    episode = await run_episode(agent, "loop forever", max_steps=3)
    await agent.aclose()
    assert episode.status is EpisodeStatus.SUCCESS
    assert episode.final_answer is None and episode.metadata["stop"] == "max_steps"
    assert len(episode.steps) == 3 and len(stub.requests) == 3


async def test_length_stop_ends_the_episode(stub):
    stub.add(reply("a very long answer that got cu", finish_reason="length"), "never asked")
    agent = make_agent(stub)
    episode = await run_episode(agent, "talk")
    await agent.aclose()
    assert episode.status is EpisodeStatus.SUCCESS and episode.metadata["stop"] == "length"
    assert episode.final_answer == "a very long answer that got cu"
    assert len(stub.requests) == 1


async def test_cancellation_is_recorded_then_raised(stub):
    stub.add(reply(tool_calls=[tool_call("multiply", {"a": 3, "b": 3})]), reply("never", delay_s=5))
    agent = make_agent(stub, tools=[multiply])
    task = asyncio.ensure_future(run_episode(agent, "cancel me"))
    while len(stub.requests) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as info:
        await task
    await agent.aclose()
    episode = info.value.episode
    assert episode.status is EpisodeStatus.CANCELLED and len(episode.steps) == 1


async def test_sample_task_prompt_and_ids(stub):
    sample = Sample(
        id="gsm-7",
        prompt=[{"role": "system", "content": "dataset system"}, {"role": "user", "content": "What is 6*7?"}],
        ground_truth="42",
    )
    stub.add("42")
    agent = make_agent(stub)
    episode = await run_episode(agent, sample)
    await agent.aclose()
    assert episode.task_id == "gsm-7" and episode.final_answer == "42"
    # the agent's system prompt replaces the sample's: two system blocks break chat templates
    assert stub.requests[0]["messages"] == [
        {"role": "system", "content": "You solve arithmetic with tools."},
        {"role": "user", "content": "What is 6*7?"},
    ]
    bare = Agent("bare", conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m"))
    stub.add("42")
    await run_episode(bare, sample)
    await bare.aclose()
    assert stub.requests[1]["messages"] == sample.prompt


async def test_trained_llm_gets_the_episode_session_and_its_view_is_kept(stub):
    stub.add(reply(tool_calls=[tool_call("multiply", {"a": 6, "b": 7})]), "42")
    llm = SessionRecordingLLM(stub.base_url)
    agent = make_agent(stub, tools=[multiply], temperature=0.2)
    episode = await run_episode(agent, "6*7", llm=llm, sampling=SamplingParams(temperature=1.0, max_tokens=32))
    await llm.aclose()
    assert episode.status is EpisodeStatus.SUCCESS
    assert llm.finished == [episode.id]
    assert episode.training is not None and episode.training.num_turns == 2 and episode.trainable
    # the backend's sampling wins over the agent's
    assert stub.requests[0]["temperature"] == 1.0 and stub.requests[0]["max_tokens"] == 32
    assert stub.requests[0]["model"] == "policy"  # the trained client, not the agent's endpoint
    assert {c["headers"]["X-Session-Id"] for c in stub.calls} == {episode.id}


async def test_failed_episode_drops_the_training_view(stub):
    stub.add(reply(tool_calls=[tool_call("multiply", {"a": 1, "b": 1})]), reply("slow", delay_s=3))
    llm = SessionRecordingLLM(stub.base_url)
    agent = make_agent(stub, tools=[multiply])
    episode = await run_episode(agent, "x", llm=llm, timeout=0.5)
    await llm.aclose()
    assert episode.status is EpisodeStatus.TIMEOUT
    assert llm.finished == [episode.id]  # the session was released...
    assert episode.training is None and not episode.trainable  # ...and nothing of it is trained


async def test_llm_for_an_untrainable_agent_is_a_usage_error(stub):
    agent = Agent("fixed", conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m"), trainable=False)
    with pytest.raises(UsageError, match="no agent of 'fixed' is trainable"):
        await run_episode(agent, "x", llm=SessionRecordingLLM(stub.base_url))


async def test_bad_arguments_are_usage_errors(stub):
    agent = make_agent(stub)
    with pytest.raises(UsageError, match="Sample or a string"):
        await run_episode(agent, 42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="max_steps"):
        await run_episode(agent, "x", max_steps=0)
    with pytest.raises(UsageError, match="Agent or a Swarm"):
        await run_episode("agent", "x")  # type: ignore[arg-type]


async def test_concurrent_episodes_share_one_agent(stub, mcp):
    def script(request):
        question = request["messages"][1]["content"]
        n = int(question.split()[-1])
        if request["messages"][-1]["role"] == "user":
            return reply(tool_calls=[tool_call("add", {"a": n, "b": n})])
        return reply(f"twice {n} is {request['messages'][-1]['content']}")

    stub.set_script(script)
    agent = make_agent(stub, mcp)
    episodes = await asyncio.gather(*(run_episode(agent, f"double {n}") for n in range(6)))
    await agent.aclose()
    assert [e.final_answer for e in episodes] == [f"twice {n} is {2 * n}" for n in range(6)]
    assert len({e.id for e in episodes}) == 6


async def test_runners_run_and_rollout_hook(stub):
    stub.add("hello from run", "hello from the hook")
    agent = make_agent(stub)
    episode = await Runners.run("hi", agent=agent, task_id="r-1")
    assert episode.final_answer == "hello from run" and episode.task_id == "r-1"
    pm = PluginManager(load_entry_points=False)
    sample = Sample(id="s-1", prompt=[{"role": "user", "content": "hi"}])
    pending = pm.hook.rollout(agent=agent, sample=sample, llm=None, context={"episode_id": "ep-h", "max_steps": 2})
    episode = await pending
    await agent.aclose()
    assert (episode.id, episode.task_id, episode.final_answer) == ("ep-h", "s-1", "hello from the hook")
    with pytest.raises(UsageError, match="agent="):
        await Runners.run("hi")


def test_runners_sync_run(stub):
    stub.add("sync answer")
    agent = make_agent(stub)
    episode = Runners.sync_run(input="hi", agent=agent)
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "sync answer"


async def test_sync_run_inside_a_loop_says_what_to_do(stub):
    with pytest.raises(UsageError, match="await Runners.run"):
        Runners.sync_run("hi", agent=make_agent(stub))


async def test_a_refused_server_in_a_swarm_closes_the_others(stub, mcp):
    from aworld_core import Swarm

    good = Agent("good", conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m"), mcp_config={"mcpServers": {"calc": mcp.config()}})
    bad = Agent(
        "bad",
        conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m", mcp_connect_retries=0),
        mcp_config={"mcpServers": {"calc": mcp.config(token="wrong")}},
    )
    with pytest.raises(MCPConnectionError, match="401"):
        await run_episode(Swarm(good, bad), "x")
    await asyncio.sleep(0)
    # no episode-owned session is left open ("mcp-shared:" sessions belong to the loop)
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("mcp:") and not t.done()]
    assert stub.requests == []
