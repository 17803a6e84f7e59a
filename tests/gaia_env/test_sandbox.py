"""intelligence-code and terminal under attack: every attempt ends with a clear result, the server lives.

The endpoint tests run the default ``bwrap`` mode (bubblewrap, which ``make test`` installs); the
``audit`` opt-out is exercised directly. ``test_sandbox_attacks.py`` holds the escape attempts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import aiohttp
import pytest
from gaia_env.conftest import SANDBOX_ENV, call

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.sandbox import Sandbox
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.workspace import WorkspaceManager

PY = "intelligence-code__run_python"
SH = "terminal__run_command"


async def _mode(env) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(env.base + "/health") as response:
            return (await response.json())["sandbox"]


async def _alive(env) -> None:
    text, err = await call(env, PY, {"code": "print(6 * 7)"}, episode="ep-alive")
    assert not err and "42" in text


async def test_python_runs_in_the_workspace(env_server):
    text, err = await call(env_server, PY, {"code": "import os, sys\nopen('out.txt','w').write('hi')\nprint(os.getcwd())\nprint('err', file=sys.stderr)"}, episode="ep-py")
    assert not err
    assert "exit code: 0" in text and str(env_server.workspace_root / "ep-py") in text and "--- stderr ---\nerr" in text
    assert (env_server.workspace_root / "ep-py" / "out.txt").read_text() == "hi"


async def test_python_errors_come_back_as_output(env_server):
    text, err = await call(env_server, PY, {"code": "raise ValueError('boom')"}, episode="ep-py")
    assert not err  # the tool worked; the code failed
    assert "exit code: 1" in text and "ValueError: boom" in text


async def test_socket_is_refused(env_server, fakes):
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {fakes.port}), timeout=3)\nprint('CONNECTED')"
    text, _ = await call(env_server, PY, {"code": code}, episode="ep-net")
    assert "CONNECTED" not in text and "exit code: 1" in text
    assert "network access is disabled" in text


@pytest.mark.parametrize(
    "code",
    [
        "open('../escape.txt', 'w').write('x')",
        "open('/tmp/aworld-escape.txt', 'w').write('x')",
        "import os\nos.symlink('..', 'up')\nopen('up/escape.txt', 'w').write('x')",
        "open('/usr/aworld-escape.txt', 'w').write('x')",
    ],
    ids=["dotdot", "absolute", "symlink", "system"],
)
async def test_writes_outside_the_workspace_never_reach_the_host(env_server, code):
    # the sandbox's /tmp (where the test's workspace root lies) is its own tmpfs: a write there
    # lands in the sandbox's private copy; everything else outside the workspace is read-only
    text, _ = await call(env_server, PY, {"code": code}, episode="ep-write")
    if "/usr/" in code:
        assert "exit code: 1" in text and "Read-only file system" in text
    assert not (env_server.workspace_root / "escape.txt").exists()
    assert not Path("/tmp/aworld-escape.txt").exists() and not Path("/usr/aworld-escape.txt").exists()


@pytest.mark.slow
async def test_fork_bomb_is_contained(env_server):
    assert await _mode(env_server) == "bwrap"
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    text, err = await call(env_server, PY, {"code": code, "timeout_s": 2}, episode="ep-fork")
    assert not err
    assert "killed" in text and "time limit" in text
    await _alive(env_server)


@pytest.mark.slow
async def test_infinite_loop_hits_the_cpu_limit(env_server):
    text, err = await call(env_server, PY, {"code": "while True:\n    pass"}, episode="ep-loop")
    assert not err
    if os.getloadavg()[0] > 2 * (os.cpu_count() or 1):
        # a host this busy may not give the loop 2 s of CPU within the 10 s wall clock: either limit kills it
        assert "CPU time limit of 2 s" in text or "still running after the time limit of 10 s" in text
    else:
        assert "CPU time limit of 2 s" in text
    assert not _processes_of(env_server, "ep-loop")
    await _alive(env_server)


async def test_sleeping_forever_hits_the_wall_clock_limit(env_server):
    text, _ = await call(env_server, PY, {"code": "import time\ntime.sleep(60)", "timeout_s": 1}, episode="ep-sleep")
    assert "killed: still running after the time limit of 1 s" in text


async def test_memory_hog_is_stopped(env_server):
    text, _ = await call(env_server, PY, {"code": "x = bytearray(4 * 1024**3)\nprint('allocated')"}, episode="ep-mem")
    assert "allocated" not in text and "MemoryError" in text and "768 MB" in text
    await _alive(env_server)


async def test_100mb_of_output_is_cut(env_server):
    code = "import sys\nfor _ in range(1_000_000):\n    sys.stdout.write('x' * 100 + '\\n')"
    text, err = await call(env_server, PY, {"code": code}, episode="ep-out")
    assert not err and "output exceeded the limit of 65536 bytes" in text
    assert len(text) < 70_000
    await _alive(env_server)


@pytest.mark.slow
async def test_terminal(env_server, fakes):
    assert await _mode(env_server) == "bwrap"
    text, err = await call(env_server, SH, {"command": "echo hello > greeting.txt && cat greeting.txt && pwd"}, episode="ep-sh")
    assert not err and "hello" in text and str(env_server.workspace_root / "ep-sh") in text
    text, _ = await call(env_server, SH, {"command": "echo x > /usr/aworld-sh.txt; echo x > /etc/aworld-sh.txt; ln -s / root; echo x > root/usr/aworld-sh2.txt"}, episode="ep-sh")
    assert text.count("Read-only file system") == 3
    assert not Path("/usr/aworld-sh.txt").exists() and not Path("/usr/aworld-sh2.txt").exists()
    text, _ = await call(env_server, SH, {"command": f"exec 3<>/dev/tcp/127.0.0.1/{fakes.port} && echo CONNECTED"}, episode="ep-sh")
    assert "CONNECTED" not in text and "connection refused" in text.lower()  # its own loopback, nothing listening
    text, _ = await call(env_server, SH, {"command": "yes | head -c 200000000"}, episode="ep-sh")
    assert "output exceeded the limit" in text
    text, _ = await call(env_server, SH, {"command": "sleep 30 & sleep 30", "timeout_s": 1}, episode="ep-sh")
    assert "killed: still running" in text
    await _alive(env_server)


@pytest.mark.slow
async def test_terminal_fork_bomb(env_server):
    assert await _mode(env_server) == "bwrap"
    text, err = await call(env_server, SH, {"command": ":(){ :|:& };:", "timeout_s": 2}, episode="ep-shfork")
    # the process limit stops it, the wall clock kills it, or the shell returns first: in every case
    # the end of the sandbox's pid namespace takes every process it started
    assert not err and "exit code:" in text
    assert not _processes_of(env_server, "ep-shfork")
    await _alive(env_server)


def _processes_of(env, episode: str) -> list[int]:
    """Host processes still running as the episode's uid (a contained run leaves none)."""
    uid = os.stat(env.workspace_root / episode).st_uid
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(entry.path).st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# ---------------------------------------------------------------------------------------------
# The audit-hook mode, as a host without root gets it
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def audit_sandbox():
    root = Path(tempfile.mkdtemp(prefix="gaia-audit-"))
    env = {k.lower(): v for k, v in SANDBOX_ENV.items()}
    sandbox = Sandbox(GaiaEnvSettings(workspace_root=root, sandbox_isolation="audit", **env))
    workspace, _ = WorkspaceManager(root).get("ep")
    yield sandbox, workspace
    shutil.rmtree(root, ignore_errors=True)


