"""MCP tools through the official SDK: the servers one agent uses in one episode.

Sessions (``mcp_session.MCPSession``): a server that speaks the 2026 (stateless) MCP protocol is
reached through one session shared by all episodes of the event loop (``mcp_shared``); any other
server gets one session per episode. Either way every request carries its episode's
``X-Episode-Id`` / ``X-Task-Id`` headers, which servers such as the GAIA environment key their
per-episode workspaces on, and tool lists are kept across episodes (``mcp_tool_cache``).

Failure policy (the upstream bug this fixes: episodes silently ran without tools):

* at start, a server that refuses us (401/403), cannot be reached, or does not answer is a
  loud ``MCPConnectionError`` naming the server, the URL (or command) and the cause;
* during the episode, a tool error, a timeout or a server that went away becomes the tool's
  observation ("Error: ...") and is recorded in the step's ``ActionResult``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from typing import Any

from aworld_core.aio import gather_settled
from aworld_core.errors import MCPConnectionError
from aworld_core.tools.base import ToolOutcome, ToolSpec
from aworld_core.tools.mcp_config import MCPServerConfig
from aworld_core.tools.mcp_session import REQUEST_STATE, MCPSession, RequestState, StartFailure, server_where
from aworld_core.tools.mcp_shared import SHARED_SESSIONS, close_shared_sessions
from aworld_core.tools.mcp_tool_cache import TOOL_LIST_CACHE, CachedToolList, ToolListCache, tool_list_key

__all__ = [
    "TOOL_LIST_CACHE",
    "CachedToolList",
    "MCPServerConnection",
    "MCPToolset",
    "ToolListCache",
    "close_shared_sessions",
    "content_text",
    "tool_list_key",
]

logger = logging.getLogger(__name__)

_AUTH_STATUSES = (401, 403)


class MCPServerConnection:
    """One server as one episode sees it: a session (its own or a shared one) and the calls."""

    def __init__(
        self,
        name: str,
        config: MCPServerConfig,
        *,
        call_timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
        connect_retries: int = 2,
        extra_headers: dict[str, str] | None = None,
    ):
        self.name = name
        self.config = config
        # per-episode headers (X-Episode-Id, X-Task-Id) so a server can keep per-episode state
        self.extra_headers = dict(extra_headers or {})
        self.call_timeout_s = float(call_timeout_s or config.client_session_timeout_seconds or 60.0)
        self.connect_timeout_s = float(connect_timeout_s or config.timeout)
        self.connect_retries = connect_retries
        self.tools: list[Any] = []
        self.tools_from_cache = False  # whether this episode's tool list was listed by another
        self.session: MCPSession | None = None
        self.shared = False  # whether ``session`` is shared with other episodes

    @property
    def where(self) -> str:
        return server_where(self.config)

    # -- start -------------------------------------------------------------------------------

    async def start(self) -> list[Any]:
        """Connect (or join the shared session) and get the tools; ``MCPConnectionError`` if
        that is impossible."""
        try:
            return await self._attach(self.connect_retries)
        except StartFailure as failure:
            raise MCPConnectionError(
                f"MCP server '{self.name}' ({self.where}) could not be used at episode start: {failure.cause}. "
                "The episode was not run without its tools; fix the server or the agent's mcp_config and try again."
            ) from None

    async def _attach(self, retries: int) -> list[Any]:
        for attempt in range(2):
            acquired = await SHARED_SESSIONS.acquire(self.config, lambda shared: self._open(shared, retries))
            if acquired is None:
                session, shared = await self._open(False, retries), False
            else:
                session, shared = acquired
            self.session, self.shared = session, shared
            if not shared:
                self.tools, self.tools_from_cache = session.tools, session.tools_from_cache
                return self.tools
            try:
                self.tools = await session.current_tools()
            except StartFailure:
                if attempt:
                    raise
                SHARED_SESSIONS.mark_dead(session, "listing its tools failed")
                continue
            except Exception as exc:
                cause = session.describe(exc)
                SHARED_SESSIONS.mark_dead(session, cause)
                if attempt:
                    raise StartFailure(cause, False) from None
                continue
            self.tools_from_cache = True
            return self.tools
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open(self, shared: bool, retries: int) -> MCPSession:
        """A new session, tried ``retries + 1`` times; ``StartFailure`` with the last cause."""
        attempts = retries + 1
        for attempt in range(attempts):
            session = MCPSession(
                self.name,
                self.config,
                call_timeout_s=self.call_timeout_s,
                connect_timeout_s=self.connect_timeout_s,
                headers=None if shared else self.extra_headers,
                shared=shared,
            )
            try:
                await session.open()
                return session
            except StartFailure as failure:
                await session.aclose(grace_s=0)
                if not failure.retryable or attempt == attempts - 1:
                    suffix = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise StartFailure(failure.cause + suffix, False) from None
                await asyncio.sleep(0.25 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float | None = None) -> ToolOutcome:
        """Run one tool. Never raises for a tool or server failure: the outcome says what happened
        (with the server's requests for user input it answered on the way: ``elicitations``)."""
        state = RequestState(headers=self.extra_headers)
        outcome = await self._call(tool, arguments, timeout_s, state)
        session = self.session
        if session is not None and session.elicitations and not self.shared:
            state.elicitations.extend(session.elicitations)
            session.elicitations.clear()
        outcome.elicitations.extend(state.elicitations)
        return outcome

    async def _call(
        self, tool: str, arguments: dict[str, Any], timeout_s: float | None, state: RequestState
    ) -> ToolOutcome:
        timeout = float(timeout_s or self.call_timeout_s)
        session = self.session
        if session is None or not session.alive:
            lost = (session.dead if session is not None else None) or "the connection is closed"
            if session is not None and not self.shared:
                await session.aclose(grace_s=0)
            self.session = None
            try:  # one reconnect attempt: a restarted server is usable again
                await self._attach(0)
            except StartFailure as exc:
                return _failure(f"MCP server '{self.name}' is unavailable ({lost}; reconnecting failed: {exc.cause})")
            session = self.session
            assert session is not None
        if self.shared and session.direct is not None:
            outcome = await self._call_direct(session, tool, arguments, timeout, state)
            if outcome is not None:
                return outcome
        client, task = session.client, session.task
        assert task is not None
        token = REQUEST_STATE.set(state)  # the SDK sends the request in this (copied) context
        try:
            call = asyncio.ensure_future(client.call_tool(tool, arguments, read_timeout_seconds=timeout))
        finally:
            REQUEST_STATE.reset(token)
        started = time.perf_counter()
        session.inflight += 1
        try:
            done, _ = await asyncio.wait({call, task}, timeout=timeout + 2.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not call.done():
                call.cancel()
            session.call_done()
        if call in done:
            try:
                result = call.result()
            except Exception as exc:
                return await self._call_failed(session, tool, exc, state, time.perf_counter() - started, timeout)
            outcome = _outcome(result)
            if outcome.is_error:
                if _names_unknown_tool(None, outcome.error or "", tool):
                    TOOL_LIST_CACHE.invalidate(session.cache_key)
            elif not self.shared and session.listing is not None:
                session.listing.learn_validators(client.session)
            return outcome
        if task in done:
            if self.shared:
                SHARED_SESSIONS.mark_dead(session, session.dead or "connection closed")
            return _failure(
                f"MCP server '{self.name}' went away while running tool '{tool}': "
                f"{session.dead or 'connection closed'}"
            )
        return _failure(f"tool '{tool}' on MCP server '{self.name}' did not answer within {timeout:g} s")

    async def _call_direct(
        self, session: MCPSession, tool: str, arguments: dict[str, Any], timeout: float, state: RequestState
    ) -> ToolOutcome | None:
        """One call through ``mcp_direct`` (a shared stateless session); None: the SDK makes it."""
        from aworld_core.tools.mcp_direct import HandOff

        started = time.perf_counter()
        session.inflight += 1
        try:
            result = await session.direct.call(tool, arguments, state, timeout)
        except HandOff:
            return None
        except Exception as exc:
            return await self._call_failed(session, tool, exc, state, time.perf_counter() - started, timeout)
        finally:
            session.call_done()
        outcome = _outcome(result)
        if outcome.is_error and _names_unknown_tool(None, outcome.error or "", tool):
            TOOL_LIST_CACHE.invalidate(session.cache_key)
        return outcome

    async def _call_failed(
        self, session: MCPSession, tool: str, exc: Exception, state: RequestState, elapsed: float, timeout: float
    ) -> ToolOutcome:
        if _names_unknown_tool(getattr(exc, "code", None), str(exc), tool):
            TOOL_LIST_CACHE.invalidate(session.cache_key)
        if _is_timeout(exc) or elapsed >= timeout:
            return _failure(f"tool '{tool}' on MCP server '{self.name}' did not answer within {timeout:g} s")
        from aworld_core.tools.mcp_elicitation import explain_no_back_channel

        cause = explain_no_back_channel(session.describe(exc, state if state.status is not None else None))
        closed = _is_connection_closed(exc)
        if closed or state.status in _AUTH_STATUSES:
            # the session is unusable (or no longer let in): the next call / episode reconnects
            # (this call is not retried: whether the tool ran is unknown)
            if self.shared:
                SHARED_SESSIONS.mark_dead(session, cause)
            else:
                session.dead = cause
                await session.stop()
        if closed:
            return _failure(f"MCP server '{self.name}' went away while running tool '{tool}': {cause}")
        return _failure(f"MCP server '{self.name}' failed to run tool '{tool}': {cause}")

    # -- close -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        session, self.session = self.session, None
        if session is not None and not self.shared:
            await session.aclose()


class MCPToolset:
    """The MCP servers one agent uses in one episode: opened together, closed together."""

    def __init__(
        self,
        servers: dict[str, MCPServerConfig],
        *,
        call_timeout_s: float | None = None,
        connect_retries: int = 2,
        headers: dict[str, str] | None = None,
    ):
        self.connections = {
            name: MCPServerConnection(
                name,
                cfg,
                call_timeout_s=cfg.client_session_timeout_seconds or call_timeout_s,
                connect_retries=connect_retries,
                extra_headers=headers,
            )
            for name, cfg in servers.items()
        }

    async def open(self) -> list[ToolSpec]:
        """Connect to every server at once; the first failure closes the rest and is raised."""
        results = await gather_settled([conn.start() for conn in self.connections.values()])
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.aclose()
            for error in errors:
                if isinstance(error, asyncio.CancelledError):
                    raise error
            if len(errors) == 1:
                raise errors[0]
            raise MCPConnectionError("; ".join(str(e) for e in errors))
        specs = []
        for conn in self.connections.values():
            for tool in conn.tools:
                schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
                if conn.tools_from_cache:  # shared with other episodes: each gets its own copy
                    schema = copy.deepcopy(schema)
                specs.append(
                    ToolSpec(
                        name=tool.name,
                        description=tool.description or tool.title or "",
                        parameters=dict(schema) or {"type": "object", "properties": {}},
                        kind="mcp",
                        real_name=tool.name,
                        server=conn.name,
                    )
                )
        return specs

    def executor(self, spec: ToolSpec) -> Any:
        conn = self.connections[spec.server or ""]

        async def run(arguments: dict[str, Any]) -> ToolOutcome:
            return await conn.call(spec.real_name, arguments)

        return run

    def needs_closing(self) -> bool:
        """Whether closing has work to do: a session of this episode's own (a shared one stays)."""
        return any(conn.session is not None and not conn.shared for conn in self.connections.values())

    async def aclose(self) -> None:
        await gather_settled([conn.aclose() for conn in self.connections.values()])




def _names_unknown_tool(code: int | None, text: str, tool: str) -> bool:
    """Whether a failed call says the server does not know the tool (its list changed).

    Only unknown-tool wording counts: a tool's own failures and bad arguments (frequent while
    a model learns) must not throw the cached list away. The spec's protocol error is -32602;
    SDK servers answer ``isError`` with "Unknown tool: NAME".
    """
    import re

    lowered = text.lower()
    if any(words in lowered for words in ("unknown tool", "no such tool", "tool not found")):
        return True
    name = re.escape(tool.lower())
    if re.search(rf"tool\W{{0,3}}{name}\W{{0,3}}(?:was |is |does not exist|not found)", lowered):
        return "not found" in lowered or "does not exist" in lowered
    from mcp_types import INVALID_PARAMS

    return code == INVALID_PARAMS and ("unknown" in lowered or "not found" in lowered) and "tool" in lowered


def _outcome(result: Any) -> ToolOutcome:
    """A ``CallToolResult`` (the SDK's model, or its JSON from ``mcp_direct``) as an outcome."""
    text = content_text(result)
    failed = result.get("isError") if isinstance(result, dict) else getattr(result, "is_error", False)
    if failed:
        return ToolOutcome(f"Error: {text}" if text else "Error: the tool failed", is_error=True, error=text or "tool failed")
    return ToolOutcome(text)


def content_text(result: Any) -> str:
    """An MCP tool result as text: text parts joined; other parts described, never dropped.

    ``result``: the SDK's ``CallToolResult`` or the same result as JSON (``mcp_direct``)."""
    get = _json_field if isinstance(result, dict) else _model_field
    parts: list[str] = []
    for block in get(result, "content", "content") or []:
        kind = get(block, "type", "type")
        if kind == "text":
            parts.append(get(block, "text", "text") or "")
        elif kind in ("image", "audio"):
            data = get(block, "data", "data") or ""
            parts.append(f"[{kind} {get(block, 'mimeType', 'mime_type') or ''}, {len(data)} base64 chars]")
        elif kind == "resource":
            resource = get(block, "resource", "resource") or {}
            text = get(resource, "text", "text")
            parts.append(text if text is not None else f"[resource {get(resource, 'uri', 'uri')}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {get(block, 'uri', 'uri') or ''}]")
        else:
            parts.append(json.dumps(block, ensure_ascii=False) if isinstance(block, dict) else str(block))
    structured = get(result, "structuredContent", "structured_content")
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)


def _json_field(value: Any, key: str, _attribute: str) -> Any:
    return value.get(key) if isinstance(value, dict) else getattr(value, _attribute, None)


def _model_field(value: Any, _key: str, attribute: str) -> Any:
    return getattr(value, attribute, None)


def _failure(message: str) -> ToolOutcome:
    return ToolOutcome(f"Error: {message}", is_error=True, error=message)


def _is_timeout(exc: BaseException) -> bool:
    from mcp_types import REQUEST_TIMEOUT

    return isinstance(exc, TimeoutError) or getattr(exc, "code", None) == REQUEST_TIMEOUT


def _is_connection_closed(exc: BaseException) -> bool:
    from mcp_types import CONNECTION_CLOSED

    return getattr(exc, "code", None) == CONNECTION_CLOSED


