"""smolagents' ``ToolCallingAgent`` over ``OpenAIServerModel``, unmodified, against the gateway.

smolagents sends its earlier tool calls back as assistant text and the results as user
``Observation:`` messages, so each turn's conversation does not extend the one before: each
rewrite starts a new segment from a fresh render of what it sent, and every turn's sampled tokens
train (before segments, only the first turn did)."""

from __future__ import annotations

import asyncio
import logging
import warnings

import pytest

from aworld_core.offline import apply_offline_env
from aworld_core.testing import check_segments
from aworld_core.tokens import ScriptedTokenEngine
from support.gateway_clients import ToolPolicy, qwen_llm, scripted_calls, start_gateway

apply_offline_env()
smolagents = pytest.importorskip("smolagents")

pytest_plugins = ["aworld_core.testing.fixtures"]


def _get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


_get_weather.__name__ = "get_weather"
with warnings.catch_warnings():  # it warns about pytest's assertion rewriting, taken for a decorator
    warnings.simplefilter("ignore", UserWarning)
    get_weather = smolagents.tool(_get_weather)


async def test_a_tool_calling_agent_trains_every_turn(tiny_tokenizer, caplog):
    policy = ToolPolicy(
        tiny_tokenizer,
        plan=[[("get_weather", {"city": "Paris"})], [("final_answer", {"answer": "sunny"})]],
    )
    engine = ScriptedTokenEngine(policy)
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    try:
        model = smolagents.OpenAIServerModel(
            model_id="tiny-policy", api_base=server.session_base_url("smol"), api_key="aworld"
        )
        agent = smolagents.ToolCallingAgent(tools=[get_weather], model=model, max_steps=4, verbosity_level=0)
        with caplog.at_level(logging.INFO, logger="aworld_core.tokens.llm"):
            answer = await asyncio.to_thread(agent.run, "Weather in Paris?")
        assert answer == "sunny"
        calls = scripted_calls(engine, "smol")
        view = server.gateway.finish_session("smol")
        assert len(calls) == 2 and view.num_turns + sum(s.num_turns for s in view.later_segments) == 2
        held = check_segments(view, calls)  # every call's sampled tokens are in a segment, exactly
        assert sorted(i for seg in held for i in seg) == [0, 1]
        assert view.num_segments == 2 and view.later_segments[0].start == "rewrite"
        assert any("segment 1 begins" in r.getMessage() for r in caplog.records)  # the rewrite was logged
        # smolagents asks for tool_choice "required": each turn's call opening was forced (mask 0)
        for call in calls:
            assert tiny_tokenizer.decode(call.prompt_ids).endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    finally:
        server.stop()
