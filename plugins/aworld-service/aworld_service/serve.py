"""``aworld serve`` (also ``python -m aworld_service.serve``): run a task server.

    aworld serve --port 9299 --agents gaia_agent=my_agents:build_gaia_agent \\
        --store sqlite:///tasks.sqlite --concurrency 16

Several servers share one queue when they share a PostgreSQL store
(``--store postgresql://user:pw@db:5432/aworld``). Every flag has an environment variable
(``AWORLD_TASK_<FLAG>``, e.g. ``AWORLD_TASK_STORE``, ``AWORLD_TASK_TOKEN``) so a container is
configured without a command line; a flag wins over its variable. The bearer token comes from
``AWORLD_TASK_TOKEN`` or a file (``--token-file``, ``AWORLD_TASK_TOKEN_FILE``); ``--token`` still
works but warns, since a command line is visible to every user of the machine (``/proc``). Bound
beyond loopback, the server refuses to start without a token, with a template's placeholder
(``change-me``) or with one shorter than 16 characters.

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT: running tasks get ``--drain-s`` to finish,
the rest go back to the queue), 1 when the server failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aworld_core.errors import AworldError, UsageError
from aworld_core.secrets import (
    check_bind_token,
    install_log_masking,
    register_secrets,
    warn_if_readable_by_others,
)

log = logging.getLogger("aworld_service.serve")
ENV_PREFIX = "AWORLD_TASK_"


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_"), default)


def _num(name: str, default: Any, kind: type) -> Any:
    """A numeric ``AWORLD_TASK_<NAME>`` variable, or ``default`` when unset."""
    raw = _env(name)
    if raw in (None, ""):
        return default
    try:
        return kind(raw)
    except ValueError:
        raise UsageError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a{'n' if kind is int else ''} {kind.__name__}") from None


def _flag(name: str) -> bool:
    """A yes/no ``AWORLD_TASK_<NAME>`` variable (1/true/yes or 0/false/no; unset is no)."""
    raw = str(_env(name, "")).strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise UsageError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a yes/no value: use 1 or 0")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aworld serve",
        description="Run an AWorld task server: accepts agent tasks, runs them, records trajectories.",
    )
    p.add_argument("--host", default=_env("host", "127.0.0.1"), help="address to bind (0.0.0.0 in a container)")
    p.add_argument("--port", type=int, default=_num("port", 9299, int))
    p.add_argument(
        "--agents",
        action="append",
        default=None,
        metavar="NAME=MODULE:FACTORY",
        help="an agent this server runs (repeat, or comma-separate); env AWORLD_TASK_AGENTS",
    )
    p.add_argument("--store", default=_env("store", "sqlite:///aworld-tasks.sqlite"),
                   help="sqlite:///file.sqlite (one host) or postgresql://... (hosts sharing a queue)")
    p.add_argument("--concurrency", type=int, default=_num("concurrency", 8, int), help="tasks run at once")
    p.add_argument("--token", default=None,
                   help="avoid: visible to every user in /proc; use AWORLD_TASK_TOKEN or --token-file")
    p.add_argument("--token-file", default=_env("token_file"),
                   help="read the bearer token from this file (mode 600); env AWORLD_TASK_TOKEN_FILE, or "
                   "the token itself in AWORLD_TASK_TOKEN")
    p.add_argument("--lease-s", type=float, default=_num("lease_s", 30.0, float),
                   help="a host that stops renewing loses its tasks after this long")
    p.add_argument("--poll-s", type=float, default=_num("poll_s", 0.5, float),
                   help="how often an idle server looks for queued tasks")
    p.add_argument("--max-attempts", type=int, default=_num("max_attempts", 3, int),
                   help="claims of one task before it is failed as abandoned")
    p.add_argument("--max-queue", type=int, default=_num("max_queue", 100_000, int),
                   help="waiting tasks above which submissions get 429")
    p.add_argument("--max-body-bytes", type=int, default=_num("max_body_bytes", 16 * 1024 * 1024, int))
    p.add_argument("--max-batch", type=int, default=_num("max_batch", 1000, int), help="tasks per batch request")
    p.add_argument("--timeout", type=float, default=_num("timeout", None, float),
                   help="default task timeout in seconds (a task's own 'timeout' wins)")
    p.add_argument("--reward", default=_env("reward"), help="reward name scored on every successful task")
    p.add_argument("--drain-s", type=float, default=_num("drain_s", 10.0, float),
                   help="on shutdown, how long running tasks may finish before going back to the queue")
    p.add_argument("--allow-stdio-mcp", action="store_true", default=_flag("allow_stdio_mcp"),
                   help="let a task's mcp_config start stdio MCP servers, i.e. run a command the submitter "
                   "names on this host (default: refused with 422); env AWORLD_TASK_ALLOW_STDIO_MCP=1")
    p.add_argument("--owner", default=_env("owner", ""), help="this host's name in the store (default: hostname:pid)")
    p.add_argument("--loop", default=_env("loop", "asyncio"), choices=["auto", "asyncio", "uvloop"],
                   help="event loop: asyncio's (default), uvloop (pip install uvloop), or uvloop if installed")
    p.add_argument("--log-level", default=_env("log_level", "info"), choices=["debug", "info", "warning", "error"])
    return p


def _run(main: Any, loop: str) -> int:
    """Run on uvloop when it is installed (faster sockets), else on asyncio's own loop."""
    if loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                main.close()
                raise UsageError("--loop uvloop: uvloop is not installed (pip install uvloop)") from None
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def build_config(args: argparse.Namespace) -> Any:
    from aworld_service.agents import parse_agent_specs
    from aworld_service.server import ServerConfig

    specs = args.agents if args.agents is not None else [s for s in [_env("agents", "")] if s]
    agents = parse_agent_specs(specs)
    if not agents:
        raise UsageError("no agents: pass --agents NAME=module:factory (or set AWORLD_TASK_AGENTS)")
    token = _token(args)
    check_bind_token(token, args.host, "set AWORLD_TASK_TOKEN or --token-file to")
    register_secrets([token])
    if args.allow_stdio_mcp:
        log.warning("--allow-stdio-mcp: a task's mcp_config may run commands on this host (stdio MCP servers)")
    if Path(".env").is_file():  # the settings (LLM_API_KEY, ...) the agents read
        warn_if_readable_by_others(Path(".env").absolute(), "the settings file")
    return ServerConfig(
        agents=agents,
        store_url=args.store,
        concurrency=args.concurrency,
        token=token or None,
        lease_s=args.lease_s,
        poll_s=args.poll_s,
        max_attempts=args.max_attempts,
        max_queue=args.max_queue,
        max_body_bytes=args.max_body_bytes,
        max_batch=args.max_batch,
        default_timeout_s=args.timeout,
        reward=args.reward,
        drain_s=args.drain_s,
        owner=args.owner or f"{_default_owner()}:{args.port}",
        base_dir=os.getcwd(),
        allow_stdio_mcp=args.allow_stdio_mcp,
    )


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: ``--token`` (warned about), else ``--token-file``, else ``AWORLD_TASK_TOKEN``."""
    if args.token is not None:
        log.warning(
            "--token puts the bearer token on the command line, which every user of this machine can read "
            "(/proc/<pid>/cmdline); put it in a file readable only by you and pass --token-file, or set "
            "AWORLD_TASK_TOKEN"
        )
        return args.token.strip() or None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read --token-file {args.token_file}: {exc}") from None
        if not token:
            raise UsageError(f"--token-file {args.token_file} is empty")
        warn_if_readable_by_others(args.token_file, "--token-file")
        return token
    return (_env("token") or "").strip() or None


def _default_owner() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


async def serve(config: Any, host: str, port: int, log_level: str = "info") -> int:
    import uvicorn

    from aworld_service.agents import AgentRegistry
    from aworld_service.server import TaskServer

    class _Uvicorn(uvicorn.Server):
        # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown, so the process would die
        # by the signal; a requested stop (how Kubernetes stops a pod) is a clean exit here
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list):
                    captured.clear()

    registry = AgentRegistry(config.agents, base_dir=config.base_dir)  # bad references fail here
    server = TaskServer(config, agents=registry)
    uv = _Uvicorn(
        uvicorn.Config(
            server.app,
            host=host,
            port=port,
            log_level=log_level,
            lifespan="on",
            access_log=log_level == "debug",
            timeout_graceful_shutdown=int(config.drain_s) + 5,
        )
    )
    await uv.serve()
    return 0 if uv.started else 1


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except AworldError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    install_log_masking()  # the token (and any registered key) never reaches the log
    try:
        config = build_config(args)
        code = _run(serve(config, args.host, args.port, args.log_level), args.loop)
    except AworldError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if code:
        print("error: the task server did not start (see the log above)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
