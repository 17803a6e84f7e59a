"""Agents for the segment tests (the agent-loop YAML names them ``segment_agents:<function>``)."""

from __future__ import annotations

from typing import Any

from aworld_core import Agent, AgentConfig

SUMMARY_PROMPT = "Summarize what you found."


def lookup(key: str) -> str:
    """Look a key up in a long log."""
    return f"value of {key}: " + "lorem ipsum dolor sit amet " * 12


def compacting_agent() -> Agent:
    """Calls lookup, then its context passes the budget: it writes a summary (trained), and goes on
    from the summary in a new training segment."""
    conf = AgentConfig(max_steps=4, compaction={"strategy": "summary", "max_context_tokens": 200,
                                                "summary_prompt": SUMMARY_PROMPT, "max_compactions": 1})
    return Agent("reader", system_prompt="Use lookup, then answer.", conf=conf, tools=[lookup])


def smolagents_agent(sample: Any, **endpoint: Any) -> str | None:
    """Real smolagents (``aworld_core.testing.smolagents_client``) with no ``max_tokens`` per request:
    the scripted server writes a whole tool call, which this suite's tiny tokenizer spells in more
    than the kit's 20 tokens."""
    from aworld_core.testing.smolagents_client import smolagents_agent as run

    return run(sample, max_tokens=None, **endpoint)
