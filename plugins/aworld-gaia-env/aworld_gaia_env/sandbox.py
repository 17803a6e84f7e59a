"""Running model-written code and shell commands with limits, in the episode's workspace.

Two isolation modes, chosen once per process by :meth:`Sandbox.probe` (``SANDBOX_ISOLATION``):

* ``namespaces`` (root, or CAP_SYS_ADMIN): the launcher puts the command in fresh network and
  mount namespaces (no network at all; every mount read-only except the workspace) and drops to a
  throwaway uid, so ``RLIMIT_NPROC`` stops fork bombs and root-only files stay unreadable.
* ``audit``: resource limits, plus (for Python) an audit hook that refuses sockets, writes outside
  the workspace, new processes and ctypes. Shell commands cannot be guarded this way, so the
  terminal refuses to run in this mode unless ``SANDBOX_ALLOW_UNISOLATED_SHELL=true``.

Both modes: CPU-time (RLIMIT_CPU), address-space (RLIMIT_AS), file-size and process limits,
a wall-clock timeout, and a cap on captured output; whatever exceeds a limit is killed, together
with everything it started, and the result says which limit it hit.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.settings import GaiaEnvSettings

logger = logging.getLogger("aworld_gaia_env.sandbox")

LAUNCHER = str(Path(__file__).with_name("sandbox_launch.py"))
BOOT = str(Path(__file__).with_name("sandbox_boot.py"))
LAUNCHER_FAILED = 125


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


class Sandbox:
    """Starts sandboxed processes; one per process, shared by all sessions."""

    def __init__(self, settings: GaiaEnvSettings):
        self.settings = settings
        self.mode = "unprobed"
        self.reason = ""
        self._probe_lock = threading.Lock()
        self._uids_lock = threading.Lock()
        self._uids_in_use: set[int] = set()
        self._uid_counter = itertools.count()

    # ------------------------------------------------------------------------------------------
    # Probing
    # ------------------------------------------------------------------------------------------

    def probe(self) -> str:
        """Decide the isolation mode by trying it once (blocking; call from a thread)."""
        with self._probe_lock:
            if self.mode != "unprobed":
                return self.mode
            wanted = self.settings.sandbox_isolation
            if wanted == "audit":
                self.mode, self.reason = "audit", "SANDBOX_ISOLATION=audit"
                return self.mode
            ok, why = self._try_namespaces()
            if ok:
                self.mode = "namespaces"
            elif wanted == "namespaces":
                self.mode, self.reason = "unavailable", why
                logger.error("SANDBOX_ISOLATION=namespaces but namespaces do not work here: %s", why)
            else:
                self.mode, self.reason = "audit", why
                logger.warning(
                    "kernel sandbox unavailable (%s); Python runs under rlimits plus an audit hook and the "
                    "terminal is disabled unless SANDBOX_ALLOW_UNISOLATED_SHELL=true",
                    why,
                )
            return self.mode

    def _try_namespaces(self) -> tuple[bool, str]:
        if not sys.platform.startswith("linux"):
            return False, "kernel isolation needs Linux"
        probe_dir = Path(os.path.realpath(self.settings.workspace_root)) / ".sandbox-probe"
        probe_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(probe_dir, 0o777)
        config = self._config("namespaces", str(probe_dir), [sys.executable, "-I", "-S", "-c", "pass"], 2_000_000 + os.getpid() % 1000)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-B", LAUNCHER, json.dumps(config)],
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"launcher did not run: {exc}"
        if done.returncode != 0:
            return False, done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        return True, ""

    # ------------------------------------------------------------------------------------------
    # Running
    # ------------------------------------------------------------------------------------------

    async def run_python(self, code: str, workspace: Path, *, timeout_s: float | None = None) -> SandboxResult:
        """Run ``code`` with the sandboxed interpreter (this server's, so its packages are there)."""
        scratch = workspace / ".sandbox"
        scratch.mkdir(exist_ok=True)
        os.chmod(scratch, 0o777)
        script = scratch / f"snippet_{os.getpid()}_{next(self._uid_counter)}.py"
        script.write_text(code, encoding="utf-8")
        try:
            return await self.run([sys.executable, "-I", "-B", "-u", BOOT, str(script)], workspace, timeout_s=timeout_s)
        finally:
            script.unlink(missing_ok=True)

    async def run_shell(self, command: str, workspace: Path, *, timeout_s: float | None = None) -> SandboxResult:
        mode = await self._mode()
        if mode != "namespaces" and not self.settings.sandbox_allow_unisolated_shell:
            raise ToolError(
                "the terminal is disabled: this host cannot isolate shell commands from the network and the "
                f"file system ({self.reason}). Run the environment as root (or with CAP_SYS_ADMIN) so kernel "
                "namespaces work, or set SANDBOX_ALLOW_UNISOLATED_SHELL=true to accept unisolated commands"
            )
        shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        return await self.run([shell, "-c", command], workspace, timeout_s=timeout_s)

    async def _mode(self) -> str:
        if self.mode == "unprobed":
            await asyncio.to_thread(self.probe)
        if self.mode == "unavailable":
            raise ToolError(f"the sandbox is unavailable on this host ({self.reason}); set SANDBOX_ISOLATION=auto or audit")
        return self.mode

    def _config(self, mode: str, workspace: str, argv: list[str], uid: int) -> dict[str, object]:
        s = self.settings
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workspace,
            "TMPDIR": os.path.join(workspace, ".sandbox"),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            "MPLBACKEND": "Agg",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "AWORLD_SANDBOX_WS": workspace,
            "AWORLD_SANDBOX_GUARD": "none" if s.sandbox_allow_network else ("net" if mode == "namespaces" else "full"),
        }
        readable = sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(LAUNCHER)})
        nproc = s.sandbox_max_processes
        if mode != "namespaces":
            nproc += _count_processes(os.getuid())  # the limit counts every process of our uid
        return {
            "mode": mode,
            "workspace": workspace,
            "network": s.sandbox_allow_network,
            "readable": readable,
            "cpu_s": s.sandbox_cpu_s,
            "memory_mb": s.sandbox_memory_mb,
            "file_mb": s.sandbox_max_file_mb,
            "nproc": nproc,
            "uid": uid,
            "argv": argv,
            "env": env,
        }

    def _take_uid(self) -> int:
        with self._uids_lock:
            while True:
                uid = self.settings.sandbox_uid_base + next(self._uid_counter) % 50_000
                if uid not in self._uids_in_use:
                    self._uids_in_use.add(uid)
                    return uid

    async def run(self, argv: list[str], workspace: Path, *, timeout_s: float | None = None) -> SandboxResult:
        mode = await self._mode()
        s = self.settings
        timeout = min(timeout_s or s.sandbox_timeout_s, s.sandbox_timeout_s)
        uid = self._take_uid() if mode == "namespaces" else os.getuid()
        (workspace / ".sandbox").mkdir(exist_ok=True)
        os.chmod(workspace / ".sandbox", 0o777)
        config = self._config(mode, str(workspace), argv, uid)
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", "-B", LAUNCHER, json.dumps(config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            result = await self._supervise(process, timeout, uid if mode == "namespaces" else None, started)
        finally:
            if mode == "namespaces":
                await asyncio.to_thread(_kill_uid, uid)
                with self._uids_lock:
                    self._uids_in_use.discard(uid)
        if result.exit_code == LAUNCHER_FAILED and result.stderr.startswith("sandbox launcher:"):
            raise ToolError(f"the sandbox could not start the command: {result.stderr.strip()}")
        return result

    async def _supervise(
        self, process: asyncio.subprocess.Process, timeout: float, uid: int | None, started: float
    ) -> SandboxResult:
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
                await asyncio.to_thread(_kill_group, process.pid, uid)
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
            if process.returncode is None:
                await asyncio.to_thread(_kill_group, process.pid, uid)
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
        stderr = buffers["stderr"].decode("utf-8", "replace")
        if code not in (None, 0) and ("MemoryError" in stderr or "Cannot allocate memory" in stderr):
            note = note or f"out of memory: the limit is {s.sandbox_memory_mb} MB (SANDBOX_MEMORY_MB)"
        if code not in (None, 0) and ("Resource temporarily unavailable" in stderr or "BlockingIOError" in stderr):
            note = note or f"process limit reached: at most {s.sandbox_max_processes} processes (SANDBOX_MAX_PROCESSES)"
        return SandboxResult(
            exit_code=None if (timed_out or output_limited) else code,
            stdout=buffers["stdout"].decode("utf-8", "replace"),
            stderr=stderr,
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            output_limited=output_limited,
            limit_note=note,
        )


def _kill_group(pid: int, uid: int | None) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is not None:
        _kill_uid(uid)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process running as the throwaway ``uid`` (catches setsid'd and forked children)."""
    for _ in range(100):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status") as handle:
                    zombie = False
                    for line in handle:
                        if line.startswith("State:"):
                            zombie = "Z" in line.split()[1]  # dead already; only its parent can reap it
                        elif line.startswith("Uid:"):
                            if int(line.split()[1]) == uid and not zombie:
                                found = True
                                os.kill(int(entry.name), signal.SIGKILL)
                            break
            except (OSError, ValueError):
                continue
        if not found:
            return
        time.sleep(0.01)


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
