"""``python -m aworld_gaia_env serve``: start the environment and print how to reach it.

Prints the seed's one-line JSON ``{"ip", "port", "token"}`` (after the port is bound, so a
script that reads it can connect at once), then the ``MCP_SERVER_URL=`` / ``MCP_SERVER_TOKEN=`` /
``MCP_SERVER_RELEASE=`` lines to paste into the agent side's ``.env``. That stdout handshake is the one place the token
appears: it comes from the environment or a token file (``--token`` works but warns, argv being
public), binding beyond loopback with a placeholder or short token is refused, and log records
show it (and every API key of the settings) as ``***``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import secrets
import socket
import sys
from typing import Any

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m aworld_gaia_env", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the GAIA tools on one authenticated MCP endpoint")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1; anything else is exposed)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--servers", default=None, help="comma list of tool servers to serve (default: all)")
    serve.add_argument("--workspace", default=None, help="directory holding the per-episode workspaces")
    serve.add_argument(
        "--token",
        default=None,
        help="bearer token; discouraged: argv is visible to every process in /proc (use MCP_SERVER_TOKEN or --token-file)",
    )
    serve.add_argument(
        "--token-file", default=None, help="file holding the bearer token (default: MCP_SERVER_TOKEN_FILE, MCP_SERVER_TOKEN, else random)"
    )
    serve.add_argument("--env-file", default=None, help="a .env file with the keys (see deploy/env.template)")
    serve.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default) or ERROR")
    sub.add_parser("list-servers", help="print the tool servers and their tools")
    return parser


def _advertised_ip(host: str) -> str:
    """The address clients should use: the bind address, or this host's outward one for a wildcard."""
    if host not in ("0.0.0.0", "::", ""):
        return host
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent for a UDP connect
        return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto says
    # TCP, and without it Nagle plus delayed ACKs add ~40 ms to every response
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"error: cannot bind {host}:{port}: {exc}; pick another --port (0 picks a free one)") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, tls_terminated: bool) -> str | None:
    """What to say when the endpoint is reachable from other machines without TLS in front."""
    if _is_loopback(host) or tls_terminated:
        return None
    return (
        f"binding {host} exposes the endpoint beyond this machine over plain HTTP: the bearer token travels "
        f"in clear text. Put a TLS terminator (ingress, reverse proxy) in front and set GAIA_ENV_TLS_TERMINATED=true."
    )


TOKEN_IN_ARGV = (
    "--token puts the bearer token in this process's command line, which every process on the host can read "
    "in /proc/<pid>/cmdline; set MCP_SERVER_TOKEN in the environment or pass --token-file FILE instead"
)


def read_token_file(path: str) -> str:
    """The token in ``path`` (its first line); an unreadable or empty file is a usage error."""
    from aworld_core.secrets import warn_if_readable_by_others

    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.readline().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path}: {exc.strerror}") from None
    if not token:
        raise ValueError(f"the token file {path} is empty; write a long random token into it")
    warn_if_readable_by_others(path, "the token file")
    return token


def serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from aworld_core.errors import UsageError
    from aworld_core.secrets import check_bind_token, warn_if_readable_by_others
    from aworld_gaia_env.server import ConfigurationError, GaiaEnvironment
    from aworld_gaia_env.settings import load_settings

    try:
        settings = load_settings(
            args.env_file,
            host=args.host,
            port=args.port,
            servers=args.servers,
            workspace_root=args.workspace,
            token=args.token,
            token_file=args.token_file,
            log_level=args.log_level,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"error: invalid GAIA environment settings: {problems}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("aworld_gaia_env")
    if args.token is not None:
        log.warning(TOKEN_IN_ARGV)
    if args.env_file is not None:
        warn_if_readable_by_others(args.env_file, "the --env-file")
    warning = exposure_warning(settings.host, settings.tls_terminated)
    if warning:
        log.warning(warning)
    try:
        given = read_token_file(str(settings.token_file)) if settings.token_file is not None else settings.token
        if given is not None:
            check_bind_token(given, settings.host, "set MCP_SERVER_TOKEN (or MCP_SERVER_TOKEN_FILE) to")
    except (ValueError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    token = given or secrets.token_urlsafe(32)
    try:
        env = GaiaEnvironment(settings, token)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sock = _bind(settings.host, settings.port)
    port = sock.getsockname()[1]
    ip = _advertised_ip(settings.host)
    url_host = f"[{ip}]" if ":" in ip else ip
    print(json.dumps({"ip": ip, "port": port, "token": token}))
    print(f"MCP_SERVER_URL=http://{url_host}:{port}/mcp")
    print(f"MCP_SERVER_TOKEN={token}")
    from aworld_gaia_env.plugin import RELEASE

    print(f"MCP_SERVER_RELEASE='{RELEASE}'", flush=True)  # quoted: the value has a space
    config = uvicorn.Config(
        env.asgi_app(),
        log_level=settings.log_level.lower(),
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    asyncio.run(server.serve(sockets=[sock]))
    return 0


def list_servers() -> int:
    from aworld_gaia_env.tools import server_catalog

    for name, tools in server_catalog().items():
        print(name)
        for t in tools:
            print(f"  {t.full_name}: {t.description.split('. ')[0]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return list_servers()


def run_in_background(app: Any, sock: socket.socket) -> Any:  # pragma: no cover - helper for embedding
    """Serve ``app`` on an already bound socket from a thread (used by tests and benchmarks)."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    return server, thread
