"""An ``httpx2`` transport that sends requests with ``aiohttp``: the MCP SDK's HTTP engine.

Why: the MCP SDK speaks HTTP through ``httpx2``, whose connection pool (``httpcore2``) checks
every pooled connection's socket on every request. A session shared by hundreds of concurrent
episodes holds hundreds of connections, and that scan became most of the framework's CPU
(``benchmarks/rollout_overhead.py`` at concurrency 256). ``aiohttp``'s pool hands out a free
connection without scanning. The SDK's protocol code is untouched: only the bytes on the wire
go through aiohttp, and its errors are raised as the ``httpx2`` errors the SDK expects.

Decoding stays with ``httpx2`` (``auto_decompress=False``), redirects too (never followed here).
Imported only when an MCP session opens (it imports ``httpx2`` and ``aiohttp``).

``confine_errors``: the SDK runs each POST in its session's task group, so a network error on one
request (a reset connection) would tear the whole session down, and with it every other
episode's call in flight on a shared session. Once a session is open, its transport answers such
a request with what a server would send for a request it could not serve: a JSON-RPC error
(``CONNECTION_CLOSED``, or ``REQUEST_TIMEOUT``) naming the network error, with status 502 and an
``x-aworld-transport-error`` header. Only that call fails, with a precise cause; the session
goes on. Non-streaming bodies are read here, so an error while reading one is confined too.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2


def map_error(exc: BaseException, *, connecting: bool) -> BaseException:
    """The ``httpx2`` error for an ``aiohttp`` / socket error (the SDK and our messages read these)."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError) or (connecting and isinstance(exc, asyncio.TimeoutError)):
        return httpx2.ConnectTimeout(message)
    if isinstance(exc, (aiohttp.SocketTimeoutError, asyncio.TimeoutError)):
        return httpx2.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx2.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError(message)
    if isinstance(exc, (aiohttp.ClientOSError, OSError)):
        return httpx2.ConnectError(message) if connecting else httpx2.ReadError(message)
    if isinstance(exc, aiohttp.ClientError):
        return httpx2.NetworkError(message)
    return exc


def _error_response(error: BaseException, request: httpx2.Request) -> httpx2.Response:
    """A JSON-RPC error answering ``request`` for a network error (see ``confine_errors``)."""
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    code = REQUEST_TIMEOUT if isinstance(error, httpx2.TimeoutException) else CONNECTION_CLOSED
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": f"{type(error).__name__}: {error}"}}
    return httpx2.Response(
        status_code=502,
        headers=[("content-type", "application/json"), ("x-aworld-transport-error", "1")],
        content=json.dumps(body).encode(),
        request=request,
    )


class _ResponseBody(httpx2.AsyncByteStream):
    """An aiohttp response body as an ``httpx2.AsyncByteStream``."""

    def __init__(self, response: Any):
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except Exception as exc:
            mapped = map_error(exc, connecting=False)
            if mapped is exc:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        # a fully read body gives the connection back to the pool; a partly read one closes it
        self._response.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """``httpx2.AsyncClient(transport=AiohttpTransport(...))``.

    ``limit``: most connections at once (0: no limit, what a shared MCP session needs);
    ``ssl_context``: for https URLs (one shared context: loading CA bundles is costly).
    """

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, limit: int = 0, keepalive_s: float = 4.0):
        self._ssl = ssl_context
        self._limit = limit
        # idle connections are closed before common servers close them (uvicorn: 5 s), so a
        # request is never sent on a connection the server is closing at that moment
        self._keepalive_s = keepalive_s
        self._session: Any = None
        self.confine_errors = False
        self._proxies: dict[str, tuple[Any, Any]] = {}

    def aiohttp_session(self) -> Any:
        """The ``aiohttp.ClientSession`` behind this transport (``mcp_direct`` posts on its pool)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limit, ssl=self._ssl if self._ssl is not None else True, keepalive_timeout=self._keepalive_s
            )
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding")
            )
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeouts.get("connect"), sock_read=timeouts.get("read")
        )
        body = await request.aread()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        response = None
        try:
            response = await self.aiohttp_session().request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                timeout=timeout,
                allow_redirects=False,
                compress=False,
                **self.proxy_for(str(request.url)),
            )
            streaming = response.content_type == "text/event-stream"
            content = None if streaming else await response.read()
        except Exception as exc:
            connecting = response is None and isinstance(
                exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
            )
            mapped = map_error(exc, connecting=connecting)
            if mapped is exc:
                raise
            if self.confine_errors:
                return _error_response(mapped, request)
            raise mapped from exc
        extensions = {
            "http_version": f"HTTP/{response.version.major}.{response.version.minor}".encode(),
            "reason_phrase": (response.reason or "").encode("latin-1", "replace"),
        }
        if content is not None:
            return httpx2.Response(
                status_code=response.status, headers=list(response.raw_headers), content=content, extensions=extensions
            )
        return httpx2.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_ResponseBody(response),
            extensions=extensions,
        )

    def proxy_for(self, url: str) -> dict[str, Any]:
        """``HTTP(S)_PROXY`` / ``NO_PROXY`` for this server, as httpx2 would honour them (it stops
        reading them once given a transport). Looked up once per server: reading the
        environment costs ~70 us, a tenth of a request."""
        found = self._proxies.get(url)
        if found is None:
            from aiohttp.helpers import get_env_proxy_for_url
            from yarl import URL

            try:
                found = get_env_proxy_for_url(URL(url))
            except LookupError:
                found = (None, None)
            self._proxies[url] = found  # a transport serves one server: one URL, in practice
        proxy, auth = found
        return {} if proxy is None else {"proxy": proxy, "proxy_auth": auth}

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
