"""One MCP session: an official-SDK ``Client`` to one server, owned by its own task.

The SDK's transports run anyio task groups; if a server dies mid-call, the failure tears down
*that* task group, not the episode's task, so the episode sees an error observation instead of
being cancelled. A session is used by one episode (``MCPServerConnection``) or shared by many
(``mcp_shared``).

Per-request state travels in a context variable (``RequestState``): the SDK runs each outgoing
request in the caller's context (its context-carrying streams), so the HTTP hooks here see the
episode's headers (``X-Episode-Id`` / ``X-Task-Id``) and record the HTTP status for *that* call,
even when hundreds of episodes share one session.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aworld_core.tools.mcp_config import MCPServerConfig
from aworld_core.tools.mcp_tool_cache import TOOL_LIST_CACHE, CachedToolList, tool_list_key

logger = logging.getLogger("aworld_core.tools.mcp_client")

_BODY_EXCERPT = 300  # of a body that is not a JSON-RPC error, in messages
_BODY_KEPT = 8000  # a JSON-RPC error's message (an unknown tool's lists the tools there are)
_NO_RETRY_STATUSES = frozenset({400, 401, 403, 404, 405})
_LIST_PAGE_CAP = 100


@dataclass
class RequestState:
    """One tool call's view of the wire: headers to add, and the HTTP status it got."""

    headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None
    body: str = ""
    elicitations: list[dict[str, Any]] = field(default_factory=list)  # the server's requests for user input


REQUEST_STATE: contextvars.ContextVar[RequestState | None] = contextvars.ContextVar(
    "aworld_mcp_request", default=None
)


class StartFailure(Exception):
    def __init__(self, cause: str, retryable: bool):
        super().__init__(cause)
        self.cause = cause
        self.retryable = retryable


