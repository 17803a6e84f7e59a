"""AReaL's rollout engine on a plain vLLM server: ``ArealVllmEngine``, put in place by ``install()``.

AReaL 1.0.4 talks to vLLM through ``RemoteInfEngine(config, VLLMBackend())``: generation over
``/v1/completions`` (plain vLLM serves it), but pause, resume and the disk weight update go to
routes of AReaL's own server extension (``areal/engine/vllm_ext/areal_vllm_server.py``), which
does not import against vLLM 0.32 and cannot be installed beside vLLM's CPU build (their
transformers pins do not meet). Plain vLLM 0.32 has routes for all three (with
``VLLM_SERVER_DEV_MODE=1``, which ``aworld_core.vllm_server`` sets for every server it starts):

| AReaL asks for                | here                                                          |
|-------------------------------|---------------------------------------------------------------|
| ``/areal_pause_generation``   | ``POST /pause?mode=abort``: requests in flight end with       |
|                               | ``finish_reason="abort"`` and their tokens so far             |
| ``/areal_continue_generation``| ``POST /resume``                                              |
| ``/areal_update_weights``     | ``POST /collective_rpc reload_weights(<checkpoint>)``, then   |
|                               | ``POST /reset_prefix_cache``                                  |

The seam is AReaL's own: ``RemoteInfBackendProtocol`` (the backend a ``RemoteInfEngine`` is
composed with). ``PlainVllmBackend`` subclasses AReaL's ``VLLMBackend`` and overrides only those
requests (plus ``launch_server``: the server runs from another interpreter, see below);
``ArealVllmEngine`` is AReaL's ``RemotevLLMEngine`` composed with it. AReaL's trainer picks its
engine class from a module global (``areal.trainer.rl_trainer.RemotevLLMEngine``), so
:func:`install` rebinds that name; in single-controller mode the rollout workers import the class
by its ``__module__``/``__qualname__``, which name this module, so they get it too. Both private
seams have canary tests (tests/areal/test_vllm_engine.py).

What AReaL does around them is unchanged, and is why a weight update is never a failed episode:
``FSDPEngine`` pauses the server, saves the HF checkpoint, publishes it through ``name_resolve``,
the engine posts the reload, then resumes. A request that the pause aborted comes back with its
tokens so far; ``RemoteInfEngine.agenerate`` waits while the rollout is paused and re-sends the
prompt plus those tokens, stamping each chunk with the policy version of the weights that sampled
it. The reload goes through :func:`aworld_core.vllm_server.reload_source`: a tied-embedding
checkpoint (``save_pretrained`` drops ``lm_head.weight``) gets a scratch directory with the head
inside the checkpoint, because vLLM's CPU build would keep the old head otherwise; AReaL deletes
the checkpoint, scratch included, after the load (``clear_checkpoint_after_load``).

This module imports AReaL at import time; only processes that run AReaL import it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from areal.api.io_struct import HttpRequest, WeightUpdateRequests
from areal.engine.vllm_remote import RemotevLLMEngine, VLLMBackend
from areal.infra import RemoteInfEngine

from aworld_areal.config import SERVER_LOG_NAME, SPEC_ENV
from aworld_core.errors import UsageError
from aworld_core.vllm_server import (
    PAUSE_ROUTE,
    RELOAD_ROUTE,
    RESET_PREFIX_CACHE_ROUTE,
    RESUME_ROUTE,
    VllmServer,
    VllmServerSpec,
    reload_payload,
    reload_source,
)

XCCL_REFUSED = (
    "the plain vLLM server has no weight-update group (AReaL's xccl mode needs AReaL's own vLLM "
    "extension, which does not run on vLLM 0.32): set backends.areal.actor.weight_update_mode: disk"
)


class PlainVllmBackend(VLLMBackend):
    """AReaL's ``VLLMBackend`` with pause, resume and the disk weight update on plain vLLM routes."""

    def get_pause_request(self) -> HttpRequest:
        return HttpRequest(endpoint=PAUSE_ROUTE, payload={})

    def get_resume_request(self) -> HttpRequest:
        return HttpRequest(endpoint=RESUME_ROUTE, payload={})

    def build_disk_weight_update_requests(self, meta: Any) -> WeightUpdateRequests:
        """Reload the checkpoint AReaL saved at ``meta.path`` in place, then drop the prefix cache
        (its blocks hold the old weights' keys and values). Called after the checkpoint is saved."""
        if meta.use_lora:
            raise UsageError(
                "LoRA weight updates are not supported on the plain vLLM server (aworld-areal); "
                "train without actor.use_lora"
            )
        if meta.path is None:
            raise ValueError("AReaL's disk weight update came without a checkpoint path")
        source = reload_source(meta.path, scratch_parent=meta.path)
        return WeightUpdateRequests(requests=[
            HttpRequest(endpoint=RELOAD_ROUTE, payload=reload_payload(source)),
            HttpRequest(endpoint=RESET_PREFIX_CACHE_ROUTE, payload={}),
        ])

    def build_distributed_weight_update_requests(self, meta: Any, param_specs: Any) -> WeightUpdateRequests:
        raise NotImplementedError(XCCL_REFUSED)

    def build_init_weights_group_request(self, addr: str, server_idx: int, meta: Any) -> HttpRequest:
        raise NotImplementedError(XCCL_REFUSED)

    def launch_server(self, server_args: dict[str, Any]) -> subprocess.Popen:
        """Start plain vLLM (single-controller mode: AReaL's rollout worker asks for a server) from
        the interpreter in the spec that :data:`SPEC_ENV` carries, on the host and port AReaL
        chose. AReaL waits for ``/health`` and tears the process down itself."""
        spec_file = os.environ.get(SPEC_ENV, "")
        server = VllmServer(server_spec_for(server_args), log_path=Path(spec_file).with_name(SERVER_LOG_NAME))
        server.start()
        assert server.proc is not None
        return server.proc


