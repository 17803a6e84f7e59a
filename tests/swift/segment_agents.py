"""Agents written against the OpenAI API for the swift suite (``agent.openai_agent``)."""

from __future__ import annotations

from typing import Any


def smolagents_agent(sample: Any, **endpoint: Any) -> str | None:
    """Real smolagents (``aworld_core.testing.smolagents_client``) with no ``max_tokens`` per request:
    ms-swift samples every turn with its own ``max_completion_length`` (the turn's response budget)."""
    from aworld_core.testing.smolagents_client import smolagents_agent as run

    return run(sample, max_tokens=None, **endpoint)


def short_smolagents_agent(sample: Any, **endpoint: Any) -> str | None:
    """The same client asking ``max_tokens: 5`` and smolagents' own ``stop`` strings on every call."""
    from aworld_core.testing.smolagents_client import smolagents_agent as run

    return run(sample, max_tokens=5, **endpoint)


ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}


def one_call_agent(sample: Any, *, base_url: str, api_key: str, model: str) -> str | None:
    """One OpenAI-client call asking for one tool call at most (``parallel_tool_calls: false``); its
    answer is the names of the calls it got back (the test checks the episode's record)."""
    import openai

    question = next(m["content"] for m in reversed(list(sample.prompt)) if m.get("role") == "user")
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                           tools=[ADD_TOOL], parallel_tool_calls=False)
    calls = reply.choices[0].message.tool_calls or []
    return ",".join(call.function.name for call in calls) or None


def two_turn_agent(sample: Any, *, base_url: str, api_key: str, model: str) -> str | None:
    """Like :func:`one_call_agent`, then a second call after its calls' results (a continued turn)."""
    import openai

    question = next(m["content"] for m in reversed(list(sample.prompt)) if m.get("role") == "user")
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    reply = client.chat.completions.create(model=model, messages=messages, tools=[ADD_TOOL], parallel_tool_calls=False)
    calls = reply.choices[0].message.tool_calls or []
    messages.append(reply.choices[0].message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": call.id, "content": "5"} for call in calls]
    last = client.chat.completions.create(model=model, messages=messages, tools=[ADD_TOOL], parallel_tool_calls=False)
    return ",".join(call.function.name for call in calls) + "|" + str(len(last.choices[0].message.tool_calls or []))
