"""What the GAIA environment's bubblewrap sandbox and workspace quota cost, next to their baselines.

1. One ``run_python("pass")`` / ``run_shell("true")`` under ``bwrap`` (namespaces, seccomp,
   staging mounts, cgroup) against the ``audit`` opt-out (rlimits only) in the same run.
2. Making and removing one episode's workspace: a plain 0700 directory (no quota), a
   size-limited tmpfs (the chosen quota), and a loop-mounted ext4 image (the alternative).

Run as root (mounts): ``.venv/bin/python benchmarks/gaia_sandbox_overhead.py [--runs 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def _stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"p50 {statistics.median(ordered) * 1e3:7.1f} ms   p90 {ordered[int(len(ordered) * 0.9) - 1] * 1e3:7.1f} ms"


async def _sandbox_runs(runs: int) -> None:
    from aworld_gaia_env.sandbox import Sandbox
    from aworld_gaia_env.settings import GaiaEnvSettings
    from aworld_gaia_env.workspace import WorkspaceManager

    root = Path(tempfile.mkdtemp(prefix="gaia-bench-"))
    try:
        manager = WorkspaceManager(root / "ws", quota_mb=64)
        workspace, _ = manager.get("bench")
        print("sandboxed run (wall clock, launcher included)")
        for mode in ("audit", "bwrap"):
            sandbox = Sandbox(GaiaEnvSettings(workspace_root=root / "ws", sandbox_isolation=mode, workspace_quota_mb=64))
            assert sandbox.probe() == mode, sandbox.reason
            for label, run in (("python pass", lambda s=sandbox: s.run_python("pass", workspace)),
                               ("shell true ", lambda s=sandbox: s.run([("/bin/true")], workspace))):
                samples = []
                for _ in range(runs):
                    started = time.perf_counter()
                    result = await run()
                    samples.append(time.perf_counter() - started)
                    assert result.exit_code == 0, result.render()
                print(f"  {mode:5s} {label}: {_stats(samples)}")
        manager.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _workspace_setups(runs: int, size_mb: int) -> None:
    from aworld_gaia_env.workspace import _mount_quota, _unmount

    root = Path(tempfile.mkdtemp(prefix="gaia-bench-"))
    print(f"workspace create + remove ({size_mb} MB quota where there is one)")
    try:
        def plain(path: Path) -> None:
            path.mkdir()
            os.chown(path, 200_001, 200_001)
            os.chmod(path, 0o700)
            shutil.rmtree(path)

        def tmpfs(path: Path) -> None:
            path.mkdir()
            _mount_quota(path, size_mb, 200_001)
            _unmount(path)
            path.rmdir()

        def loop_ext4(path: Path) -> None:
            image = path.with_suffix(".img")
            path.mkdir()
            with open(image, "wb") as handle:
                handle.truncate(size_mb * 2**20)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "root_owner=200001:200001", str(image)], check=True)
            subprocess.run(["mount", "-o", "loop,nosuid,nodev", str(image), str(path)], check=True)
            subprocess.run(["umount", str(path)], check=True)
            path.rmdir()
            image.unlink()

        for label, make in (("plain dir (no quota)", plain), ("tmpfs (chosen)", tmpfs), ("loop ext4 image", loop_ext4)):
            samples = []
            try:
                for i in range(runs):
                    started = time.perf_counter()
                    make(root / f"{label.split()[0]}-{i}")
                    samples.append(time.perf_counter() - started)
                print(f"  {label:22s}: {_stats(samples)}")
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"  {label:22s}: not possible here ({exc})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quota-mb", type=int, default=1024)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the workspace quota and the sandbox's staging mounts need it")
    asyncio.run(_sandbox_runs(args.runs))
    _workspace_setups(max(5, args.runs // 2), args.quota_mb)


if __name__ == "__main__":
    main()
