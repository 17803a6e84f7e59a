"""Fixtures of the task-service tests: real servers (in-process and as subprocesses), a real
PostgreSQL server, and the loopback OpenAI stub the agents call."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.openai_stub import OpenAIStub, free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE)) if str(HERE) not in sys.path else None

import service_agents  # noqa: E402  (this folder, put on the path above)

PG_SCRIPT = REPO / "scripts" / "postgres-for-tests.sh"
PG_URL_FILE = REPO / ".stamps" / "postgres.url"


# --- PostgreSQL -------------------------------------------------------------------------------


def _can_connect(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return None
    except Exception as exc:  # reported in the skip message
        return f"{type(exc).__name__}: {exc}"


def _find_postgres() -> tuple[str | None, str]:
    url = os.environ.get("AWORLD_TEST_POSTGRES_URL")
    if url:
        problem = _can_connect(url)
        return (url, "") if problem is None else (None, f"AWORLD_TEST_POSTGRES_URL={url} does not answer: {problem}")
    if PG_URL_FILE.exists():
        url = PG_URL_FILE.read_text().strip()
        if url and _can_connect(url) is None:
            return url, ""
    try:
        done = subprocess.run(["bash", str(PG_SCRIPT)], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{PG_SCRIPT} could not run: {exc}"
    if done.returncode != 0:
        return None, f"{PG_SCRIPT} failed ({done.returncode}): {done.stderr.strip()[-800:]}"
    url = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    problem = _can_connect(url) if url else "the script printed no URL"
    return (url, "") if problem is None else (None, f"{PG_SCRIPT} started a server but {problem}")


@pytest.fixture(scope="session")
def postgres_server() -> str:
    url, reason = _find_postgres()
    if url is None:
        message = (
            f"\n{'!' * 78}\nPostgreSQL is not available, so the PostgreSQL task-store tests (shared queue, "
            f"SKIP LOCKED claims, failover with three servers) DID NOT RUN.\nReason: {reason}\n{'!' * 78}"
        )
        warnings.warn(message, stacklevel=1)
        print(message, file=sys.stderr)
        pytest.skip(message)
    return url


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server for one test; dropped afterwards."""
    import psycopg

    name = f"aworld_t_{uuid.uuid4().hex[:12]}"
    base, _, _ = postgres_server.rpartition("/")
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- the LLM ----------------------------------------------------------------------------------


@pytest.fixture
def llm_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    """The deterministic OpenAI-compatible stub, scripted to drive the calc agent."""
    stub = OpenAIStub(service_agents.calc_script).start()
    monkeypatch.setenv("AWORLD_TEST_LLM_URL", stub.base_url)
    try:
        yield stub
    finally:
        stub.stop()


# --- servers ----------------------------------------------------------------------------------


@pytest.fixture
def serve() -> Any:
    """``async with serve(config) as (host, server)``: a real server (uvicorn on 127.0.0.1) in
    this test's event loop."""

    @contextlib.asynccontextmanager
    async def run(config: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Any]]:
        import uvicorn

        from aworld_service.server import TaskServer

        port = free_port()
        server = TaskServer(config, **kwargs)
        uv = uvicorn.Server(
            uvicorn.Config(server.app, host="127.0.0.1", port=port, lifespan="on", log_level="warning")
        )
        task = asyncio.create_task(uv.serve())
        while not uv.started:
            if task.done():
                task.result()
                raise RuntimeError("the task server did not start")
            await asyncio.sleep(0.02)
        try:
            yield f"127.0.0.1:{port}", server
        finally:
            uv.should_exit = True
            await task

    return run


class ServerProcess:
    """``python -m aworld_service.serve`` as a separate process (kill it like a crashed host)."""

    def __init__(self, port: int, args: list[str], env: dict[str, str], log: Path):
        self.port = port
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> ServerProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aworld_service.serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(self.log.parent),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server on port {self.port} exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server on port {self.port} did not become healthy:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> float:
        """SIGKILL, as a host dying; returns the time it was dead by."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return time.time()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server_processes(tmp_path: Path) -> Iterator[Any]:
    """``start(args, port=None, env=None) -> ServerProcess``; every process is stopped after the test."""
    started: list[ServerProcess] = []

    def start(args: list[str], *, port: int | None = None, env: dict[str, str] | None = None) -> ServerProcess:
        port = port or free_port()
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        proc = ServerProcess(port, args, full_env, tmp_path / f"server-{port}.log")
        started.append(proc)
        return proc.start()

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()
