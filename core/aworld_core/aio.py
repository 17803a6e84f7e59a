"""asyncio helpers for the episode's hot path."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Sequence
from typing import Any


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (the documented way hooks return async results)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def gather_settled(awaitables: Sequence[Awaitable[Any]]) -> list[Any]:
    """``asyncio.gather(*awaitables, return_exceptions=True)``, without wrapping a single
    awaitable in a task: an episode's one MCP server or one toolset is opened and closed inline
    (each task costs measurable CPU per episode at low concurrency). Exceptions come back as
    results either way; a cancellation of the caller propagates."""
    if len(awaitables) == 1:
        try:
            return [await awaitables[0]]
        except Exception as exc:
            return [exc]
    if not awaitables:
        return []
    return list(await asyncio.gather(*awaitables, return_exceptions=True))
