"""The task server's bearer token: from the environment or a file, never required on argv; a
server bound beyond loopback refuses no token, a template's placeholder or a short one; the
token never reaches the log."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from service_agents import ref
from test_serve_cli import run_serve

from aworld_core.schemas import AworldTask, TaskStatus
from aworld_core.secrets import PLACEHOLDER_TOKENS, check_bind_token, is_loopback
from aworld_service.client import AworldTaskClient

GOOD = "a-long-random-token-0123456789abcdef"


def _echo() -> list[str]:
    return ["--agents", f"e={ref('echo')}"]


@pytest.mark.parametrize(
    "how, message",
    [
        ({}, "no bearer token"),
        ({"AWORLD_TASK_TOKEN": "change-me"}, "the placeholder token 'change-me'"),
        ({"AWORLD_TASK_TOKEN": "short-one"}, "a bearer token of 9 characters"),
        ({"file": "replace-with-a-long-random-token\n"}, "the placeholder token 'replace-with-a-long-random-token'"),
    ],
)
def test_a_server_bound_beyond_loopback_refuses_a_missing_or_placeholder_token(
    how: dict[str, str], message: str, tmp_path: Path
) -> None:
    env, args = dict(how), [*_echo(), "--host", "0.0.0.0", "--store", f"sqlite:///{tmp_path / 's.sqlite'}"]
    if "file" in env:
        token_file = tmp_path / "token"
        token_file.write_text(env.pop("file"))
        token_file.chmod(0o600)
        args += ["--token-file", str(token_file)]
    done = run_serve(args, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "refusing to bind 0.0.0.0" in done.stderr and message in done.stderr
    assert "AWORLD_TASK_TOKEN or --token-file" in done.stderr
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything opened


def test_the_shipped_placeholders_are_known() -> None:
    """Every token a template in this repository ships is refused beyond loopback."""
    repo = Path(__file__).resolve().parents[2]
    shipped = {"change-me", "replace-with-a-long-random-token"}
    for template in [*repo.glob("deploy/**/secret.yaml"), *repo.glob("plugins/*/deploy/**/secret.yaml")]:
        text = template.read_text()
        shipped |= {value for value in PLACEHOLDER_TOKENS if f'"{value}"' in text}
    for value in shipped:
        with pytest.raises(Exception, match="placeholder"):
            check_bind_token(value, "0.0.0.0", "set")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("my-host")
    check_bind_token(None, "127.0.0.1", "set")  # loopback: a local server may run without a token


async def test_the_token_flag_warns_and_the_token_never_reaches_the_log(server_processes: Any, tmp_path: Path) -> None:
    server = server_processes(
        [*_echo(), "--token", GOOD, "--log-level", "debug", "--store", f"sqlite:///{tmp_path / 't.sqlite'}"]
    )
    async with AworldTaskClient(know_hosts=[server.host], token=GOOD) as client:
        await client.submit_task(AworldTask(task_id="t1", agent_id="e", agent_input="hello"))
        assert (await client.wait("t1", timeout=20)).status is TaskStatus.SUCCESS
    server.stop()
    log = server.log.read_text()
    assert "--token puts the bearer token on the command line" in log and "--token-file" in log
    assert GOOD not in log


async def test_a_token_file_readable_by_others_warns(server_processes: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(GOOD + "\n")
    os.chmod(token_file, 0o644)
    server = server_processes([*_echo(), "--token-file", str(token_file), "--store", f"sqlite:///{tmp_path / 'f.sqlite'}"])
    async with AworldTaskClient(know_hosts=[server.host], token=GOOD) as client:
        assert (await client.health())[f"http://{server.host}"]["agents"] == ["e"]
    server.stop()
    log = server.log.read_text()
    assert f"--token-file {token_file} is readable by other users (mode 644)" in log and f"chmod 600 {token_file}" in log
    assert GOOD not in log
