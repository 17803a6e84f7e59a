"""A long-lived asyncio loop in a daemon thread, for running episodes from synchronous trainers.

Trainers call rollouts from synchronous code (TRL's ``rollout_func``) or from short-lived loops
of their own (ms-swift's ``run_multi_turn`` creates and closes one per call). MCP sessions, the
batching token engine and per-loop HTTP clients must outlive those calls, so episodes run here:
:meth:`LoopThread.run` blocks from synchronous code, :meth:`LoopThread.call` is awaitable from
any other loop. Used by the TRL and ms-swift backends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Run coroutines on a dedicated event loop thread."""

    def __init__(self, name: str = "aworld-episodes"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Any:
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError(f"the episode loop thread '{self._thread.name}' is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Block until ``coro`` finishes on the loop; its exception is raised here."""
        future = self._submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. Ctrl-C in the trainer: stop the episodes too
            raise

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on the loop thread from a coroutine on another loop."""
        if _running_loop() is self.loop:
            return await coro
        return await asyncio.wrap_future(self._submit(coro))

    def close(self) -> None:
        """Cancel what is left, stop the loop and join the thread. Safe to call twice."""
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            from aworld_core.tools.mcp_shared import close_shared_sessions

            await close_shared_sessions()  # a clean close first (each session ends its own task)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout=10)
            except Exception:
                pass  # nothing left to cancel cleanly; stopping the loop is what matters
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
