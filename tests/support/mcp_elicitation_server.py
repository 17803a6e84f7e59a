"""An MCP SDK server whose tools ask the user for input, in both ways the SDK offers, on loopback.

``ask`` asks through a ``Resolve`` parameter (the SDK sends ``elicitation/create`` mid-call on a
2025 session and answers a 2026 call with ``input_required``); ``ask_directly`` calls
``ctx.elicit`` (a server-initiated request: only a 2025 session has a channel for it).
``ElicitationServer(era="2025")`` answers ``server/discover`` as a 2025-era server does (method
not found), so the client falls back to the ``initialize`` handshake and a stateful session; the
rest is the SDK's own streamable-HTTP app. Run as a script, it serves stdio.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Annotated, Any

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel


class Name(BaseModel):
    name: str = "anonymous"
    age: int | None = None


def _ask_name(ctx: Context) -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def build_server() -> MCPServer:
    server = MCPServer("elicitation-tools")

    @server.tool()
    async def ask(answer: Annotated[ElicitationResult[Name], Resolve(_ask_name)]) -> str:
        """Greets whoever answers."""
        return f"{answer.action}: {answer.data.name}" if answer.action == "accept" else answer.action

    @server.tool()
    async def ask_directly(ctx: Context) -> str:
        """Greets whoever answers (asked with ctx.elicit)."""
        answer = await ctx.elicit("What is your name?", Name)
        return f"{answer.action}: {answer.data.name}" if answer.action == "accept" else answer.action

    return server


class ElicitationServer:
    """``build_server()``'s streamable-HTTP app served by uvicorn from a thread."""

    def __init__(self, era: str = "2026"):
        if era not in ("2025", "2026"):
            raise ValueError(f"era must be '2025' or '2026', not {era!r}")
        self.era = era
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def __enter__(self) -> ElicitationServer:
        import uvicorn

        from aworld_core.testing.mcp_server import _bound_socket

        app = build_server().streamable_http_app()
        if self.era == "2025":
            app = _refusing_discover(app)
        sock = _bound_socket("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the elicitation MCP server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None


def _refusing_discover(app: Any) -> Any:
    """``app``, except that ``server/discover`` is a method it does not know (as on a 2025 server)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") == "server/discover":
            error = {"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": -32601, "message": "Method not found"}}
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return None
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapped


if __name__ == "__main__":
    build_server().run("stdio")
