"""A call the shared gateway failed fails the episode on every path that collects a session's view,
not only the OpenAI-API agent's (test_openai_agent.py): the runtime's ``finish_sessions`` (a core
``Agent`` whose tool calls the gateway with the episode's ``X-Session-Id``) and the worker kit (a
rollout plugin that drives the gateway over HTTP, the seed's style, and leaves the view to the kit).
Each swallows the ``502``; the episode is ``FAILED`` with the gateway's message and
``metadata.gateway_failures``, has no view, and counts in its group as any failed episode."""

from __future__ import annotations

from typing import Any

import pytest

from aworld_core.agents import Agent, AgentConfig
from aworld_core.errors import LLMError
from aworld_core.gateway import Gateway, GatewayServer
from aworld_core.hookspecs import hookimpl
from aworld_core.llm.openai_http import OpenAICompatibleLLM
from aworld_core.plugins import PluginManager
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import Episode, EpisodeStatus, RolloutContext, Sample
from aworld_core.testing import ScriptedTokenEngine
from aworld_core.tokens import TokenLLM
from aworld_core.worker import EpisodeRunner, GroupPolicy
from aworld_core.worker.policy import is_trainable

pytest_plugins = ["aworld_core.testing.fixtures"]

EPISODE = "ep-seed"
TOOL_CALL = '<tool_call>\n{"name": "ask_policy", "arguments": {"question": "2 + 3?"}}\n</tool_call>'


class _EngineDown(RuntimeError):
    pass