def server_spec_for(server_args: dict[str, Any]) -> VllmServerSpec:
    """The spec of the server AReaL asks a rollout worker for: ours (:data:`SPEC_ENV`), on
    AReaL's host and port."""
    spec = load_server_spec()
    if spec is None:
        raise UsageError(
            f"AReaL asked for a vLLM server but {SPEC_ENV} is not set: launch through "
            "`python -m aworld_core.run --backend areal` with backends.areal.vllm_server set"
        )
    return spec.model_copy(update={"host": str(server_args.get("host") or spec.host),
                                   "port": int(server_args["port"]), "url": None})


def load_server_spec() -> VllmServerSpec | None:
    """The spec in the file :data:`~aworld_areal.config.SPEC_ENV` names (the plan's
    ``vllm_server.json``), or ``None`` when the variable is not set."""
    path = os.environ.get(SPEC_ENV)
    if not path:
        return None
    try:
        return VllmServerSpec.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{SPEC_ENV} names {path!r}, which cannot be read: {exc}") from None


_pending_server: VllmServer | None = None  # spawned in this process, not known healthy yet


def wait_for_server(server: VllmServer | None) -> None:
    """Have the next :class:`ArealVllmEngine` to initialize wait for ``server`` (spawned, maybe
    still loading) first: vLLM's error and log tail if it dies, instead of AReaL's health polling
    until ``setup_timeout``."""
    global _pending_server
    _pending_server = server


class ArealVllmEngine(RemotevLLMEngine):
    """AReaL's ``RemotevLLMEngine`` composed with :class:`PlainVllmBackend` (everything else,
    including staleness control, pauses and per-token versions, is AReaL's ``RemoteInfEngine``)."""

    def __init__(self, config: Any):
        self.config = config
        self._engine = RemoteInfEngine(config, PlainVllmBackend())

    def initialize(self, engine_id: str | None = None, addr: str | list[str] | None = None,
                   train_data_parallel_size: int | None = None) -> Any:
        global _pending_server
        server, _pending_server = _pending_server, None
        if server is not None:
            server.wait_ready()
            print(f"vLLM server up after {server.startup_s:.1f}s", flush=True)
        return super().initialize(engine_id, addr, train_data_parallel_size)


def install() -> None:
    """Make AReaL's trainer build :class:`ArealVllmEngine` where it builds ``RemotevLLMEngine``
    (``rollout.backend: vllm:...``). Idempotent."""
    import areal.trainer.rl_trainer as rl_trainer

    if not hasattr(rl_trainer, "RemotevLLMEngine"):
        raise RuntimeError(
            "areal.trainer.rl_trainer has no RemotevLLMEngine global any more: aworld-areal's plain "
            "vLLM engine cannot be put in place on this AReaL version (tested with 1.0.4)"
        )
    rl_trainer.RemotevLLMEngine = ArealVllmEngine
