"""The tools of one agent in one episode: names the model sees, and how each call is answered.

Every call ends in an ``ActionResult``; only an LLM failure inside an agent-as-tool (the episode
cannot go on) and cancellation propagate. Malformed calls, unknown names, bad arguments,
timeouts and exceptions all become observations the model reads, with the cause recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any

from aworld_core.errors import LLMError, UsageError
from aworld_core.schemas import ActionResult, ToolCall
from aworld_core.tools.base import EndEpisode, Executor, ToolOutcome, ToolSpec


class Toolbox:
    """Named tools with their executors; ``call`` runs one ``ToolCall`` under a timeout."""

    def __init__(self, entries: Iterable[tuple[ToolSpec, Executor]], *, timeout_s: float = 60.0):
        self.timeout_s = float(timeout_s)
        self._entries: dict[str, tuple[ToolSpec, Executor]] = {}
        for spec, executor in entries:
            if spec.name in self._entries:
                raise UsageError(f"two tools are named '{spec.name}'; tool names must be unique per agent")
            self._entries[spec.name] = (spec, executor)
        self._schemas = [spec.openai_schema() for spec, _ in self._entries.values()]

    @property
    def specs(self) -> list[ToolSpec]:
        return [spec for spec, _ in self._entries.values()]

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas, in a stable order (the same list every step)."""
        return self._schemas

    def __len__(self) -> int:
        return len(self._entries)

    async def call(self, call: ToolCall) -> ActionResult:
        started = time.perf_counter()
        entry = self._entries.get(call.name)
        spec = entry[0] if entry else None
        outcome = await self._outcome(call, entry)
        return ActionResult(
            tool_call_id=call.id,
            tool_name=spec.real_name if spec else call.name,
            server=spec.server if spec else None,
            content=outcome.content,
            is_error=outcome.is_error,
            error=outcome.error,
            duration_s=time.perf_counter() - started,
            elicitations=outcome.elicitations,
        )

    async def _outcome(self, call: ToolCall, entry: tuple[ToolSpec, Executor] | None) -> ToolOutcome:
        if call.error is not None:
            return _error(
                f"your call to tool '{call.name or '?'}' could not be parsed: {call.error}. "
                f"Call a tool with its name and a JSON object of arguments.",
                f"malformed tool call: {call.error}",
            )
        if entry is None:
            available = ", ".join(self._entries) or "none"
            return _error(
                f"there is no tool named '{call.name}'. Available tools: {available}.",
                f"unknown tool '{call.name}'",
            )
        spec, executor = entry
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError as exc:
            return _error(f"the arguments of tool '{call.name}' are not valid JSON ({exc}).", f"invalid JSON arguments: {exc}")
        if not isinstance(arguments, dict):
            return _error(
                f"the arguments of tool '{call.name}' must be a JSON object, not {type(arguments).__name__}.",
                "arguments are not a JSON object",
            )
        # MCP connections and agents apply their own timeouts; this bounds Python tools (and any
        # executor that would hang past its own)
        timeout = self.timeout_s if spec.kind == "python" else None
        try:
            if timeout is None:
                return await executor(arguments)
            return await asyncio.wait_for(executor(arguments), timeout)
        except TimeoutError:
            return _error(f"tool '{call.name}' did not answer within {timeout:g} s.", f"timed out after {timeout:g} s")
        except (LLMError, UsageError, EndEpisode):
            raise
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"
            return _error(f"tool '{call.name}' raised {detail}", f"tool raised {detail}")


def _error(observation: str, cause: str) -> ToolOutcome:
    return ToolOutcome(f"Error: {observation}", is_error=True, error=cause)


def build_toolbox(
    own: list[ToolSpec],
    own_executors: list[Executor],
    mcp_specs: list[ToolSpec],
    mcp_executor: Any,
    *,
    timeout_s: float,
) -> Toolbox:
    """Merge Python/agent tools and MCP tools; clashing MCP names become ``server__tool``."""
    counts: dict[str, int] = {}
    for spec in [*own, *mcp_specs]:
        counts[spec.name] = counts.get(spec.name, 0) + 1
    entries: list[tuple[ToolSpec, Executor]] = list(zip(own, own_executors, strict=True))
    for spec in mcp_specs:
        if counts[spec.name] > 1:
            spec.name = f"{spec.server}__{spec.real_name}"
        entries.append((spec, mcp_executor(spec)))
    return Toolbox(entries, timeout_s=timeout_s)
