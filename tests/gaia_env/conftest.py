"""Fixtures for the GAIA environment: the real server (a subprocess started with its CLI, and
in-process instances for setting variants), loopback fakes of the external APIs, a GAIA-layout
directory made on the spot, and a helper to connect with the official MCP client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from gaia_env.fakes import FakeServices

SANDBOX_ENV = {
    "SANDBOX_TIMEOUT_S": "10",
    "SANDBOX_CPU_S": "2",
    "SANDBOX_MEMORY_MB": "768",
    "SANDBOX_MAX_OUTPUT_BYTES": "65536",
    "SANDBOX_MAX_PROCESSES": "24",
    # the per-workspace tmpfs quota needs root; a developer's unprivileged run goes without it
    "GAIA_ENV_WORKSPACE_QUOTA_MB": "256" if os.geteuid() == 0 else "0",
}


@dataclass
class RunningEnv:
    url: str
    token: str
    ip: str
    port: int
    workspace_root: Path
    printed: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    stop: Any = None

    @property
    def base(self) -> str:
        return f"http://{self.ip}:{self.port}"


def make_gaia_dir(root: Path) -> Path:
    """A small copy of the GAIA layout: 2023/<split>/metadata.jsonl with attachments beside it."""
    validation = root / "2023" / "validation"
    test = root / "2023" / "test"
    validation.mkdir(parents=True)
    test.mkdir(parents=True)
    (validation / "penguins.csv").write_text("species,height_cm\nemperor,122\nking,95\n")
    rows = [
        {"task_id": "t-csv", "Question": "How tall is the tallest penguin in the attached file, in cm?", "Level": 1,
         "Final answer": "122", "file_name": "penguins.csv", "Annotator Metadata": {"Steps": "read the file"}},
        {"task_id": "t-plain", "Question": "How many studio albums did Mercedes Sosa publish between 2000 and 2009?",
         "Level": "2", "Final answer": "3", "file_name": ""},
        {"task_id": "t-hard", "Question": "A level 3 question.", "Level": 3, "Final answer": "42", "file_name": ""},
    ]
    (validation / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (test / "metadata.jsonl").write_text(
        json.dumps({"task_id": "x-1", "Question": "Hidden answer question", "Level": 1, "Final answer": "?", "file_name": ""}) + "\n"
    )
    return root


@pytest.fixture(scope="session")
def fakes() -> Iterator[FakeServices]:
    service = FakeServices().start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def gaia_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gaia_dir(tmp_path_factory.mktemp("gaia"))


def _read_lines(proc: subprocess.Popen[str], count: int, timeout: float) -> list[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        try:
            got.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the GAIA environment did not print its address (exit {proc.poll()}); got {got}") from None
    return got


def _wait_healthy(base: str, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="session")
def env_server(fakes: FakeServices, gaia_dir: Path) -> Iterator[RunningEnv]:
    """``python -m aworld_gaia_env serve`` as users start it, pointed at the fakes."""
    workspace_root = Path(tempfile.mkdtemp(prefix="gaia-ws-"))
    env = {k: v for k, v in os.environ.items() if k not in ("MCP_SERVER_TOKEN", "GAIA_ENV_SERVERS")}
    env.update(fakes.env())
    env.update(SANDBOX_ENV)
    env.update(
        {
            "TAVILY_API_KEY": "tavily-key",
            "THINK_LLM_MODEL_NAME": "think-model",
            "GAIA_ENV_ALLOW_PRIVATE_URLS": "true",
            "DOWNLOAD_MAX_BYTES": "200000",
            "DOC_MAX_CHARS": "4000",
            "GAIA_DIR": str(gaia_dir),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "aworld_gaia_env", "serve", "--port", "0", "--workspace", str(workspace_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        printed = _read_lines(proc, 4, timeout=60)
        info = json.loads(printed[0])
        running = RunningEnv(
            url=f"http://{info['ip']}:{info['port']}/mcp",
            token=info["token"],
            ip=info["ip"],
            port=info["port"],
            workspace_root=workspace_root,
            printed=printed,
            proc=proc,
        )
        _wait_healthy(running.base)
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workspace_root, ignore_errors=True)


@contextlib.contextmanager
def in_process_env(**settings: Any) -> Iterator[RunningEnv]:
    """A ``GaiaEnvironment`` built from explicit settings, served by uvicorn from a thread."""
    import uvicorn

    from aworld_gaia_env.server import GaiaEnvironment
    from aworld_gaia_env.settings import GaiaEnvSettings

    workspace_root = Path(tempfile.mkdtemp(prefix="gaia-ws-"))
    settings.setdefault("workspace_root", workspace_root)
    settings.setdefault("workspace_quota_mb", 256 if os.geteuid() == 0 else 0)
    token = settings.pop("token", "in-process-token")
    environment = GaiaEnvironment(GaiaEnvSettings(**settings), token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY via asyncio
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(environment.asgi_app(), log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("in-process GAIA environment did not start")
        time.sleep(0.02)
    try:
        yield RunningEnv(f"http://127.0.0.1:{port}/mcp", token, "127.0.0.1", port, Path(settings["workspace_root"]))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        shutil.rmtree(workspace_root, ignore_errors=True)


@contextlib.asynccontextmanager
async def connect(
    env: RunningEnv,
    *,
    servers: str | None = None,
    episode: str | None = None,
    task_id: str | None = None,
    token: str | None = None,
    mode: str = "auto",
) -> AsyncIterator[Any]:
    """The official MCP client on the endpoint, with the headers an agent would send."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {env.token if token is None else token}"}
    if servers is not None:
        headers["MCP_SERVERS"] = servers
    if episode is not None:
        headers["X-Episode-Id"] = episode
    if task_id is not None:
        headers["X-Gaia-Task-Id"] = task_id
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(env.url, http_client=http), mode=mode, read_timeout_seconds=60) as client:
            yield client


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call(env: RunningEnv, tool: str, arguments: dict[str, Any], *, episode: str = "ep-default", **kw: Any) -> tuple[str, bool]:
    """One tool call in its own connection: ``(text, is_error)``."""
    async with connect(env, episode=episode, **kw) as client:
        result = await client.call_tool(tool, arguments)
        return text_of(result), bool(result.is_error)


async def upload(env: RunningEnv, episode: str, name: str, data: bytes) -> None:
    """Place a file in an episode's workspace through the endpoint's upload route."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.put(
            f"{env.base}/workspaces/{episode}/files/{name}", data=data, headers={"Authorization": f"Bearer {env.token}"}
        ) as response:
            assert response.status == 201, await response.text()
