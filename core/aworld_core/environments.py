"""Starting a job's tool environment (an MCP server process) and pointing agents at it.

The serve command prints one JSON line ``{"ip": ..., "port": ..., "token": ...}`` when it is
ready (the GAIA environment's form). While the job runs, ``MCP_SERVER_URL``,
``MCP_SERVER_TOKEN`` and ``MCP_SERVERS`` are set in this process's environment (and so in the
backend processes it starts); they are restored and the server stopped afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

from aworld_core.errors import AworldError


@contextlib.contextmanager
def running_environment(command: list[str], servers: list[str] | None = None,
                        startup_timeout_s: float = 60.0, name: str | None = None,
                        log: TextIO | None = None, release: str | None = None) -> Iterator[dict[str, Any]]:
    """Run ``command`` until the block ends; yield its ``{"ip", "port", "token", "url"}``.

    ``release`` (the environment spec's release request, ``"METHOD URL-template"``) is exported
    as ``MCP_SERVER_RELEASE`` so agents built from the job's defaults send exactly that at
    episode end; an environment without one exports it empty, overriding a ``.env`` value meant
    for another server.

    Everything the environment prints goes to ``log`` (default: this process's stderr, the
    job's log), each line prefixed ``[env <name>]`` and with its token masked, from start-up to
    exit, so a tool server's errors are seen where the job's are.
    """
    if command and command[0] in ("python", "python3"):
        command = [sys.executable, *command[1:]]  # the environment's Python, not whatever is on PATH
    from aworld_core.offline import with_offline_env

    env = {**os.environ, **with_offline_env({})}  # telemetry off there too (a GAIA env starts Chromium)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=env)
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True, name="aworld-env-output").start()
    forward: threading.Thread | None = None
    try:
        info = _wait_for_address(lines, seen, startup_timeout_s, command)
        previous = {k: os.environ.get(k) for k in ("MCP_SERVER_URL", "MCP_SERVER_TOKEN", "MCP_SERVERS",
                                                   "MCP_SERVER_RELEASE")}
        os.environ["MCP_SERVER_URL"] = info["url"]
        os.environ["MCP_SERVER_TOKEN"] = str(info.get("token") or "")
        os.environ["MCP_SERVER_RELEASE"] = release or ""
        from aworld_core.secrets import register_secret

        register_secret(str(info.get("token") or ""))  # masked in logs and errors from here on
        prefix = f"[env {name or os.path.basename(command[-1] if command else 'environment')}] "
        forward = threading.Thread(target=_forward, args=(seen, lines, prefix, log), daemon=True,
                                   name="aworld-env-log")
        forward.start()
        if servers:
            os.environ["MCP_SERVERS"] = ",".join(servers)
        _refresh_settings()
        try:
            yield info
        finally:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _refresh_settings()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if forward is not None:
            forward.join(timeout=5)  # its last lines (a shutdown message) still reach the log


def _forward(seen: list[str], lines: queue.Queue[str | None], prefix: str, log: TextIO | None) -> None:
    """Write the start-up lines, then every later line, to the job's log with ``prefix``."""
    from aworld_core.secrets import mask

    def write(line: str) -> None:
        target = log if log is not None else sys.stderr
        try:
            target.write(mask(prefix + line.rstrip("\n") + "\n"))
            target.flush()
        except (ValueError, OSError):  # the log was closed under us (interpreter shutdown)
            pass

    for line in seen:
        write(line)
    while (line := lines.get()) is not None:
        write(line)


def _wait_for_address(lines: queue.Queue[str | None], seen: list[str], timeout: float,
                      command: list[str]) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(remaining, 0.01))
        except queue.Empty:
            line = ""
            if time.monotonic() >= deadline:
                raise AworldError(
                    f"tool environment did not print its address within {timeout:.0f}s: {' '.join(command)}\n"
                    + "".join(seen[-20:])
                ) from None
            continue
        if line is None:
            raise AworldError(
                f"tool environment exited before it was ready: {' '.join(command)}\n" + "".join(seen[-20:])
            )
        seen.append(line)
        text = line.strip()
        if text.startswith("{"):
            try:
                info = json.loads(text)
            except ValueError:
                continue
            if isinstance(info, dict) and "port" in info:
                host = info.get("ip") or "127.0.0.1"
                info.setdefault("url", f"http://{host}:{info['port']}{info.get('path', '/mcp')}")
                return info


def _refresh_settings() -> None:
    from aworld_core.settings import get_settings

    get_settings.cache_clear()
