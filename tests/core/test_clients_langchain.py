"""LangChain (``ChatOpenAI``: ``bind_tools``, ``with_structured_output``) and LangGraph
(``create_react_agent``), unmodified, against the gateway; every episode's segments checked
against what the engine sampled."""

from __future__ import annotations

import openai
import pytest
from pydantic import BaseModel

from aworld_core.offline import apply_offline_env
from aworld_core.testing import check_segments
from aworld_core.tokens import ScriptedTokenEngine
from support.gateway_clients import ToolPolicy, qwen_llm, scripted_calls, start_gateway

apply_offline_env()
langchain_openai = pytest.importorskip("langchain_openai")
from langchain_core.tools import tool  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

pytest_plugins = ["aworld_core.testing.fixtures"]


class Weather(BaseModel):
    """The weather report."""

    city: str
    sky: str


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture
def gateway(tiny_tokenizer):
    policy = ToolPolicy(
        tiny_tokenizer,
        plan=[[("get_weather", {"city": "Paris"})]],
        arguments={"Weather": {"city": "Paris", "sky": "clear"}},
    )
    engine = ScriptedTokenEngine(policy)
    server = start_gateway(qwen_llm(engine, tiny_tokenizer))
    yield server, engine
    server.stop()


def chat(server, session: str, **kwargs):
    return langchain_openai.ChatOpenAI(
        model="tiny-policy", base_url=server.session_base_url(session), api_key="aworld", **kwargs
    )


async def test_bind_tools_and_streaming(gateway):
    server, engine = gateway
    model = chat(server, "lc", streaming=True).bind_tools([get_weather])
    first = await model.ainvoke("Weather in Paris?")
    assert first.tool_calls[0]["name"] == "get_weather" and first.tool_calls[0]["args"] == {"city": "Paris"}
    messages = [("user", "Weather in Paris?"), first,
                {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "sunny"}]
    chunks = [c async for c in model.astream(messages)]
    assert "".join(c.content for c in chunks) == "The answer is 5."
    assert sum(1 for c in chunks if c.content) > 1
    view = server.gateway.finish_session("lc")
    assert view.num_segments == 1 and view.num_turns == 2
    check_segments(view, scripted_calls(engine, "lc"))


async def test_structured_output_by_function_calling_forces_the_call(gateway):
    server, engine = gateway
    model = chat(server, "so").with_structured_output(Weather, method="function_calling")
    report = await model.ainvoke("Weather in Paris?")
    assert report == Weather(city="Paris", sky="clear")
    check_segments(server.gateway.finish_session("so"), scripted_calls(engine, "so"))


async def test_structured_output_by_json_schema_is_refused_where_the_engine_cannot_enforce_it(gateway):
    server, _ = gateway
    model = chat(server, "js").with_structured_output(Weather, method="json_schema")
    with pytest.raises(openai.BadRequestError) as refused:
        await model.ainvoke("Weather in Paris?")
    assert refused.value.status_code == 400 and refused.value.body["param"] == "response_format"


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
async def test_a_langgraph_react_agent(gateway):
    server, engine = gateway
    agent = create_react_agent(chat(server, "lg"), tools=[get_weather])
    result = await agent.ainvoke({"messages": [("user", "Weather in Paris?")]})
    assert result["messages"][-1].content == "The answer is 5."
    assert any(getattr(m, "content", None) == "sunny in Paris" for m in result["messages"])
    view = server.gateway.finish_session("lg")
    assert view.num_segments == 1 and view.num_turns == 2
    check_segments(view, scripted_calls(engine, "lg"))
