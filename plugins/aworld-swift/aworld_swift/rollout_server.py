"""The ``swift rollout`` server process of a server-mode launch: started before the trainer, stopped with it.

The process handling is the core's external vLLM server's (:class:`aworld_core.vllm_server.VllmServer`:
its own session, ``/health`` polled with a clear error and the log's tail when it dies or never
answers, SIGTERM then SIGKILL of its process group); only the command and its environment are
ms-swift's: ``swift rollout`` takes its own arguments, not vLLM's, and needs the job's
``PYTHONPATH`` (the job's ``module:function`` references), which the core keeps out of a plain
vLLM server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from aworld_core.errors import AworldError, UsageError
from aworld_core.vllm_server import VllmServer, VllmServerSpec


class RolloutServer(VllmServer):
    """``swift rollout`` as a managed process: ``with RolloutServer(...):`` starts it and waits for
    ``/health`` (ms-swift answers once its vLLM engine is up); the block's end stops it, with every
    process it started (the rollout worker, vLLM's engine core)."""

    def __init__(self, command: list[str], env: Mapping[str, str], *, host: str, port: int,
                 log_path: str | Path, startup_timeout_s: float, group_port: int | None = None):
        super().__init__(VllmServerSpec(host=host, port=port, startup_timeout_s=startup_timeout_s), log_path=log_path)
        self.command = list(command)
        self.env = dict(env)
        self.group_port = group_port
        self._group: int | None = None

    def check_ports(self) -> None:
        """The server's port and the weight-sync group's are free: a server already listening there
        would answer our health check (and the trainer's requests) instead of ours."""
        for port, what, key in ((self.port, "the rollout server's port", "backends.swift.rollout.port"),
                                (self.group_port, "the weight-sync group's port", "backends.swift.vllm_server_group_port")):
            if port is None:
                continue
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((self.spec.host, port))
                except OSError as exc:
                    raise UsageError(f"{what} {self.spec.host}:{port} is in use ({exc.strerror}): another server "
                                     f"runs there; stop it or set {key} to a free port") from None

    def argv(self) -> list[str]:
        return list(self.command)

    def start(self) -> RolloutServer:
        started = time.monotonic()
        assert self.log_path is not None
        self.check_ports()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                             env={**os.environ, **self.env}, start_new_session=True)
            except OSError as exc:
                raise UsageError(f"could not start the ms-swift rollout server ({self.argv()[0]}): {exc}") from exc
        self._group = self.proc.pid
        try:
            self.wait_healthy(self.spec.startup_timeout_s)  # a clear error with the log's tail
        except AworldError as exc:
            self.stop()  # whatever it started goes too (a `with` block's end never comes)
            raise AworldError(str(exc).replace("the vLLM server", "the ms-swift rollout server", 1)) from None
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def stop(self) -> None:
        super().stop()
        group, self._group = self._group, None
        if group is not None:  # what the server left behind (its workers exit with it, normally)
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                return
            # SIGKILL is delivered asynchronously: a worker that inherited the listening socket keeps
            # the port open until it is gone, so wait (briefly) until the group is empty
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                try:
                    os.killpg(group, 0)
                except (ProcessLookupError, PermissionError):
                    return
                time.sleep(0.05)