class MCPSession:
    """One open SDK client to one server (HTTP, SSE or stdio)."""

    def __init__(
        self,
        name: str,
        config: MCPServerConfig,
        *,
        call_timeout_s: float,
        connect_timeout_s: float,
        headers: dict[str, str] | None = None,
        shared: bool = False,
    ):
        self.name = name
        self.config = config
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        # fixed per-session headers (an episode's own session carries its episode ids here; a
        # shared session carries none: each request adds its caller's, see RequestState)
        self.headers = dict(headers or {})
        self.shared = shared
        self.client: Any = None
        self.tools: list[Any] = []
        self.tools_from_cache = False  # whether ``tools`` came from TOOL_LIST_CACHE
        self.listing: CachedToolList | None = None
        self.dead: str | None = None
        self.session_id_seen = False  # the server handed out an Mcp-Session-Id (stateful)
        self.cache_key = tool_list_key(config)
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self.last_status: int | None = None
        self.last_body = ""
        self._errlog: Any = None
        self._own_listing = False  # our own tools/list in flight (not the SDK re-listing)
        self._relist: asyncio.Future[list[Any]] | None = None
        self.http: Any = None  # the AiohttpTransport under a streamable-HTTP session
        self.client_headers: dict[str, str] = {}  # what its HTTP client sends with every request
        self.direct: Any = None  # mcp_direct.DirectCaller: tools/call without the SDK (shared, stateless)
        self.inflight = 0  # tool calls running on this session
        self.retired = False  # replaced (shared): close when the calls in flight are done
        self.elicitations: list[dict[str, Any]] = []  # asked outside a call of ours (kept for the next)

    @property
    def where(self) -> str:
        return server_where(self.config)

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    @property
    def alive(self) -> bool:
        return self.client is not None and self.dead is None and self._task is not None and not self._task.done()

    @property
    def stateless(self) -> bool:
        """Whether the server spoke the 2026 (stateless) protocol and gave us no session id:
        then nothing on the server ties requests to this session, and episodes may share it."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        version = getattr(getattr(self.client, "session", None), "protocol_version", None)
        return version in MODERN_PROTOCOL_VERSIONS and not self.session_id_seen

    # -- open --------------------------------------------------------------------------------

    async def open(self) -> list[Any]:
        """Connect and get the tool list; ``StartFailure`` says why not and whether to retry."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[Any]] = loop.create_future()
        self._closing = asyncio.Event()
        self.last_status = None
        self.last_body = ""
        # a clean context: a shared session must not carry the first episode's request state
        self._task = loop.create_task(
            self._serve(ready, self._closing),
            name=f"{'mcp-shared' if self.shared else 'mcp'}:{self.name}",
            context=contextvars.Context(),
        )
        try:
            # the SDK's own timeouts cover each request; this covers a server that accepts the
            # connection and then never answers the handshake
            self.tools = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout_s + 5.0)
        except TimeoutError:
            await self.stop()
            raise StartFailure(f"no answer within {self.connect_timeout_s + 5.0:g} s", True) from None
        except BaseException:
            await self.stop()
            raise
        self.dead = None
        if self.http is not None:
            # open: from now on a network error fails its own request, not the session
            self.http.confine_errors = True
        from aworld_core.tools.mcp_direct import DirectCaller

        self.direct = DirectCaller.of(self)
        return self.tools

    async def _serve(self, ready: asyncio.Future[list[Any]], closing: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await self._open_client(stack)
                tools = await self._list_tools(client)
                self.client = client
                ready.set_result(tools)
                await closing.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(StartFailure("connection attempt cancelled", False))
            raise
        except BaseException as exc:
            cause = self.describe(exc)
            if not ready.done():
                ready.set_exception(StartFailure(cause, self.retryable()))
            elif not closing.is_set():
                self.dead = cause
                logger.warning("MCP server '%s' connection lost: %s", self.name, cause)
        finally:
            self.client = None

    async def _open_client(self, stack: AsyncExitStack) -> Any:
        from mcp import Client

        transport = await self._transport(stack)
        # cache=None: the SDK's response cache lives as long as one session, which lists once;
        # the cross-episode cache is ToolListCache
        client = Client(
            transport,
            read_timeout_seconds=self.call_timeout_s,
            cache=None,
            message_handler=self._on_message,
            client_info=client_identity(),
            elicitation_callback=self._on_elicitation,
        )
        return await stack.enter_async_context(client)

    async def _list_tools(self, client: Any) -> list[Any]:
        """The server's tools: from the cache when a fresh listing is there, else listed (and kept)."""
        self.tools_from_cache = False
        self.listing = None
        ttl = self.config.tools_cache_ttl
        version = client.session.protocol_version
        if ttl > 0:
            listing = TOOL_LIST_CACHE.get(self.cache_key, version)
            if listing is not None and listing.install(client.session):
                self.listing = listing
                self.tools_from_cache = True
                return list(listing.tools)
        return await self._list_and_keep(client)

    async def _list_and_keep(self, client: Any) -> list[Any]:
        self._own_listing = True
        try:
            tools, complete, hint_ms = await list_all_tools(client)
        finally:
            self._own_listing = False
        ttl = self.config.tools_cache_ttl
        if ttl > 0 and complete:
            if hint_ms:
                ttl = min(ttl, hint_ms / 1000.0)
            self.listing = TOOL_LIST_CACHE.put(self.cache_key, client.session.protocol_version, tools, ttl)
        else:
            self.listing = None
        return tools

    async def current_tools(self) -> list[Any]:
        """A shared session's tool list for a new episode: re-listed (once, however many episodes
        ask at the same moment) when the cached listing expired or was dropped."""
        client = self.client
        if client is None:
            raise StartFailure(self.dead or "the connection is closed", True)
        if self.config.tools_cache_ttl > 0:
            listing = TOOL_LIST_CACHE.get(self.cache_key, client.session.protocol_version)
            if listing is not None:
                self.listing = listing
                self.tools = list(listing.tools)
                return self.tools
        if self._relist is None or self.config.tools_cache_ttl == 0:
            self._relist = asyncio.ensure_future(self._list_and_keep(client))
            relist = self._relist
            try:
                self.tools = await asyncio.shield(relist)
            finally:
                if self._relist is relist:
                    self._relist = None
            return self.tools
        return list(await asyncio.shield(self._relist))

    async def _on_elicitation(self, context: Any, params: Any) -> Any:
        """A server asks the user for input (``elicitation/create``): answered by the server's
        ``elicitation`` policy, never by a person (a training job has none), and recorded with
        the tool call it came in (``RequestState.elicitations``), else with the session's next call."""
        from aworld_core.tools.mcp_elicitation import answer_elicitation

        result, record = answer_elicitation(self.config.elicitation, params)
        record["server"] = self.name
        state = REQUEST_STATE.get()
        (state.elicitations if state is not None else self.elicitations).append(record)
        logger.info(
            "MCP server '%s' asked for user input (%s): answered %s by policy '%s'",
            self.name, record.get("mode"), result.action, self.config.elicitation,
        )  # fmt: skip
        return result

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            TOOL_LIST_CACHE.invalidate(self.cache_key)
        await asyncio.sleep(0)  # what the SDK's default handler does: let other tasks run

    # -- transport ---------------------------------------------------------------------------

    async def _transport(self, stack: AsyncExitStack) -> Any:
        cfg = self.config
        if cfg.type == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            if self._errlog is None:  # kept open past the session so a crash's stderr can be quoted
                self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8")
            params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args), env=cfg.env, cwd=cfg.cwd)
            return stdio_client(params, errlog=self._errlog)
        import httpx2

        hooks = {"request": [self._stamp_request], "response": [self._record_response]}
        timeout = httpx2.Timeout(cfg.timeout, read=cfg.sse_read_timeout)
        verify = ssl_context() if cfg.type == "sse" or (cfg.url or "").startswith("https://") else None
        headers = {**cfg.headers, **self.headers}
        oauth = None
        if cfg.auth is not None:
            from aworld_core.tools.mcp_auth import oauth_provider

            oauth = oauth_provider(cfg.url or "", cfg.auth, verify)
        if cfg.type == "sse":
            from mcp.client.sse import sse_client

            def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
                return httpx2.AsyncClient(
                    headers=headers, timeout=timeout, auth=auth or oauth, event_hooks=hooks, verify=verify
                )

            return sse_client(
                cfg.url or "",
                headers=headers,
                timeout=cfg.timeout,
                sse_read_timeout=cfg.sse_read_timeout,
                httpx_client_factory=factory,
            )
        from mcp.client.streamable_http import streamable_http_client

        from aworld_core.tools.aiohttp_transport import AiohttpTransport

        # the SDK's protocol code over aiohttp's connection pool (see aiohttp_transport: httpx2's
        # pool costs CPU per pooled connection on every request); no cap on connections, as a
        # shared session carries every episode's calls at once
        https = (cfg.url or "").startswith("https://")
        transport = self.http = AiohttpTransport(ssl_context=verify if https else None)
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks, transport=transport, auth=oauth)
        )
        self.client_headers = dict(http.headers)
        return streamable_http_client(cfg.url or "", http_client=http)

    async def _stamp_request(self, request: Any) -> None:
        state = REQUEST_STATE.get()
        if state is not None and state.headers:
            request.headers.update(state.headers)

    async def _record_response(self, response: Any) -> None:
        if "x-aworld-transport-error" in response.headers:
            return  # no server answered: the network error is the JSON-RPC error's message
        self.last_status = response.status_code
        state = REQUEST_STATE.get()
        if state is not None:
            state.status = response.status_code
        if "mcp-session-id" in response.headers:
            self.session_id_seen = True
        if (
            self.client is not None
            and not self._own_listing
            and response.request.headers.get("mcp-method") == "tools/list"
        ):
            # the SDK re-listed mid-session: a tools/call met a changed schema (HEADER_MISMATCH)
            # or a tool it had not seen listed; later episodes must list afresh too
            TOOL_LIST_CACHE.invalidate(self.cache_key)
        if response.status_code >= 400:
            try:
                await response.aread()
                body = response.text[:_BODY_KEPT]
            except Exception:  # the body is only for the error message
                body = ""
            self.last_body = body
            if state is not None:
                state.body = body

    # -- errors ------------------------------------------------------------------------------

    def retryable(self) -> bool:
        return self.last_status is None or self.last_status not in _NO_RETRY_STATUSES

    def describe(self, exc: BaseException, state: RequestState | None = None) -> str:
        """What went wrong, for a person: the HTTP status (of this call when ``state`` has one)
        with what to check, else the leaf exceptions, else a stdio server's stderr."""
        status, body = (state.status, state.body) if state is not None else (self.last_status, self.last_body)
        if status is not None and status >= 400:
            text = f"HTTP {status}"
            if status in (401, 403) and self.config.auth is not None:
                text += " (the server refused our OAuth access token: check the auth section's credentials and scope)"
            elif status in (401, 403):
                text += " (the server refused our credentials: check the token in the Authorization header / MCP_SERVER_TOKEN)"
            elif status == 404:
                text += " (no MCP endpoint at this URL: check the path, e.g. /mcp)"
            rpc = _jsonrpc_error(body)
            if rpc is not None:  # the 2026 protocol answers a JSON-RPC error with an HTTP status
                return f"{text}: JSON-RPC error {rpc}"
            if body:
                text += f": {body.strip()[:_BODY_EXCERPT]}"
            return text
        parts = [f"{type(leaf).__name__}: {str(leaf) or repr(leaf)}" for leaf in _leaf_exceptions(exc)]
        text = "; ".join(dict.fromkeys(parts)) or type(exc).__name__
        if self.config.type == "stdio" and self._errlog is not None:
            tail = _tail(self._errlog)
            if tail:
                text += f"; server stderr: {tail}"
        return text

    # -- close -------------------------------------------------------------------------------

    def call_done(self) -> None:
        self.inflight -= 1
        if self.retired and self.inflight == 0:
            self._close_soon()

    def retire(self) -> None:
        """Close once the calls in flight are done (a shared session replaced by a new one:
        other episodes' calls on it must not be cut off)."""
        self.retired = True
        if self.inflight == 0:
            self._close_soon()

    def _close_soon(self) -> None:
        task = asyncio.ensure_future(self.aclose(grace_s=0))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    async def aclose(self, grace_s: float = 5.0) -> None:
        if self._closing is not None:
            self._closing.set()
        await self.stop(grace_s=grace_s)
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    async def stop(self, grace_s: float = 0.0) -> None:
        """End the session's task (after ``grace_s`` for a clean close, then by cancelling)."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        if grace_s:
            done, _ = await asyncio.wait({task}, timeout=grace_s)
            if done:
                return
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


@functools.cache
def client_identity() -> Any:
    """What this client calls itself in ``initialize`` / ``server/discover``: ``aworld-core`` and
    its version (left to itself the SDK says ``mcp 0.1.0``, which tells a server's operator nothing)."""
    from mcp_types import Implementation

    from aworld_core import __version__

    return Implementation(name="aworld-core", version=__version__)


def server_where(config: MCPServerConfig) -> str:
    """Where a server is, for messages: its URL, or its stdio command."""
    if config.type == "stdio":
        return f"command {' '.join([config.command or '', *config.args]).strip()!r}"
    return f"{config.type} URL {config.url}"


_CLOSING: set[asyncio.Future[None]] = set()  # retired sessions being closed (kept referenced)


@functools.cache
def ssl_context() -> Any:
    """One TLS context for every MCP HTTP client of the process.

    Each episode session opens its own ``httpx2.AsyncClient``; left to itself, each would build a
    fresh context and load the system CA bundle (about 20 ms of CPU, most of an episode's
    framework cost). A context can be shared by any number of connections, so it is built once
    (with httpx2's own defaults, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured as of the first use).
    """
    import httpx2

    return httpx2.create_ssl_context()


async def list_all_tools(client: Any) -> tuple[list[Any], bool, int]:
    """Every page of the tool list, whether that was all of it, and the server's shortest
    positive ``ttlMs`` hint (0 when none; hints count on the 2026 protocol only)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    modern = client.session.protocol_version in MODERN_PROTOCOL_VERSIONS
    tools: list[Any] = []
    hint_ms = 0
    cursor = None
    for _ in range(_LIST_PAGE_CAP):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if modern and "ttl_ms" in page.model_fields_set and page.ttl_ms > 0:
            hint_ms = page.ttl_ms if not hint_ms else min(hint_ms, page.ttl_ms)
        cursor = page.next_cursor
        if not cursor:
            return tools, True, hint_ms
    return tools, False, hint_ms


def _jsonrpc_error(body: str) -> str | None:
    """``CODE: message`` of a JSON-RPC error response body (the request id, which differs between
    clients, left out); None when the body is not one."""
    import json

    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return None
    return f"{error['code']}: {error.get('message', '')}"


def _leaf_exceptions(exc: BaseException) -> list[BaseException]:
    inner = getattr(exc, "exceptions", None)  # an (anyio) exception group
    if isinstance(inner, (list, tuple)) and inner:
        leaves: list[BaseException] = []
        for item in inner:
            leaves.extend(_leaf_exceptions(item))
        return leaves
    return [exc]


def _tail(stream: Any, limit: int = 500) -> str:
    try:
        stream.flush()
        stream.seek(0)
        text = stream.read()
    except (OSError, ValueError):
        return ""
    return text.strip()[-limit:]
