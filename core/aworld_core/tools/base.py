"""What every tool looks like to the runtime: a schema the model sees and an async executor.

Three kinds share it: Python callables (``python_tools``), MCP tools (``mcp_client``) and, in a
swarm, other agents. ``name`` is what the model calls; ``real_name`` and ``server`` say what
actually ran, so trajectories record the truth even when names had to be disambiguated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

ToolKind = Literal["python", "mcp", "agent"]


@dataclass
class ToolOutcome:
    """What a tool produced: the observation text, and whether it is an error (with its cause)."""

    content: str
    is_error: bool = False
    error: str | None = None
    # an MCP server's requests for user input during the call, and how they were answered (mcp_elicitation)
    elicitations: list[dict[str, Any]] = field(default_factory=list)


class EndEpisode(Exception):
    """Raised by an executor to end the whole episode (a trained sub-agent ran out of length
    budget); the toolbox lets it through instead of turning it into an observation."""


Executor = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass
class ToolSpec:
    """One tool offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind
    real_name: str = ""
    server: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.real_name:
            self.real_name = self.name

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }
