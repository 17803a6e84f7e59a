"""The symlink-swap race on a root-side read: the old check-then-open next to the O_NOFOLLOW walk.

Sandboxed code (the real bubblewrap sandbox) swaps a workspace directory ``rd`` with a symlink to
a root-only host directory as fast as it can (``renameat2(RENAME_EXCHANGE)``); meanwhile the server
side reads ``rd/secret.txt`` N times each way: resolving with ``realpath``, checking containment,
then opening in a worker thread as the tools did before issue 17, and through
``Workspace.read_bytes``. Prints how many reads returned the host's secret ("leak"), the decoy, or
were refused. Run as root: ``.venv/bin/python benchmarks/gaia_symlink_race.py [--reads 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from pathlib import Path

RACER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.symlink({target!r}, 'link')
swaps = 0
while not os.path.exists('stop'):
    if libc.renameat2(-100, b'rd', -100, b'link', 2) != 0:
        raise OSError(ctypes.get_errno(), 'renameat2')
    swaps += 1
print(swaps)
"""


async def main(reads: int) -> None:
    from aworld_gaia_env.errors import ToolError
    from aworld_gaia_env.sandbox import Sandbox
    from aworld_gaia_env.settings import GaiaEnvSettings
    from aworld_gaia_env.workspace import WorkspaceManager

    root = Path(tempfile.mkdtemp(prefix="gaia-race-"))
    try:
        secret = root / "rootonly"
        secret.mkdir(mode=0o700)
        (secret / "secret.txt").write_text("HOST-SECRET")
        os.chmod(secret / "secret.txt", 0o600)
        settings = GaiaEnvSettings(workspace_root=root / "ws", sandbox_cpu_s=120, sandbox_timeout_s=120, workspace_quota_mb=16)
        manager = WorkspaceManager(root / "ws", quota_mb=16)
        sandbox = Sandbox(settings)
        if sandbox.probe() != "bwrap":
            raise SystemExit(f"the sandbox is unavailable: {sandbox.reason}")
        workspace, _ = manager.get("race")
        workspace.add_file("rd/secret.txt", b"decoy")
        racer = asyncio.ensure_future(sandbox.run_python(RACER.format(target=str(secret)), workspace))
        await asyncio.sleep(1.0)
        old = {"leak": 0, "decoy": 0, "refused": 0}
        new = {"leak": 0, "decoy": 0, "refused": 0}

        def read_old(path: str) -> bytes:
            with open(path, "rb") as handle:
                return handle.read()

        for _ in range(reads):
            try:
                real = os.path.realpath(workspace.path / "rd" / "secret.txt")  # the former Workspace.resolve
            except OSError:
                real = "/"
            if real.startswith(str(workspace.path) + "/"):
                try:
                    data = await asyncio.to_thread(read_old, real)  # the former tools read in a thread
                    old["leak" if b"HOST" in data else "decoy"] += 1
                except OSError:
                    old["refused"] += 1
            else:
                old["refused"] += 1
            try:
                data = await asyncio.to_thread(workspace.read_bytes, "rd/secret.txt")
                new["leak" if b"HOST" in data else "decoy"] += 1
            except ToolError:
                new["refused"] += 1
        workspace.add_file("stop", b"")
        swaps = (await racer).stdout.strip()
        print(f"{reads} reads each while the sandbox swapped the directory {swaps} times")
        print(f"  check-then-open (before): {old}")
        print(f"  O_NOFOLLOW walk (now)   : {new}")
        manager.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=200)
    asyncio.run(main(parser.parse_args().reads))