async def test_audit_mode_guards_python(audit_sandbox, fakes):
    sandbox, ws = audit_sandbox
    workspace = ws.path
    ok = await sandbox.run_python("open('inside.txt','w').write('ok'); print('fine')", ws)
    assert ok.exit_code == 0 and "fine" in ok.stdout and (workspace / "inside.txt").exists()
    for code, expected in [
        (f"import socket; socket.create_connection(('127.0.0.1', {fakes.port}))", "network access is disabled"),
        ("open('../escape.txt', 'w')", "writing outside the workspace"),
        ("import os; os.symlink('..', 'up'); open('up/escape.txt', 'w')", "writing outside the workspace"),
        ("import os; os.rename('inside.txt', '../moved.txt')", "outside the workspace"),
        ("import subprocess; subprocess.run(['true'])", "starting processes is disabled"),
        ("import os; os.fork()", "starting processes is disabled"),
        ("import ctypes; ctypes.CDLL(None).system(b'true')", "ctypes is disabled"),
    ]:
        result = await sandbox.run_python(code, ws)
        assert result.exit_code == 1, code
        assert expected in result.stderr, (code, result.stderr)
    assert not (workspace.parent / "escape.txt").exists() and not (workspace.parent / "moved.txt").exists()
    assert sandbox.mode == "audit"


@pytest.mark.slow
async def test_audit_mode_still_limits_cpu_and_output(audit_sandbox):
    sandbox, workspace = audit_sandbox
    looping = await sandbox.run_python("while True: pass", workspace)
    assert "CPU time limit" in looping.render()
    loud = await sandbox.run_python("while True: print('x' * 1000)", workspace)
    assert loud.output_limited and "SANDBOX_MAX_OUTPUT_BYTES" in loud.render()


async def test_audit_mode_refuses_the_shell_unless_allowed(audit_sandbox):
    sandbox, workspace = audit_sandbox
    with pytest.raises(ToolError, match="SANDBOX_ALLOW_UNISOLATED_SHELL"):
        await sandbox.run_shell("echo hi", workspace)
    sandbox.settings.sandbox_allow_unisolated_shell = True
    result = await sandbox.run_shell("echo hi", workspace)
    assert result.exit_code == 0 and result.stdout.strip() == "hi"


async def test_without_bubblewrap_the_code_tools_refuse(tmp_path):
    """No silent fallback: a host without bwrap gets a refusal naming what is missing."""
    sandbox = Sandbox(GaiaEnvSettings(workspace_root=tmp_path))
    sandbox.bwrap = None  # as on a host where the package is not installed
    assert sandbox.probe() == "unavailable" and "bubblewrap" in sandbox.reason
    workspace, _ = WorkspaceManager(tmp_path).get("ep")
    for run in (sandbox.run_python("print(1)", workspace), sandbox.run_shell("echo 1", workspace)):
        with pytest.raises(ToolError, match="apt-get install bubblewrap"):
            await run
