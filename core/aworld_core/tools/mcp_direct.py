"""``tools/call`` as one HTTP POST on a shared session to a stateless (2026) MCP server.

Why: through the SDK one tool call costs ~2.8 ms of CPU on a 2-core machine (anyio memory
streams, a task per POST, pydantic models both ways, the response routed back through the
session's task group): three times the HTTP request itself (``benchmarks/rollout_overhead.py``).
On the stateless 2026 protocol a ``tools/call`` is a self-contained POST, so the episode sends
it itself, on the aiohttp connection pool the session already uses, and reads the answer.

The request is the SDK's own: the SDK session's request stamp writes the ``_meta`` (protocol
version, client info, capabilities) and the headers (``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name``, ``Mcp-Param-*`` mirrored arguments); the HTTP client's headers (the server's
``headers`` from the config) and the episode's ``X-Episode-Id`` / ``X-Task-Id`` come on top, as
on the SDK path. The answer is checked as the SDK checks it: JSON-RPC errors, HTTP errors, the
output schema (the SDK session's ``validate_tool_result``).

What only the SDK handles goes to the SDK (``HandOff``), before any tool ran or where the
protocol resends anyway: ``HEADER_MISMATCH`` (the SDK re-lists the tool and resends) and an
``input_required`` result (the SDK drives the input rounds). A server answering with an SSE
stream (progress, logs) is read here; a stream that ends without the answer fails the call
(no resumption: set ``direct_calls: false`` for a server that relies on it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aworld_core.tools.mcp_session import MCPSession, RequestState

_BODY_KEPT = 8000  # as mcp_session keeps it: a JSON-RPC error whole, other bodies cut when shown


class HandOff(Exception):
    """This call is for the SDK to make (see the module docstring)."""


class DirectCaller:
    """Sends one shared stateless session's ``tools/call`` requests itself."""

    def __init__(self, session: MCPSession, stamp: Any, headers: dict[str, str]):
        self.session = session
        self._stamp = stamp
        self._headers = headers
        self._ids = itertools.count(1)

    @classmethod
    def of(cls, session: MCPSession) -> DirectCaller | None:
        """A caller for ``session``, or None when its calls must go through the SDK: not shared,
        not streamable HTTP, not stateless, ``direct_calls: false``, OAuth, or an SDK without the
        request stamp this relies on (then every call takes the SDK path, as before)."""
        stamp = getattr(getattr(session.client, "session", None), "_stamp", None)
        if (
            not session.shared
            or not session.config.direct_calls
            or session.config.auth is not None  # OAuth: the SDK's auth flow owns the Authorization header
            or session.config.type != "streamable-http"
            or session.http is None
            or not session.stateless
            or not callable(stamp)
        ):
            return None
        headers = {**session.client_headers, "accept": "application/json, text/event-stream",
                   "content-type": "application/json"}  # fmt: skip
        return cls(session, stamp, headers)

    async def call(self, tool: str, arguments: dict[str, Any], state: RequestState, timeout: float) -> dict[str, Any]:
        """The ``CallToolResult`` (as JSON) of one call.

        Raises ``HandOff``; ``TimeoutError``; ``MCPError`` for a JSON-RPC error, an HTTP error
        (``state.status`` / ``state.body`` say which) or a network error (``CONNECTION_CLOSED``,
        naming it); ``RuntimeError`` for an answer that breaks the protocol or the output schema.
        """
        import aiohttp
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        from aworld_core.tools.aiohttp_transport import map_error

        request_id = next(self._ids)
        data: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                "params": {"name": tool, "arguments": arguments}}  # fmt: skip
        options: dict[str, Any] = {}
        self._stamp(data, options)
        headers = {**self._headers, **options.get("headers", {}), **state.headers}
        body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        http = self.session.http
        assert http is not None
        url = self.session.config.url or ""
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(timeout):
                async with http.aiohttp_session().post(
                    url,
                    data=body,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.session.config.timeout),
                    allow_redirects=False,
                    compress=False,
                    **http.proxy_for(url),
                ) as response:
                    result = await self._answer(response, tool, request_id, state)
        except TimeoutError:
            if asyncio.get_running_loop().time() - started >= timeout:
                raise
            raise MCPError(CONNECTION_CLOSED, "ConnectTimeout: connecting took too long") from None
        except (aiohttp.ClientError, OSError) as exc:
            mapped = map_error(exc, connecting=False)
            raise MCPError(CONNECTION_CLOSED, f"{type(mapped).__name__}: {mapped}") from exc
        if not result.get("isError"):
            await self.validate(tool, result)
        return result

    async def _answer(self, response: Any, tool: str, request_id: int, state: RequestState) -> dict[str, Any]:
        from mcp.shared.exceptions import MCPError
        from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND

        session = self.session
        state.status = session.last_status = response.status
        if "mcp-session-id" in response.headers:
            session.session_id_seen = True  # the server now keeps sessions: later episodes open their own
        if response.status >= 400:
            raw = await response.read()
            state.body = session.last_body = raw[:_BODY_KEPT].decode("utf-8", "replace")
            if response.content_type == "application/json":
                try:
                    message = json.loads(raw)
                except ValueError:
                    message = None
                if isinstance(message, dict) and isinstance(message.get("error"), dict):
                    return self._result(message, tool, request_id)  # raises the JSON-RPC error
            if response.status == 404:
                raise MCPError(METHOD_NOT_FOUND, "Not Found")
            raise MCPError(INTERNAL_ERROR, "Server returned an error response")
        if response.status == 202:
            raise MCPError(INVALID_REQUEST, "server answered a request with 202 Accepted")
        if response.status >= 300:
            raise MCPError(INVALID_REQUEST, f"server redirected the request (HTTP {response.status}); not followed")
        if response.content_type == "application/json":
            return self._result(json.loads(await response.read()), tool, request_id)
        if response.content_type == "text/event-stream":
            async for message in _sse_messages(response):
                if message.get("id") == request_id and ("result" in message or "error" in message):
                    return self._result(message, tool, request_id)
                if "method" in message and "id" in message:
                    raise RuntimeError(
                        f"the server asked the client for {message['method']!r} during the call; aworld-core's "
                        "MCP client answers no server requests"
                    )
                if message.get("method") == "notifications/tools/list_changed":
                    from aworld_core.tools.mcp_tool_cache import TOOL_LIST_CACHE

                    TOOL_LIST_CACHE.invalidate(session.cache_key)
            raise MCPError(INVALID_REQUEST, "SSE stream ended without a response")
        raise MCPError(INVALID_REQUEST, f"Unexpected content type: {response.content_type}")

    def _result(self, message: Any, tool: str, request_id: int) -> dict[str, Any]:
        from mcp.shared.exceptions import MCPError
        from mcp_types import HEADER_MISMATCH, INTERNAL_ERROR

        if not isinstance(message, dict):
            raise RuntimeError(f"the server answered tools/call with {type(message).__name__}, not a JSON-RPC message")
        error = message.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            if code == HEADER_MISMATCH:
                raise HandOff
            raise MCPError(code if isinstance(code, int) else INTERNAL_ERROR, str(error.get("message", "")), error.get("data"))
        result = message.get("result")
        if not isinstance(result, dict):
            raise RuntimeError("the server's answer to tools/call has neither 'result' nor 'error'")
        kind = result.get("resultType", "complete")
        if kind == "input_required":
            raise HandOff
        if kind != "complete":
            raise RuntimeError(f"the server answered tools/call with a {kind!r} result, which this client does not handle")
        content = result.get("content", [])
        if not isinstance(content, list) or not all(isinstance(b, dict) and "type" in b for b in content):
            raise RuntimeError("the server's tools/call result has malformed 'content' (a list of typed blocks)")
        return result

    async def validate(self, tool: str, result: dict[str, Any]) -> None:
        """The output-schema check the SDK makes on a successful result (its own code)."""
        import mcp_types

        fields: dict[str, Any] = {"content": [], "is_error": False}
        if "structuredContent" in result:
            fields["structured_content"] = result["structuredContent"]
        client = self.session.client
        if client is not None:
            await client.session.validate_tool_result(tool, mcp_types.CallToolResult.model_construct(**fields))


async def _sse_messages(response: Any) -> Any:
    """The JSON-RPC messages of an SSE body (``message`` events; ``\\n`` or ``\\r\\n`` lines)."""
    buffer = bytearray()
    data: list[bytes] = []
    event = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                if data and event in (b"", b"message"):
                    yield json.loads(b"\n".join(data))
                data, event = [], b""
                continue
            field, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if field == b"data":
                data.append(value)
            elif field == b"event":
                event = value
        del buffer[:start]
