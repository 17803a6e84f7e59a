"""Running model-written code and shell commands in the episode's workspace, isolated and limited.

Two modes, chosen by ``SANDBOX_ISOLATION`` and checked once per process by :meth:`Sandbox.probe`:

* ``bwrap`` (the default): every run gets fresh user, mount, pid, network, ipc, uts and cgroup
  namespaces from bubblewrap. Its root is a tmpfs holding, read-only, only ``/usr`` (with the
  ``/bin``, ``/lib`` links), the interpreter's prefixes, a handful of ``/etc`` files (the loader
  cache, ``alternatives``, a one-line ``passwd``/``group``; resolver and CA files only when the
  network is allowed), plus the episode's workspace read-write, a private 64 MiB ``/tmp`` and
  ``/dev/shm``, a ``/proc`` of its own pid namespace and a minimal ``/dev``. No host unix socket,
  no other episode, no host ``/proc``; no network unless ``SANDBOX_ALLOW_NETWORK=true``
  (``--share-net``). The process runs as the episode's own unprivileged uid, under a seccomp
  filter (:mod:`aworld_gaia_env.sandbox_seccomp`) and the resource limits below. If bubblewrap
  is missing or cannot build a sandbox here, the code tools refuse with the reason; nothing falls
  back to weaker isolation.
* ``audit`` (explicit opt-out for trusted local use, logged as an error at every start):
  resource limits plus, for Python, an audit hook that refuses sockets, writes outside the
  workspace, new processes and ctypes. The terminal stays off unless
  ``SANDBOX_ALLOW_UNISOLATED_SHELL=true``.

Both: CPU time (RLIMIT_CPU), address space (RLIMIT_AS), file size and process limits, a
wall-clock timeout and a cap on captured output; whatever exceeds a limit is killed with all it
started (the command is pid 1 of its own pid namespace: its death ends every process in it), and
the result says which limit it hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.sandbox_cgroup import Cgroups
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.workspace import SCRATCH

if TYPE_CHECKING:
    from aworld_gaia_env.workspace import Workspace

logger = logging.getLogger("aworld_gaia_env.sandbox")

LAUNCHER = str(Path(__file__).with_name("sandbox_launch.py"))
BOOT = str(Path(__file__).with_name("sandbox_boot.py"))
LAUNCHER_FAILED = 125
RUN_DIR = "/run/sandbox"  # inside the sandbox: the Python bootstrap and the snippet, read-only
# /etc entries the sandbox gets (when present); the rest of the host's /etc stays out
ETC_ALWAYS = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "mime.types", "fonts")
ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "gai.conf", "host.conf", "ssl", "ca-certificates",
               "ca-certificates.conf")
MERGED_USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass
class SandboxResult:
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    output_limited: bool = False
    limit_note: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_limited

    def render(self) -> str:
        """The text the model sees: exit status, both streams, and which limit (if any) was hit."""
        parts = [f"exit code: {self.exit_code if self.exit_code is not None else 'killed'}"]
        if self.stdout:
            parts.append("--- stdout ---\n" + self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("--- stderr ---\n" + self.stderr.rstrip("\n"))
        if not self.stdout and not self.stderr:
            parts.append("(no output)")
        if self.limit_note:
            parts.append(f"[{self.limit_note}]")
        return "\n".join(parts)


def find_bwrap() -> str | None:
    return shutil.which("bwrap") or ("/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None)


def _python_roots() -> list[str]:
    """Directories the sandboxed interpreter needs: its prefixes (the venv and its base)."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    roots = sorted(os.path.realpath(p) for p in candidates if p and os.path.isdir(p))
    kept: list[str] = []
    for root in roots:  # /usr is bound anyway; drop anything inside it or inside another root
        if root == "/" or root == "/usr" or root.startswith("/usr/"):
            continue
        if not any(root.startswith(k + "/") for k in kept):
            kept.append(root)
    return kept