def _ids(tok: Any, text: str) -> list[int]:
    """``text`` as the model writes it, ending its turn (the template's end token)."""
    return [*tok.encode(text, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]


async def _gateway(llm: TokenLLM) -> GatewayServer:
    return await GatewayServer(Gateway(llm)).astart()


# -- the runtime: a core Agent's tool calls the gateway in the episode's session ----------------------


def _asking_agent(base_url: str, retries: int) -> Agent:
    async def ask_policy(question: str) -> str:
        """Ask the trained policy, in this episode's session (a seed-style helper call)."""
        client = OpenAICompatibleLLM(base_url, "tiny", "unused", retries=retries, backoff_s=0.0)
        try:
            answer = await client.chat([{"role": "user", "content": question}], session_id=EPISODE)
            return answer.content or ""
        except LLMError as exc:  # swallowed: the error text is the tool's result
            return f"error: {exc}"
        finally:
            await client.aclose()

    return Agent("seed", system_prompt="Use ask_policy.", tools=[ask_policy], conf=AgentConfig(max_steps=3))


@pytest.mark.parametrize("retries", [0, 1], ids=["swallowed", "retried"])
async def test_a_tool_swallowing_a_502_of_the_episode_session_fails_run_episode(tiny_tokenizer, retries) -> None:
    """The tool's gateway call gets a 502 and returns the error text; the agent answers normally.
    Swallowed: FAILED, no view. Retried by the client with the same request and answered: trains."""
    tok = tiny_tokenizer
    seen = {"calls": 0}

    def script(prompt_ids, sampling, request_id):
        seen["calls"] += 1
        if seen["calls"] == 1:
            return _ids(tok, TOOL_CALL)
        if seen["calls"] == 2:  # the tool's call through the gateway
            raise _EngineDown("the inference server went away")
        return _ids(tok, "It is 5.")

    llm = TokenLLM(ScriptedTokenEngine(script), tok, tool_parser="hermes")
    server = await _gateway(llm)
    try:
        episode = await run_episode(_asking_agent(server.base_url, retries), Sample(
            id="s", prompt=[{"role": "user", "content": "What is 2 + 3?"}]), llm=llm, episode_id=EPISODE)
    finally:
        await server.astop()
    (failure,) = episode.metadata["gateway_failures"]
    assert failure["status"] == 502 and failure["api"] == "chat.completions"
    assert llm.session_ids() == [] and server.gateway.failures(EPISODE) == []  # collected, forgotten
    if retries:
        assert failure["retried"] is True
        assert episode.status is EpisodeStatus.SUCCESS and episode.training is not None
        return
    assert episode.final_answer == "It is 5."  # the agent went on as if nothing failed
    assert episode.status is EpisodeStatus.FAILED and episode.training is None, episode
    assert episode.error.startswith("the gateway failed 1 call(s): first: 502 "), episode.error
    assert "the inference server went away" in episode.error and not failure["retried"]
    assert episode.steps and episode.messages  # recorded


# -- the kit: a rollout plugin drives the gateway over HTTP, the kit collects the view ----------------


class SeedFramework:
    """The seed's way: its own agent loop calls the gateway (``X-Session-Id``: the episode) and,
    like AWorld's runner, turns an LLM error into the answer; it leaves the view to the kit."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    @hookimpl
    def rollout(self, agent, sample, llm, context):
        return self._run(sample, RolloutContext.of(context))

    async def _run(self, sample: Sample, ctx: RolloutContext) -> Episode:
        episode = Episode(id=ctx.episode_id, task_id=sample.id, agent_id="seed")
        client = OpenAICompatibleLLM(self.base_url, "tiny", "unused", retries=0)
        messages = list(sample.prompt)
        try:
            for follow_up in ("Are you sure?", None):
                answer = await client.chat(messages, session_id=ctx.episode_id)
                messages.append(answer.message())
                episode.final_answer = answer.content
                if follow_up:
                    messages.append({"role": "user", "content": follow_up})
        except LLMError as exc:
            episode.final_answer = f"Error: {exc}"
        finally:
            await client.aclose()
        episode.messages = messages
        episode.finish(EpisodeStatus.SUCCESS)
        return episode


@pytest.mark.parametrize("failed_episodes", ["keep_group_neutral", "drop_group"])
async def test_a_plugin_swallowing_a_502_fails_its_episode_in_the_kit(tiny_tokenizer, failed_episodes) -> None:
    """A group of two; the first member to make its second call gets a 502 and swallows it. The
    group keeps both members, the failed one untrained, and the group policy acts as on any failure."""
    tok = tiny_tokenizer
    calls: dict[str, int] = {}
    failed: list[str] = []

    def script(prompt_ids, sampling, request_id):
        calls[request_id] = calls.get(request_id, 0) + 1
        if calls[request_id] == 2 and not failed:
            failed.append(request_id)
            raise _EngineDown("the inference server went away")
        return _ids(tok, "It is 5.")

    llm = TokenLLM(ScriptedTokenEngine(script), tok, tool_parser="hermes")
    server = await _gateway(llm)
    pm = PluginManager(load_entry_points=False)
    pm.register(SeedFramework(server.base_url), name="seed_framework")
    sample = Sample(id="s", prompt=[{"role": "user", "content": "What is 2 + 3?"}])
    try:
        runner = EpisodeRunner(Agent("seed"), llm, manager=pm, policy=GroupPolicy(failed_episodes))
        group = await runner.run_group(sample, 2)
    finally:
        await server.astop()
    assert len(group.episodes) == 2  # never silently shrunk
    by_id = {e.id: e for e in group.episodes}
    bad = by_id[failed[0]]
    assert bad.status is EpisodeStatus.FAILED and bad.training is None
    assert bad.error.startswith("the gateway failed 1 call(s): first: 502 "), bad.error
    assert [f["status"] for f in bad.metadata["gateway_failures"]] == [502]
    (good,) = [e for e in group.episodes if e.id != failed[0]]
    assert good.status is EpisodeStatus.SUCCESS and good.training is not None
    assert "gateway_failures" not in good.metadata
    assert llm.session_ids() == [] and server.gateway.failures(bad.id) == []
    if failed_episodes == "drop_group":
        assert group.dropped and not any(is_trainable(e, needs_reward=False) for e in group.episodes)
    else:
        assert group.dropped is None
        assert [is_trainable(e, needs_reward=False) for e in group.episodes] == [e is good for e in group.episodes]
