"""``python -m aworld_service.serve``: bad arguments exit 2 with a message saying what to fix;
configuration also comes from ``AWORLD_TASK_*`` variables (how a container is configured)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from service_agents import ref

from aworld_core.schemas import AworldTask, TaskStatus
from aworld_service.client import AworldTaskClient


def run_serve(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWORLD_TASK_")}
    return subprocess.run(
        [sys.executable, "-m", "aworld_service.serve", *args],
        capture_output=True, text=True, timeout=60, env={**clean, **(env or {})}, cwd=cwd,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "no agents: pass --agents NAME=module:factory"),
        (["--agents", "calc"], "bad agent spec 'calc'"),
        (["--agents", "a=no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
        (["--agents", f"a={ref('echo')}", "--store", "mysql://db"], "unknown task store URL 'mysql://db'"),
        (["--agents", f"a={ref('echo')}", "--token-file", "/nonexistent/token"], "cannot read --token-file"),
        (["--agents", f"a={ref('echo')}", "--concurrency", "0"], "concurrency must be at least 1"),
    ],
)
def test_bad_arguments_exit_2_and_say_what_to_fix(args: list[str], message: str, tmp_path: Path) -> None:
    done = run_serve(args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_a_bad_environment_variable_is_named(tmp_path: Path) -> None:
    done = run_serve([], env={"AWORLD_TASK_CONCURRENCY": "many"}, cwd=tmp_path)
    assert done.returncode == 2 and "AWORLD_TASK_CONCURRENCY='many' is not an int" in done.stderr


async def test_the_environment_configures_a_server(server_processes: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    env = {
        "AWORLD_TASK_AGENTS": f"echo={ref('echo')}",
        "AWORLD_TASK_STORE": f"sqlite:///{tmp_path / 'env.sqlite'}",
        "AWORLD_TASK_TOKEN_FILE": str(token_file),
        "AWORLD_TASK_CONCURRENCY": "3",
    }
    server = server_processes([], env=env)
    async with AworldTaskClient(know_hosts=[server.host], token="from-a-file") as client:
        await client.submit_task(AworldTask(task_id="e", agent_id="echo", agent_input="hello"))
        assert (await client.wait("e", timeout=20)).status is TaskStatus.SUCCESS
        health = (await client.health())[f"http://{server.host}"]
        assert health["concurrency"] == 3 and health["agents"] == ["echo"]
    assert (tmp_path / "env.sqlite").exists()


def test_aworld_serve_is_the_same_command_through_the_core_cli(tmp_path: Path) -> None:
    """``aworld serve`` (aworld-service's register_commands) runs serve's main: the same refusals."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWORLD_")}
    done = subprocess.run([sys.executable, "-m", "aworld_core.run", "serve", "--agents", "calc"],
                          capture_output=True, text=True, timeout=60, env=clean, cwd=tmp_path)
    assert done.returncode == 2 and "bad agent spec 'calc'" in done.stderr, done.stderr
    usage = subprocess.run([sys.executable, "-m", "aworld_core.run", "serve", "--help"],
                           capture_output=True, text=True, timeout=60, env=clean, cwd=tmp_path)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: aworld serve")