class Sandbox:
    """Starts sandboxed processes; one per process, shared by all sessions."""

    def __init__(self, settings: GaiaEnvSettings):
        self.settings = settings
        self.mode = "unprobed"
        self.reason = ""
        self.bwrap = find_bwrap()
        self.bwrap_features: list[str] = []
        self._probe_lock = threading.Lock()
        self._seccomp: dict[bool, str] = {}
        self._runs = itertools.count()
        self.cgroups: Cgroups | None = None

    # ------------------------------------------------------------------------------------------
    # Probing
    # ------------------------------------------------------------------------------------------

    def probe(self) -> str:
        """Check the configured isolation once by running it (blocking; call from a thread)."""
        with self._probe_lock:
            if self.mode != "unprobed":
                return self.mode
            self.cgroups = Cgroups()
            if self.cgroups.available:
                logger.info("sandboxed runs get a cgroup (v%d) for memory and processes", self.cgroups.version)
            else:
                logger.warning("sandboxed runs get no cgroup, only rlimits: %s", self.cgroups.reason)
            if self.settings.sandbox_isolation == "audit":
                self.mode, self.reason = "audit", "SANDBOX_ISOLATION=audit"
                logger.error(
                    "SANDBOX_ISOLATION=audit: model-written code runs WITHOUT kernel isolation (rlimits and a "
                    "Python audit hook only; it can read every file this user can). Use this for trusted local "
                    "runs only; the default, bwrap, isolates each run with bubblewrap"
                )
                return self.mode
            ok, why = self._try_bwrap()
            if ok:
                self.mode = "bwrap"
            else:
                self.mode, self.reason = "unavailable", why
                logger.error("the code sandbox is unavailable, so intelligence-code and terminal will refuse: %s", why)
            return self.mode

    def _try_bwrap(self) -> tuple[bool, str]:
        if not sys.platform.startswith("linux"):
            return False, "the bubblewrap sandbox needs Linux"
        if self.bwrap is None:
            return False, (
                "bubblewrap (bwrap) is not installed: install the 'bubblewrap' package (apt-get install bubblewrap; "
                "make test and the Dockerfile do), or set SANDBOX_ISOLATION=audit for trusted local use"
            )
        from aworld_gaia_env.sandbox_seccomp import supported_arch

        if supported_arch() is None:
            return False, "the sandbox's seccomp filter has no syscall table for this architecture"
        try:
            usage = subprocess.run([self.bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{self.bwrap} --help failed: {exc}"
        self.bwrap_features = [flag for flag in ("--disable-userns", "--size") if flag in usage]
        from aworld_gaia_env.workspace import Workspace, prepare_directory

        probe = Path(os.path.realpath(self.settings.workspace_root)) / ".sandbox-probe"
        uid = self.settings.sandbox_uid_base if os.geteuid() == 0 else os.getuid()
        try:
            probe.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            prepare_directory(probe, uid)
        except OSError as exc:
            return False, f"cannot prepare a workspace for the sandbox's self-test under {probe.parent}: {exc}"
        workspace = Workspace(".sandbox-probe", probe, uid)
        config = self._config(workspace, [sys.executable, "-I", "-S", "-c", "import os; os.listdir('.')"])
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-B", LAUNCHER],
                input=json.dumps(config).encode(),
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"the sandbox launcher did not run: {exc}"
        finally:
            shutil.rmtree(probe, ignore_errors=True)
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
            return False, (
                f"bubblewrap could not build a sandbox here ({detail}); it needs user namespaces (or root with "
                f"CAP_SYS_ADMIN in a container, see docs/gaia-env.md), or set SANDBOX_ISOLATION=audit for trusted local use"
            )
        return True, ""

    # ------------------------------------------------------------------------------------------
    # Running
    # ------------------------------------------------------------------------------------------

    async def run_python(self, code: str, workspace: Workspace, *, timeout_s: float | None = None) -> SandboxResult:
        """Run ``code`` with the sandboxed interpreter (this server's, so its packages are there)."""
        files = [(f"{RUN_DIR}/boot.py", Path(BOOT).read_text(encoding="utf-8")), (f"{RUN_DIR}/main.py", code)]
        argv = [sys.executable, "-I", "-B", "-u", f"{RUN_DIR}/boot.py", f"{RUN_DIR}/main.py"]
        return await self.run(argv, workspace, timeout_s=timeout_s, files=files)

    async def run_shell(self, command: str, workspace: Workspace, *, timeout_s: float | None = None) -> SandboxResult:
        mode = await self._mode()
        if mode != "bwrap" and not self.settings.sandbox_allow_unisolated_shell:
            raise ToolError(
                "the terminal is disabled: SANDBOX_ISOLATION=audit cannot keep shell commands off the network "
                "and the file system. Use SANDBOX_ISOLATION=bwrap (bubblewrap), or set "
                "SANDBOX_ALLOW_UNISOLATED_SHELL=true to accept unisolated commands"
            )
        shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        return await self.run([shell, "-c", command], workspace, timeout_s=timeout_s)

    async def _mode(self) -> str:
        if self.mode == "unprobed":
            await asyncio.to_thread(self.probe)
        if self.mode == "unavailable":
            raise ToolError(f"the code sandbox is unavailable on this host: {self.reason}")
        return self.mode

    def _seccomp_hex(self, network: bool) -> str:
        if network not in self._seccomp:
            from aworld_gaia_env.sandbox_seccomp import build_filter

            self._seccomp[network] = build_filter(shared_network=network).hex()
        return self._seccomp[network]

    def _config(self, workspace: Workspace, argv: list[str], files: list[tuple[str, str]] = ()) -> dict[str, object]:  # type: ignore[assignment]
        s = self.settings
        mode = "audit" if self.settings.sandbox_isolation == "audit" else "bwrap"
        path = str(workspace.path)
        venv_bin = os.path.join(sys.prefix, "bin")
        env = {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": path,
            "TMPDIR": "/tmp",
            "XDG_CACHE_HOME": "/tmp/.cache",
            "MPLCONFIGDIR": "/tmp/.matplotlib",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            "MPLBACKEND": "Agg",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "AWORLD_SANDBOX_WS": path,
            "AWORLD_SANDBOX_GUARD": "none" if s.sandbox_allow_network else ("net" if mode == "bwrap" else "full"),
        }
        config: dict[str, object] = {
            "mode": mode,
            "workspace": path,
            "network": s.sandbox_allow_network,
            "cpu_s": s.sandbox_cpu_s,
            "memory_mb": s.sandbox_memory_mb,
            "file_mb": s.sandbox_max_file_mb,
            # bwrap's own two processes count against the uid's limit too
            "nproc": s.sandbox_max_processes + (3 if mode == "bwrap" else _count_processes(os.getuid())),
            "uid": workspace.uid,
            "argv": argv,
            "env": env,
        }
        if mode == "audit":
            if files:  # no private file system: the files go to a scratch directory in the workspace
                config["argv"] = [a.replace(RUN_DIR, str(workspace.path / SCRATCH)) for a in argv]
                for dest, text in files:  # race-free, as every root-side write into a workspace
                    workspace.add_file(f"{SCRATCH}/{os.path.basename(dest)}", text.encode("utf-8"))
            return config
        etc = list(ETC_ALWAYS) + (list(ETC_NETWORK) if s.sandbox_allow_network else [])
        binds = [["ro", "/usr", "/usr"]]
        binds += [["ro", root, root] for root in _python_roots()]
        binds += [["ro", f"/etc/{name}", f"/etc/{name}"] for name in etc if os.path.exists(f"/etc/{name}")]
        binds.append(["rw", path, path])
        uid = workspace.uid
        config.update(
            bwrap=self.bwrap,
            bwrap_features=self.bwrap_features,
            binds=binds,
            symlinks=[[f"/{name}", f"usr/{name}"] for name in MERGED_USR_LINKS if os.path.islink(f"/{name}")],
            files=[
                ["/etc/passwd", f"sandbox:x:{uid}:{uid}:sandbox:{path}:/bin/sh\n"],
                ["/etc/group", f"sandbox:x:{uid}:\n"],
                *[[dest, text] for dest, text in files],
            ],
            seccomp=self._seccomp_hex(s.sandbox_allow_network),
        )
        return config

    async def run(
        self, argv: list[str], workspace: Workspace, *, timeout_s: float | None = None, files: list[tuple[str, str]] = ()  # type: ignore[assignment]
    ) -> SandboxResult:
        await self._mode()
        s = self.settings
        timeout = min(timeout_s or s.sandbox_timeout_s, s.sandbox_timeout_s)
        config = self._config(workspace, argv, files)
        cgroups = self.cgroups if self.cgroups is not None and self.cgroups.available else None
        groups: list[str] = []
        if cgroups is not None:
            # tmpfs pages count for their writer: the run's /tmp, /dev/shm and workspace writes
            extra_mb = 128 + (s.workspace_quota_mb or 0)
            try:
                groups = cgroups.create(
                    f"{os.getpid()}-{next(self._runs)}",
                    memory_bytes=(s.sandbox_memory_mb + extra_mb) * 2**20,
                    pids=s.sandbox_max_processes + 3,
                )
            except RuntimeError as exc:
                raise ToolError(f"the sandbox could not start the command: {exc}") from None
        config["cgroups"] = groups
        started = time.monotonic()
        with workspace.in_use():
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", "-B", LAUNCHER,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            assert process.stdin is not None
            try:
                process.stdin.write(json.dumps(config).encode())
                await process.stdin.drain()
                process.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the launcher died early; its stderr says why
            try:
                result = await self._supervise(process, timeout, started)
            finally:
                if cgroups is not None:
                    oom = cgroups.oom_killed(groups)
                    await asyncio.to_thread(cgroups.remove, groups)
        if cgroups is not None and oom and not result.timed_out:
            result.limit_note = (
                f"killed: the run's processes together used more than the memory limit "
                f"({s.sandbox_memory_mb} MB, SANDBOX_MEMORY_MB, plus its tmpfs)"
            )
        if result.exit_code == LAUNCHER_FAILED and result.stderr.startswith("sandbox launcher:"):
            raise ToolError(f"the sandbox could not start the command: {result.stderr.strip()}")
        if result.exit_code == 1 and result.stderr.startswith("bwrap:"):
            raise ToolError(f"the sandbox could not start the command: {result.stderr.strip()}")
        return result

    async def _stop(self, process: asyncio.subprocess.Process, waiter: asyncio.Future) -> None:
        """Kill a run. In bwrap mode the command is pid 1 of the run's pid namespace (``--as-pid-1``)
        and bubblewrap's child: it goes first, so that its death takes every process of the
        namespace and bubblewrap still reaps it (killed first, bubblewrap would leave it a zombie of
        the container's pid 1, which in an image whose entry point is this server never reaps)."""
        if self.mode == "bwrap":
            for child in _children(process.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGKILL)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), timeout=2)
                return
            except TimeoutError:
                pass
        _kill_group(process.pid)

    async def _supervise(self, process: asyncio.subprocess.Process, timeout: float, started: float) -> SandboxResult:
        cap = self.settings.sandbox_max_output_bytes
        over = asyncio.Event()
        buffers: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

        async def drain(name: str, stream: asyncio.StreamReader) -> None:
            # keep reading past the cap (and drop it): a reader that stops would leave the pipe
            # paused, so its EOF, and with it the process's exit, would never be seen
            buffer = buffers[name]
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                room = cap - len(buffer)
                if len(chunk) > room:
                    buffer.extend(chunk[: max(room, 0)])
                    over.set()
                else:
                    buffer.extend(chunk)

        readers = [
            asyncio.ensure_future(drain("stdout", process.stdout)),  # type: ignore[arg-type]
            asyncio.ensure_future(drain("stderr", process.stderr)),  # type: ignore[arg-type]
        ]
        waiter = asyncio.ensure_future(process.wait())
        limiter = asyncio.ensure_future(over.wait())
        timed_out = output_limited = False
        try:
            done, _ = await asyncio.wait({waiter, limiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if waiter not in done:
                if limiter in done:
                    output_limited = True
                else:
                    timed_out = True
                await self._stop(process, waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), timeout=10)
            except TimeoutError:
                logger.error("sandboxed process %s did not exit after SIGKILL", process.pid)
            await asyncio.wait(readers, timeout=5)
            output_limited = output_limited or over.is_set()
        finally:
            limiter.cancel()
            for reader in readers:
                reader.cancel()
            _kill_group(process.pid)  # whatever the command left in the launcher's group (audit mode)
        code = process.returncode
        note = ""
        s = self.settings
        if timed_out:
            note = f"killed: still running after the time limit of {timeout:g} s (SANDBOX_TIMEOUT_S)"
        elif output_limited:
            note = f"killed: output exceeded the limit of {cap} bytes (SANDBOX_MAX_OUTPUT_BYTES); output is cut there"
        elif code is not None and code < 0:
            sig = -code
            if sig in (signal.SIGXCPU, signal.SIGKILL) and time.monotonic() - started < timeout:
                note = f"killed by signal {signal.Signals(sig).name}: CPU time limit of {s.sandbox_cpu_s} s (SANDBOX_CPU_S) reached"
            else:
                note = f"killed by signal {signal.Signals(sig).name}"
        elif code is not None and code > 128 and code - 128 in (signal.SIGXCPU, signal.SIGKILL):
            # bwrap reports its command's death by signal as 128 + signal
            name = signal.Signals(code - 128).name
            note = f"killed by signal {name}: CPU time limit of {s.sandbox_cpu_s} s (SANDBOX_CPU_S) reached"
        stderr = buffers["stderr"].decode("utf-8", "replace")
        if code not in (None, 0) and ("MemoryError" in stderr or "Cannot allocate memory" in stderr):
            note = note or f"out of memory: the limit is {s.sandbox_memory_mb} MB (SANDBOX_MEMORY_MB)"
        if code not in (None, 0) and ("Resource temporarily unavailable" in stderr or "BlockingIOError" in stderr):
            note = note or f"process limit reached: at most {s.sandbox_max_processes} processes (SANDBOX_MAX_PROCESSES)"
        if code not in (None, 0) and "No space left on device" in stderr:
            note = note or (
                f"the workspace is full: its quota is {s.workspace_quota_mb} MB (GAIA_ENV_WORKSPACE_QUOTA_MB)"
            )
        return SandboxResult(
            exit_code=None if (timed_out or output_limited) else code,
            stdout=buffers["stdout"].decode("utf-8", "replace"),
            stderr=stderr,
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            output_limited=output_limited,
            limit_note=note,
        )


def _kill_group(pid: int) -> None:
    """SIGKILL the launcher's process group: the command and what it started in audit mode, and
    in bwrap mode bubblewrap, whose death (``--die-with-parent``) ends the sandbox's pid namespace."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (from /proc, without CONFIG_PROC_CHILDREN)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _count_processes(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(f"/proc/{entry.name}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count
