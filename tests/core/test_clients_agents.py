"""The OpenAI Agents SDK, unmodified, against the gateway: its chat-completions model and its
Responses model (its default), ``Runner.run`` and ``Runner.run_streamed`` with strict function
tools; every episode's segments checked against what the engine sampled."""

from __future__ import annotations

import os

import openai
import pytest

from aworld_core.offline import apply_offline_env
from aworld_core.testing import check_segments
from aworld_core.tokens import ScriptedTokenEngine
from support.gateway_clients import ToolPolicy, qwen_llm, scripted_calls, start_gateway

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # its trace exporter posts to the hosted API
apply_offline_env()
agents = pytest.importorskip("agents")

pytest_plugins = ["aworld_core.testing.fixtures"]


@pytest.fixture
def gateway(tiny_tokenizer):
    agents.set_tracing_disabled(True)
    policy = ToolPolicy(tiny_tokenizer, plan=[[("get_weather", {"city": "Paris"})]])
    engine = ScriptedTokenEngine(policy)
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    yield server, engine
    server.stop()


@agents.function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def make_agent(server, session: str, model_class) -> agents.Agent:
    client = openai.AsyncOpenAI(base_url=server.session_base_url(session), api_key="aworld")
    return agents.Agent(
        name="weather",
        instructions="Answer with the tool's help.",
        tools=[get_weather],
        model=model_class(model="tiny-policy", openai_client=client),
    )


@pytest.mark.parametrize("model_class", ["OpenAIChatCompletionsModel", "OpenAIResponsesModel"])
async def test_runner_run(gateway, model_class):
    server, engine = gateway
    agent = make_agent(server, f"run-{model_class}", getattr(agents, model_class))
    result = await agents.Runner.run(agent, "Weather in Paris?")
    assert result.final_output == "The answer is 5."
    outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
    assert outputs and outputs[0].output == "sunny in Paris"
    view = server.gateway.finish_session(f"run-{model_class}")
    assert view.num_segments == 1 and view.num_turns == 2
    check_segments(view, scripted_calls(engine, f"run-{model_class}"))


@pytest.mark.parametrize("model_class", ["OpenAIChatCompletionsModel", "OpenAIResponsesModel"])
async def test_runner_run_streamed(gateway, model_class):
    server, engine = gateway
    session = f"stream-{model_class}"
    agent = make_agent(server, session, getattr(agents, model_class))
    result = agents.Runner.run_streamed(agent, "Weather in Paris?")
    deltas = []
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas.append(event.data.delta)
    assert result.final_output == "The answer is 5." and "".join(deltas) == "The answer is 5."
    assert len(deltas) > 1  # text as it is sampled
    view = server.gateway.finish_session(session)
    assert view.num_segments == 1 and view.num_turns == 2
    check_segments(view, scripted_calls(engine, session))
