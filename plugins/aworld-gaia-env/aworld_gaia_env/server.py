"""The GAIA environment as one MCP endpoint: routing, workspaces, auth, health.

A low-level SDK ``Server`` (not ``MCPServer``) because what a request may see depends on its
``MCP_SERVERS`` header: ``tools/list`` answers with the tools of the selected servers only, and
``tools/call`` refuses tools of servers the request did not select. Tool results that are errors
(bad arguments, a missing key, a failing site) come back as ``isError`` results with the reason,
so the model can react and the server never goes down with a tool. A tool this connection does not
have (unknown, or of a server it did not select) is the spec's protocol error ``-32602``.

Workspaces are chosen per request: the ``X-Episode-Id`` header when the client sends one, else
the MCP session id (handshake-era clients), else a shared workspace (logged once).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aworld_gaia_env import __version__
from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.live_view import LiveView
from aworld_gaia_env.services import Services
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools import canonical_server, server_catalog
from aworld_gaia_env.tools.base import ToolContext, ToolDef, ToolOutput
from aworld_gaia_env.workspace import SHARED_KEY, Workspace, WorkspaceManager

logger = logging.getLogger("aworld_gaia_env")

SERVERS_HEADERS = ("mcp_servers", "mcp-servers", "x-mcp-servers")
EPISODE_HEADER = "x-episode-id"
TASK_HEADER = "x-gaia-task-id"
GENERIC_TASK_HEADER = "x-task-id"  # what aworld-core's MCP client sends for every episode
SESSION_HEADER = "mcp-session-id"

INSTRUCTIONS = (
    "GAIA tools. Files live in your episode's workspace: pass paths relative to it. Tool names are "
    "<server>__<tool>; a tool that needs an API key or model the deployment lacks says which variable to set."
)


class ConfigurationError(ValueError):
    """The environment was started with settings that cannot work (named in the message)."""


class GaiaEnvironment:
    """The tool catalog, workspaces and shared clients behind one endpoint."""

    def __init__(self, settings: GaiaEnvSettings, token: str):
        if not token:
            raise ConfigurationError("an empty token would let anyone in; pass --token or leave it unset for a random one")
        self.settings = settings
        self.token = token
        catalog = server_catalog()
        given = settings.selected_servers()
        wanted = [canonical_server(name) for name in given]
        unknown = [raw for raw, name in zip(given, wanted, strict=True) if name not in catalog]
        if unknown:
            raise ConfigurationError(
                f"unknown tool server(s) {unknown} in --servers / GAIA_ENV_SERVERS; known servers: {sorted(catalog)} "
                f"(upstream names with '-server', parxiv, googlesearch and browseruse are accepted too)"
            )
        self.servers: dict[str, list[ToolDef]] = {
            name: tools for name, tools in catalog.items() if not wanted or name in wanted
        }
        self.tools: dict[str, ToolDef] = {t.full_name: t for tools in self.servers.values() for t in tools}
        self._tool_entries: dict[str, types.Tool] = {name: self._describe(t) for name, t in self.tools.items()}
        self._list_cache: dict[frozenset[str] | None, types.ListToolsResult] = {}
        try:
            self.workspaces = WorkspaceManager(
                settings.workspace_root,
                quota_mb=settings.workspace_quota_mb,
                uid_base=settings.sandbox_uid_base,
                idle_s=settings.workspace_idle_s,
            )
        except (ValueError, OSError) as exc:
            raise ConfigurationError(str(exc)) from None
        _mask_secrets(settings, token)
        self.services = Services(settings)
        self.live = LiveView(self.services)
        self._warned_shared = False
        self._gaia_files: dict[str, str] | None = None
        self.mcp: Server[Any] = Server(
            "aworld-gaia-env",
            version=__version__,
            instructions=INSTRUCTIONS,
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    # ------------------------------------------------------------------------------------------
    # Catalog
    # ------------------------------------------------------------------------------------------

    def _describe(self, tool: ToolDef) -> types.Tool:
        description = tool.description
        problem = tool.missing(self.settings) if tool.missing else None
        if problem is not None:
            description += f" [not configured on this deployment: {problem}]"
        return types.Tool(name=tool.full_name, description=description, input_schema=tool.input_schema())

    def selection(self, request: Request | None) -> frozenset[str] | None:
        """The servers a request selected with its ``MCP_SERVERS`` header (None: all)."""
        if request is None:
            return None
        raw = None
        for header in SERVERS_HEADERS:
            raw = request.headers.get(header)
            if raw is not None:
                break
        if raw is None:
            return None
        names = frozenset(canonical_server(part) for part in raw.split(",") if part.strip())
        return names or None

    def unknown_servers(self, raw: str) -> list[str]:
        """The names in an ``MCP_SERVERS`` value that this endpoint does not serve (aliases resolved)."""
        names = {p.strip() for p in raw.split(",") if p.strip()}
        return sorted(name for name in names if canonical_server(name) not in self.servers)

    def unknown_servers_message(self, unknown: list[str]) -> str:
        """Which names are wrong, the likely meant ones first, then every name served here."""
        import difflib

        served = sorted(self.servers)
        guesses = {
            name: difflib.get_close_matches(canonical_server(name), served, n=1, cutoff=0.6) for name in unknown
        }
        named = ", ".join(f"{n} (did you mean {g[0]}?)" if g else n for n, g in guesses.items())
        return (f"MCP_SERVERS names unknown server(s): {named}; this endpoint serves: {', '.join(served)} "
                f"(each also as '<name>-server'; parxiv, googlesearch and browseruse are the upstream names of "
                f"arxiv, search and browser)")

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        selection = self.selection(ctx.request)
        cached = self._list_cache.get(selection)
        if cached is None:
            tools = [
                entry
                for name, entry in self._tool_entries.items()
                if selection is None or self.tools[name].server in selection
            ]
            cached = self._list_cache[selection] = types.ListToolsResult(tools=tools)
        return cached

    # ------------------------------------------------------------------------------------------
    # Calls
    # ------------------------------------------------------------------------------------------

    def workspace_for(self, request: Request | None) -> Workspace:
        headers = request.headers if request is not None else {}
        key = headers.get(EPISODE_HEADER) or headers.get(SESSION_HEADER)
        if not key:
            key = SHARED_KEY
            if not self._warned_shared:
                self._warned_shared = True
                logger.warning(
                    "a client sent neither X-Episode-Id nor an MCP session id; its tools use the shared "
                    "workspace '%s' (send X-Episode-Id to give each episode its own)",
                    self.workspaces.root / SHARED_KEY,
                )
        workspace, created = self.workspaces.get(key)
        task_id = headers.get(TASK_HEADER)
        if created and task_id:
            self._place_attachment(workspace, task_id)
        elif created and self.settings.gaia_dir is not None and headers.get(GENERIC_TASK_HEADER):
            # every aworld episode sends its task id; a GAIA task's attachment is placed when known
            self._place_attachment(workspace, headers[GENERIC_TASK_HEADER])
        return workspace

    def _place_attachment(self, workspace: Workspace, task_id: str) -> None:
        if self.settings.gaia_dir is None:
            raise ToolError(
                f"X-Gaia-Task-Id {task_id!r} was sent but this environment has no GAIA_DIR to take its "
                f"attachment from; set GAIA_DIR or upload the file with PUT /workspaces/<episode>/files/<name>"
            )
        if self._gaia_files is None:
            from aworld_gaia_env.data import attachment_index

            self._gaia_files = attachment_index(self.settings.gaia_dir)
        source = self._gaia_files.get(task_id)
        if source is not None:
            from pathlib import Path

            workspace.copy_in(Path(source))

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started = time.perf_counter()
        tool = self.tools.get(params.name)
        episode: str | None = None
        # a tool this connection was not offered: the protocol error the MCP spec lists for
        # unknown tools (-32602), not a tool result (SEP-1303 keeps isError for the tool's own failures)
        if tool is None:
            raise MCPError(INVALID_PARAMS, self._unknown_tool_message(params.name, ctx.request))
        selection = self.selection(ctx.request)
        if selection is not None and tool.server not in selection:
            raise MCPError(
                INVALID_PARAMS,
                f"Unknown tool: {params.name} belongs to server '{tool.server}', which this connection did "
                f"not select (MCP_SERVERS: {', '.join(sorted(selection))})",
            )
        try:
            if tool.missing is not None:
                problem = tool.missing(self.settings)
                if problem is not None:
                    raise problem
            args = tool.parse(params.arguments)
            workspace = self.workspace_for(ctx.request)
            episode = workspace.key
            with workspace.in_use():
                output = await tool.handler(ToolContext(self.settings, workspace, self.services), args)
        except ToolError as exc:
            logger.info("tool %s -> error: %s", params.name, exc)
            self._record(episode, params, started, False, str(exc))
            return types.CallToolResult(content=[types.TextContent(text=str(exc))], is_error=True)
        except Exception as exc:  # a bug in a tool must not take the endpoint down
            logger.exception("tool %s crashed", params.name)
            text = f"{params.name} failed unexpectedly: {type(exc).__name__}: {exc}"
            self._record(episode, params, started, False, text)
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
        logger.debug("tool %s ok in %.1f ms", params.name, (time.perf_counter() - started) * 1e3)
        self._record(episode, params, started, True, output if isinstance(output, str) else output.text)
        return _result(output)

    def _record(self, episode: str | None, params: types.CallToolRequestParams, started: float, ok: bool, text: str) -> None:
        """The call on its episode's live-view timeline."""
        if episode is not None:
            self.live.record(episode, params.name, params.arguments, ok, (time.perf_counter() - started) * 1e3, text)

    def _unknown_tool_message(self, name: str, request: Request | None) -> str:
        selection = self.selection(request)
        available = [n for n, t in self.tools.items() if selection is None or t.server in selection]
        hint = ""
        if "__" not in name:
            matches = [n for n in available if n.endswith("__" + name)]
            if matches:
                hint = f" Did you mean {', '.join(matches)}? Tool names carry their server as a prefix."
        return f"Unknown tool: {name}.{hint} Available tools: {', '.join(available)}"

    # ------------------------------------------------------------------------------------------
    # HTTP app
    # ------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Any) -> AsyncIterator[dict[str, Any]]:
        import anyio

        mode = await anyio.to_thread.run_sync(self.services.sandbox.probe)
        logger.info("sandbox isolation: %s", mode)
        sweeper = asyncio.ensure_future(self._sweep_idle_workspaces())
        try:
            yield {}
        finally:
            sweeper.cancel()
            await self.services.close()
            await anyio.to_thread.run_sync(self.workspaces.close)

    async def _sweep_idle_workspaces(self) -> None:
        """Episodes rarely say they ended: remove workspaces idle for GAIA_ENV_WORKSPACE_IDLE_S."""
        idle = self.workspaces.idle_s
        if idle <= 0:
            return
        while True:
            await asyncio.sleep(min(60.0, max(idle / 4, 0.5)))
            try:
                for key in await asyncio.to_thread(self.workspaces.sweep):
                    await self.services.end_episode(key)
                    self.live.forget(key)
            except Exception:  # the sweep must not stop; a failure is logged and retried
                logger.exception("removing idle workspaces failed")

    async def _health(self, request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "version": __version__,
                "servers": sorted(self.servers),
                "tools": len(self.tools),
                "sandbox": self.services.sandbox.mode,
                "cgroup": _cgroup_state(self.services.sandbox.cgroups),
                "workspace_quota_mb": self.settings.workspace_quota_mb,
            }
        )

    async def _upload(self, request: Request) -> Response:
        """``PUT /workspaces/{episode}/files/{name}``: place a file (a GAIA attachment) in a workspace."""
        limit = self.settings.max_upload_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _json_error(413, f"upload is {declared} bytes, over GAIA_ENV_MAX_UPLOAD_BYTES={limit}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _json_error(413, f"upload exceeds GAIA_ENV_MAX_UPLOAD_BYTES={limit}")
            chunks.append(chunk)
        try:
            workspace, _ = self.workspaces.get(request.path_params["episode"])
            rel = workspace.add_file(request.path_params["name"], b"".join(chunks))
        except ToolError as exc:
            return _json_error(400, str(exc))
        return JSONResponse({"path": rel, "bytes": size}, status_code=201)

    async def _delete_workspace(self, request: Request) -> Response:
        try:
            await self.services.end_episode(request.path_params["episode"])
            self.workspaces.remove(request.path_params["episode"])
            self.live.forget(request.path_params["episode"])
        except ToolError as exc:
            return _json_error(400, str(exc))
        return Response(status_code=204)

    def asgi_app(self) -> Any:
        """The Starlette app behind bearer-token auth: ``/mcp``, ``/health``, workspace uploads."""
        routes = [
            Route("/health", self._health, methods=["GET"]),
            Route("/workspaces/{episode}/files/{name:path}", self._upload, methods=["PUT"]),
            Route("/workspaces/{episode}", self._delete_workspace, methods=["DELETE"]),
            *self.live.routes(),
        ]
        host = self.settings.host
        inner = self.mcp.streamable_http_app(
            streamable_http_path="/mcp",
            json_response=True,
            host=host if host in ("127.0.0.1", "localhost", "::1") else "0.0.0.0",
            custom_starlette_routes=routes,
        )
        return BearerAuth(inner, self.token, self)


class BearerAuth:
    """Pure-ASGI bearer check in front of everything but ``/health`` and the live view's static page
    ``/live`` (401 without the right token; the live view's data routes need it).

    Also answers 400 for an ``MCP_SERVERS`` header naming servers this endpoint does not serve,
    so a typo fails the connection instead of silently leaving the agent without tools.
    """

    def __init__(self, app: Any, token: str, env: GaiaEnvironment):
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.env = env

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in ("/health", "/live"):
            await self.app(scope, receive, send)
            return
        authorization = b""
        servers: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif name in (b"mcp_servers", b"mcp-servers", b"x-mcp-servers"):
                servers = value
        if not hmac.compare_digest(authorization, self.expected):
            reason = "missing bearer token" if not authorization else "wrong bearer token"
            await _send_json(
                send,
                401,
                {"error": "unauthorized", "detail": f"{reason}: send 'Authorization: Bearer <MCP_SERVER_TOKEN>' "
                 f"with the token this environment printed at start"},
                extra_headers=[(b"www-authenticate", b'Bearer realm="aworld-gaia-env"')],
            )
            return
        if servers is not None:
            unknown = self.env.unknown_servers(servers.decode("latin-1"))
            if unknown:
                # a JSON-RPC error (with HTTP 400): clients show its message whole, where an
                # ad-hoc body is cut to an excerpt (aworld-core's was cut mid-list)
                await _send_json(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32602, "message": self.env.unknown_servers_message(unknown),
                    "data": {"unknown_servers": unknown, "served": sorted(self.env.servers)},
                }})
                return
        await self.app(scope, receive, send)


async def _send_json(send: Any, status: int, body: dict[str, Any], extra_headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + list(extra_headers)})
    await send({"type": "http.response.body", "body": payload})


def _json_error(status: int, detail: str) -> Response:
    return JSONResponse({"error": detail}, status_code=status)


def _cgroup_state(cgroups: Any) -> str:
    if cgroups is None:
        return "unprobed"
    return f"v{cgroups.version}" if cgroups.available else "unavailable"


def _mask_secrets(settings: GaiaEnvSettings, token: str) -> None:
    """The bearer token and every key in the settings come out as ``***`` in this process's logs."""
    from aworld_core.secrets import install_log_masking, register_secrets

    keys = [value for name, value in settings.model_dump().items() if name.endswith("_api_key") or name == "google_cse_id"]
    register_secrets([token, *keys])
    install_log_masking()


def _result(output: str | ToolOutput) -> types.CallToolResult:
    if isinstance(output, str):
        return types.CallToolResult(content=[types.TextContent(text=output)])
    content: list[Any] = [types.TextContent(text=output.text)]
    content.extend(types.ImageContent(data=data, mime_type=mime) for data, mime in output.images)
    return types.CallToolResult(content=content)
