"""Elicitation (a server asks the user for input) against a real MCP SDK server on loopback, in
both protocol eras the SDK speaks: a 2026 server answers the call with ``input_required`` (the SDK
retries it with our answers), a 2025 session carries the server's own ``elicitation/create``
mid-call. Either way the answer is the server's ``elicitation`` policy (``decline`` by default) and
the request is recorded on the tool call's ``ActionResult.elicitations``; a server that sends its
own request on a 2026 call (``ctx.elicit``) fails with an error that says why and what to use.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.offline import OFFLINE_ENV
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.tools.mcp_client import MCPToolset, close_shared_sessions
from aworld_core.tools.mcp_config import MCPServerConfig
from support.mcp_elicitation_server import ElicitationServer
from support.openai_stub import OpenAIStub, reply, tool_call

SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "mcp_elicitation_server.py"
ASKED = {"message": "What is your name?", "mode": "form", "server": "people"}


async def call(entry: dict, tool: str) -> tuple[str, bool, list[dict], str, bool]:
    """One call of ``tool``: its content, is_error, elicitations, the negotiated protocol version
    and whether the server keeps a session."""
    toolset = MCPToolset({"people": MCPServerConfig.model_validate(entry)})
    try:
        specs = await toolset.open()
        session = toolset.connections["people"].session
        version, stateful = session.client.session.protocol_version, session.session_id_seen
        outcome = await toolset.executor(next(s for s in specs if s.real_name == tool))({})
        return outcome.content, outcome.is_error, outcome.elicitations, version, stateful
    finally:
        await toolset.aclose()
        await close_shared_sessions()


@pytest.mark.parametrize("era", ["2026", "2025"])
async def test_an_agent_declines_by_default_and_the_request_is_on_its_action_result(era):
    with ElicitationServer(era=era) as server, OpenAIStub() as stub:
        stub.add(reply(tool_calls=[tool_call("ask", {}, id="c1")]), reply("Nobody answered."))
        agent = Agent(
            "solver",
            system_prompt="Use the tools.",
            conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m", llm_retries=0),
            mcp_config={"mcpServers": {"people": {"type": "streamable-http", "url": server.url, "timeout": 10}}},
        )
        episode = await run_episode(agent, "Who is there?")
        await agent.aclose()
        await close_shared_sessions()
    assert episode.status is EpisodeStatus.SUCCESS, episode.error
    [result] = episode.steps[0].exp_data.state.action_result
    assert (result.tool_name, result.content, result.is_error) == ("ask", "decline", False)
    [asked] = result.elicitations
    assert asked == {**ASKED, "policy": "decline", "action": "decline", "requested_schema": asked["requested_schema"]}
    assert set(asked["requested_schema"]["properties"]) == {"name", "age"}


async def test_the_eras_are_what_the_tests_say():
    """2026 server: discover, stateless; 2025 server: the initialize handshake and a session id."""
    with ElicitationServer(era="2026") as server:
        *_, version, stateful = await call({"url": server.url, "timeout": 10}, "ask")
        assert (version.startswith("2026"), stateful) == (True, False)
    with ElicitationServer(era="2025") as server:
        *_, version, stateful = await call({"url": server.url, "timeout": 10}, "ask")
        assert (version.startswith("2025"), stateful) == (True, True)


@pytest.mark.parametrize("session", ["episode", "shared"])
@pytest.mark.parametrize(("policy", "answer"), [("accept_defaults", "accept: anonymous"), ("cancel", "cancel")])
async def test_the_policy_answers_a_2026_input_required_call(session, policy, answer):
    with ElicitationServer(era="2026") as server:
        entry = {"url": server.url, "timeout": 10, "session": session, "elicitation": policy}
        content, is_error, asked, *_ = await call(entry, "ask")
    assert (content, is_error) == (answer, False)
    assert [(a["policy"], a["action"]) for a in asked] == [(policy, answer.split(":")[0])]


@pytest.mark.parametrize("tool", ["ask", "ask_directly"])
async def test_a_2025_server_asks_over_its_session_and_is_declined(tool):
    with ElicitationServer(era="2025") as server:
        content, is_error, asked, *_ = await call({"url": server.url, "timeout": 10}, tool)
    assert (content, is_error) == ("decline", False)
    assert [{k: a[k] for k in ASKED} | {"action": a["action"]} for a in asked] == [{**ASKED, "action": "decline"}]


async def test_a_server_sending_its_own_request_on_a_2026_call_is_a_clear_error_naming_the_fix():
    with ElicitationServer(era="2026") as server:
        content, is_error, asked, *_ = await call({"url": server.url, "timeout": 10}, "ask_directly")
    assert is_error and asked == []
    assert "no back-channel" in content and "input_required" in content and "Resolve(" in content


async def test_stdio_server_is_declined_by_default():
    entry = {"type": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT)], "env": dict(OFFLINE_ENV)}
    content, is_error, asked, *_ = await call(entry, "ask")
    assert (content, is_error) == ("decline", False)
    assert [(a["server"], a["action"]) for a in asked] == [("people", "decline")]
