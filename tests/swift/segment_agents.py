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
