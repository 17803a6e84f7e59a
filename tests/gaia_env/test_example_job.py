"""examples/gaia as its README runs it: the job's own environment starts beside one the user
started on the default port (it takes a free port), and a missing --env-file is refused."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from aworld_core.config import load_job_config
from aworld_core.environments import running_environment
from aworld_core.validation import environment_command

JOB = Path(__file__).resolve().parents[2] / "examples" / "gaia" / "job.yaml"


@pytest.mark.slow
def test_the_example_jobs_environment_starts_beside_one_on_port_8000(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("# the keys you have (deploy/env.template)\n")
    job = load_job_config(JOB, [])
    command = environment_command(job)
    assert command[command.index("--port") + 1] == "0"
    taken = socket.socket()
    with contextlib.suppress(OSError):  # if 8000 is taken already, so much the better
        taken.bind(("127.0.0.1", 8000))
        taken.listen()
    try:
        with running_environment(command, startup_timeout_s=60, name="gaia") as info:
            assert info["port"] != 8000 and info["url"].endswith("/mcp")
    finally:
        taken.close()


def test_the_example_jobs_environment_refuses_a_missing_env_file(tmp_path, monkeypatch):
    from aworld_core.errors import AworldError

    monkeypatch.chdir(tmp_path)  # no .env here
    job = load_job_config(JOB, [])
    with pytest.raises(AworldError, match=r"--env-file \.env: no such file"):
        with running_environment(environment_command(job), startup_timeout_s=60, name="gaia"):
            pass


async def test_the_python_example_lists_and_calls_the_tools(tmp_path):
    import asyncio
    import os
    import sys

    from gaia_env.conftest import in_process_env, upload

    script = JOB.with_name("call_tools.py")
    with in_process_env(servers="documents-txt,wiki") as env:
        await upload(env, "py-try", "notes.txt", b"penguins are birds")
        run_env = {**os.environ, "MCP_SERVER_URL": env.url, "MCP_SERVER_TOKEN": env.token}

        async def run(*args: str) -> tuple[int, str]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(script), *args, env=run_env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            return proc.returncode, out.decode()

        code, listed = await run()
        assert code == 0 and "documents-txt__list_files:" in listed and "wiki__search:" in listed, listed
        code, called = await run("--servers", "documents-txt", "--episode", "py-try",
                                 "--call", "documents-txt__list_files", "{}")
        assert code == 0 and "notes.txt" in called, called
