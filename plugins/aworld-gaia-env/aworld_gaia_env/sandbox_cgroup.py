"""A cgroup per sandboxed run: one memory and process ceiling for everything the run starts.

The rlimits bound each process (address space, CPU time) and the uid's process count; a cgroup
bounds their sum, so 24 processes of 700 MB each cannot take 17 GB together. Each run gets a
child cgroup of the server's own (so the container's limits still apply above it), with
``memory`` (the run's ``SANDBOX_MEMORY_MB`` plus its tmpfs and workspace quota, since tmpfs pages
are charged to the writer) and ``pids`` limits; the launcher joins it before it drops root.
Works with cgroup v2 (the controllers must be enabled for the server's cgroup's children) and
v1 (``memory`` and ``pids`` hierarchies). Where neither is writable (an unprivileged container)
the run goes on under the rlimits alone, and ``/health`` and the start-up log say so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from pathlib import Path

logger = logging.getLogger("aworld_gaia_env.sandbox")

CONTROLLERS = ("memory", "pids")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _own_cgroups() -> tuple[dict[str, str], str | None]:
    """``{v1 controller: path}`` and the v2 path of this process (from /proc/self/cgroup)."""
    v1: dict[str, str] = {}
    v2 = None
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                v2 = path
            for name in controllers.split(","):
                v1[name] = path
    return v1, v2


def _mounts() -> tuple[dict[str, tuple[str, str]], tuple[str, str] | None]:
    """``{v1 controller: (mount point, root)}`` and the v2 ``(mount point, root)``."""
    v1: dict[str, tuple[str, str]] = {}
    v2 = None
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if not tail:
                continue
            root, point = _unescape(fields[3]), _unescape(fields[4])
            if tail[0] == "cgroup2":
                v2 = (point, root)
            elif tail[0] == "cgroup" and len(tail) > 2:
                for option in tail[2].split(","):
                    if option in CONTROLLERS:
                        v1[option] = (point, root)
    return v1, v2


def _join(mount: tuple[str, str], path: str) -> Path:
    point, root = mount
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return Path(point) / ("" if relative == "." else relative)


class Cgroups:
    """Creates and removes the per-run cgroups (v2, else v1), when this process may."""

    def __init__(self) -> None:
        self.version = 0
        self.bases: dict[str, Path] = {}
        self.reason = ""
        try:
            self._find()
        except OSError as exc:
            self.bases, self.reason = {}, f"cannot read this process's cgroups: {exc}"

    @property
    def available(self) -> bool:
        return bool(self.bases)

    def _find(self) -> None:
        own_v1, own_v2 = _own_cgroups()
        mounts_v1, mount_v2 = _mounts()
        if all(c in own_v1 and c in mounts_v1 for c in CONTROLLERS):
            bases = {c: _join(mounts_v1[c], own_v1[c]) for c in CONTROLLERS}
            if self._probe(bases):
                self.version, self.bases = 1, bases
                return
        if own_v2 is not None and mount_v2 is not None:
            base = _join(mount_v2, own_v2)
            try:
                enabled = (base / "cgroup.subtree_control").read_text().split()
                missing = [c for c in CONTROLLERS if c not in enabled]
                if missing:
                    (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
            except OSError as exc:
                self.reason = f"the memory and pids controllers are not enabled below {base} ({exc.strerror})"
                return
            if self._probe({"unified": base}):
                self.version, self.bases = 2, {"unified": base}
                return
        self.reason = self.reason or "no writable memory and pids cgroup for this process"

    def _probe(self, bases: dict[str, Path]) -> bool:
        made = []
        try:
            for base in bases.values():
                probe = base / f"aworld-probe-{os.getpid()}"
                probe.mkdir()
                made.append(probe)
            return True
        except OSError as exc:
            self.reason = f"cannot create a cgroup ({exc.strerror})"
            return False
        finally:
            for probe in made:
                with contextlib.suppress(OSError):
                    probe.rmdir()

    def create(self, name: str, *, memory_bytes: int, pids: int) -> list[str]:
        """The run's cgroup directories (empty when cgroups are unavailable)."""
        made: list[str] = []
        try:
            for controller, base in self.bases.items():
                path = base / f"aworld-sandbox-{name}"
                path.mkdir()
                made.append(str(path))
                if self.version == 2:
                    (path / "memory.max").write_text(str(memory_bytes))
                    with contextlib.suppress(OSError):  # absent without swap accounting
                        (path / "memory.swap.max").write_text("0")
                    (path / "pids.max").write_text(str(pids))
                elif controller == "memory":
                    (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
                else:
                    (path / "pids.max").write_text(str(pids))
        except OSError as exc:
            self.remove(made)
            raise RuntimeError(f"cannot set up the run's cgroup: {exc}") from None
        return made

    def oom_killed(self, paths: list[str]) -> bool:
        """Whether the memory limit killed a process of the run."""
        for path in paths:
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError):
                    for line in (Path(path) / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and value.strip() not in ("", "0"):
                            return True
        return False

    def remove(self, paths: list[str]) -> None:
        """Remove the run's cgroups once its processes are gone (the kernel reaps them quickly)."""
        for path in paths:
            for _ in range(200):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            else:
                logger.warning("could not remove the sandbox cgroup %s", path)
