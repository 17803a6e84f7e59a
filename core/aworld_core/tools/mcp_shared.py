"""MCP sessions shared by the episodes of one event loop (``SHARED_SESSIONS``).

Why: opening a session per episode (transport, ``server/discover``, close) costs the MCP SDK
~5 ms of CPU, more than all the rest of an episode's framework work, and at hundreds of
concurrent episodes those handshakes arrive as one burst. A server that speaks the 2026 MCP
protocol keeps no session state (no ``Mcp-Session-Id``; every request stands alone), so one
session per server can carry every episode's calls; each request still carries its episode's
``X-Episode-Id`` / ``X-Task-Id`` headers (``mcp_session.RequestState``), which is what servers
such as the GAIA environment key their per-episode workspaces on.

The server config's ``session`` decides: ``auto`` (default) shares when the server turns out
stateless and gives each episode its own session otherwise (handshake-era servers, SSE, stdio);
``episode`` never shares; ``shared`` shares whatever the server speaks (its per-session state is
then common to all episodes).

What an episode gives up by sharing: its own connection check at start. The first episode
checks (a refused token or unreachable server is a loud ``MCPConnectionError`` then); later a
lost session is noticed at a call, that call becomes an error observation, and the next
episode to start reconnects (loudly failing if it cannot). A call refused with 401/403 marks
the session dead for the same reason.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aworld_core.tools.mcp_session import MCPSession
from aworld_core.tools.mcp_tool_cache import tool_list_key

logger = logging.getLogger("aworld_core.tools.mcp_client")

OpenSession = Callable[[bool], Awaitable[MCPSession]]
T = TypeVar("T")


class SharedSessions:
    """Shared sessions per event loop, keyed on the server (URL and static headers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # several loops (threads) may look up their pools at once
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, _Entry]] = (
            weakref.WeakKeyDictionary()
        )
        self._stateful: set[Any] = set()  # servers an ``auto`` session found stateful
        self.opened = 0  # sessions opened for sharing (for tests and benchmarks)

    @staticmethod
    def key(session_config: Any) -> Any:
        cfg = session_config
        return (tool_list_key(cfg), cfg.timeout, cfg.sse_read_timeout)

    def _pool(self) -> dict[Any, _Entry]:
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.get(loop)
            if pool is None:
                pool = self._pools[loop] = {}
            return pool

    async def acquire(self, config: Any, open_session: OpenSession) -> tuple[MCPSession, bool] | None:
        """A session for one episode: ``(session, True)`` shared, ``(session, False)`` the
        episode's own (an ``auto`` server that turned out stateful), or None (open your own).

        ``open_session(shared)`` connects with the caller's retry policy and raises
        ``StartFailure`` when it cannot; the error reaches every episode waiting on it. If the
        opening episode is cancelled, the next waiting one opens instead.
        """
        if config.type != "streamable-http" or config.session == "episode":
            return None
        key = self.key(config)
        pool = self._pool()
        while True:
            if config.session == "auto" and key in self._stateful:
                return None
            entry = pool.get(key)
            if entry is None:
                break
            if entry.opening is not None:
                try:
                    await asyncio.shield(entry.opening)
                except Exception:
                    if pool.get(key) is entry:
                        del pool[key]
                    raise
                continue
            if entry.session.alive:
                return entry.session, True
            del pool[key]  # lost: a new one is opened below; the old one closes when idle
            entry.session.retire()
        entry = _Entry(asyncio.get_running_loop().create_future())
        pool[key] = entry
        try:
            session = await open_session(True)
        except Exception as exc:
            del pool[key]
            assert entry.opening is not None
            entry.opening.set_exception(exc)  # every waiting episode fails with the same cause
            entry.opening.exception()  # retrieved: waiters re-raise it, none is needed
            raise
        except BaseException:  # the opening episode was cancelled: a waiting one opens instead
            del pool[key]
            assert entry.opening is not None
            entry.opening.set_result(None)
            raise
        if config.session == "auto" and not session.stateless:
            # a handshake-era server may keep state per session: this one stays the opener's own
            self._stateful.add(key)
            del pool[key]
            assert entry.opening is not None
            entry.opening.set_result(None)
            session.shared = False
            if session.task is not None:
                session.task.set_name(f"mcp:{session.name}")
            logger.info(
                "MCP server '%s' (%s) keeps per-session state (protocol %s); each episode opens its own session",
                session.name,
                session.where,
                getattr(session.client.session, "protocol_version", "?"),
            )
            return session, False
        self.opened += 1
        entry.session = session
        assert entry.opening is not None
        entry.opening.set_result(None)
        entry.opening = None
        return session, True

    def mark_dead(self, session: MCPSession, cause: str) -> None:
        """A call found the shared session unusable: the next episode to start reconnects."""
        if session.dead is None:
            session.dead = cause
            logger.warning("MCP server '%s': shared session dropped (%s); the next episode reconnects", session.name, cause)

    async def aclose(self) -> None:
        """Close the running loop's shared sessions (before the loop ends)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._lock:
            pool = self._pools.pop(loop, None)
        if not pool:
            return
        sessions = [e.session for e in pool.values() if e.opening is None and e.session is not None]
        await asyncio.gather(*(s.aclose() for s in sessions), return_exceptions=True)

    def forget(self) -> None:
        """Drop what was learnt about servers (tests): which were stateful, the open count."""
        self._stateful.clear()
        self.opened = 0


class _Entry:
    def __init__(self, opening: asyncio.Future[None]):
        self.opening: asyncio.Future[None] | None = opening
        self.session: MCPSession = None  # type: ignore[assignment]


SHARED_SESSIONS = SharedSessions()


async def close_shared_sessions() -> None:
    """Close this event loop's shared MCP sessions; call it before a loop you own ends."""
    await SHARED_SESSIONS.aclose()


async def closing_shared_sessions(awaitable: Awaitable[T], *owners: Any) -> T:
    """``await awaitable``, then close ``owners`` (agents: their own LLM clients) and the loop's
    shared MCP sessions: for ``asyncio.run(...)`` of a loop that ends with it."""
    try:
        return await awaitable
    finally:
        for owner in owners:
            await owner.aclose()
        await close_shared_sessions()
