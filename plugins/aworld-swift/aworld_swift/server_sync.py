"""ms-swift's server mode (``swift rollout`` + ``swift rlhf --vllm_mode server``) on vLLM's CPU build.

ms-swift 4.6 refuses to start a rollout server without an accelerator
(``RolloutArguments._check_device_count``: ``local_device_count (0) must be >= dp*tp``), and its
weight sync is NCCL only on both sides: the trainer's ``VLLMClient`` and the server's
``WeightSyncWorkerExtension`` each build a ``PyNcclCommunicator`` on the ``StatelessProcessGroup``
they share, which without an NCCL library quietly disables itself (no ``device``, a ``broadcast``
that does nothing). So on a CPU nothing would reach the server, or it fails on ``.device``.

The tensors travel instead over that very group's TCP store (:func:`tcp_broadcast`: raw bytes
under a key the receivers read and the last reader deletes; no pickle), which is all a CPU
machine has and plenty for the small models a CPU trains. What changes, each at one seam that
:func:`check_seams` pins (``tests/swift_vllm`` runs it as a canary):

* the rollout server accepts a CPU for one vLLM engine (``vllm_data_parallel_size`` and
  ``vllm_tensor_parallel_size`` 1; more is refused with a clear error), wrapping
  ``RolloutArguments._check_device_count``;
* the server's vLLM engine gets :class:`aworld_swift.server_worker.CpuWeightSyncExtension` (a
  subclass of ms-swift's extension) as vLLM's ``worker_extension_cls``: ms-swift hard-codes its
  own in ``SwiftRolloutDeploy.get_infer_engine``, so the ``GRPOVllmEngine`` name that function
  calls is wrapped in ``swift.pipelines.infer.rollout`` to swap the class name in the engine
  arguments. vLLM imports the class in its worker process by name: no vLLM plugin, and
  ``VLLM_PLUGINS=none`` (which ms-swift's own vLLM plugin needs on the CPU build) keeps working;
* the trainer's ``_broadcast_tensors_for_vllm_weight_sync`` (module function of
  ``swift.rlhf_trainers.vllm_client``) sends over TCP when the communicator is a disabled
  ``PyNcclCommunicator`` on a ``StatelessProcessGroup``; any working communicator (a GPU) keeps
  ms-swift's own path. The trainer builds its client while parsing its arguments, before
  ms-swift imports external plugins, so the communicator it builds is kept as it is: only the
  sending is ours.

Everything is installed from aworld-swift's ms-swift plugin (:mod:`aworld_swift.swift_plugin`),
which both ``swift rollout`` processes and the trainer import; :func:`install` acts only where
vLLM's CPU build is installed, and each wrapper only on a machine without an accelerator.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from aworld_swift.seams import check
from aworld_swift.vllm_cpu_sync import cpu_build_installed

SYNC_HOST_ENV = "AWORLD_SWIFT_SYNC_HOST"  # where the server's end of the weight-sync group listens
SWIFT_EXTENSION = "swift.pipelines.infer.rollout.WeightSyncWorkerExtension"
CPU_EXTENSION = "aworld_swift.server_worker.CpuWeightSyncExtension"
ROLLOUT_MODULE = "swift.pipelines.infer.rollout"
KEY_PREFIX = "aworld-swift/tensor"
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}
_COUNTER = "_aworld_tcp_broadcasts"
_installed: set[str] = set()


# -- the transfer --------------------------------------------------------------------------------

def tcp_broadcast(group: Any, tensor: Any, src: int) -> Any:
    """Broadcast ``tensor`` from rank ``src`` over the TCP store of ``group`` (vLLM's
    ``StatelessProcessGroup``); receivers pass a tensor of the same dtype and shape, filled in place.

    Each call on a group is numbered on every rank alike (both sides broadcast the same sequence of
    tensors, as with NCCL). The sender stores the bytes once; every receiver reads them and the last
    one deletes them, so nothing accumulates in the store across syncs."""
    import torch

    count = getattr(group, _COUNTER, 0)
    setattr(group, _COUNTER, count + 1)
    key = f"{KEY_PREFIX}/{src}/{count}"
    store = group.store
    if group.rank == src:
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        store.set(key, data.numpy().tobytes())
        return tensor
    raw = store.get(key)  # waits for the sender (the group's store timeout)
    target = tensor.reshape(-1).view(torch.uint8)
    if len(raw) != target.numel():
        raise RuntimeError(f"weight sync: received {len(raw)} bytes for a tensor of {target.numel()} bytes "
                           f"({tensor.dtype}, {tuple(tensor.shape)}); trainer and rollout server disagree")
    target.copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    if store.add(f"{key}/read", 1) >= group.world_size - 1:  # the last receiver frees it
        store.delete_key(key)
        store.delete_key(f"{key}/read")
    return tensor


def uses_tcp(communicator: Any) -> bool:
    """The communicator cannot move tensors itself (no NCCL: vLLM disabled it) and sits on a
    ``StatelessProcessGroup``: its tensors go over that group's store."""
    from vllm.distributed.utils import StatelessProcessGroup

    return bool(getattr(communicator, "disabled", False)) and isinstance(getattr(communicator, "group", None),
                                                                         StatelessProcessGroup)


def bind_host(requested: str) -> str:
    """The address the server's end of the group listens on: ms-swift's trainer asks for a wildcard
    (``0.0.0.0``); the plan narrows it to the rollout server's own host (``AWORLD_SWIFT_SYNC_HOST``),
    which is where the trainer connects, so a server on 127.0.0.1 opens nothing beyond loopback."""
    narrowed = os.environ.get(SYNC_HOST_ENV, "").strip()
    return narrowed if narrowed and requested in WILDCARD_HOSTS else requested


# -- where the transfer goes in ----------------------------------------------------------------

def no_accelerator() -> bool:
    """ms-swift sees no device (what makes it refuse a rollout server) and vLLM runs on the CPU."""
    from swift.utils import get_device_count
    from vllm.platforms import current_platform

    return get_device_count() == 0 and bool(current_platform.is_cpu())


def check_trainer_seam() -> None:
    """The trainer's client sends every weight tensor through the module function this wraps."""
    from swift.rlhf_trainers import vllm_client

    check(vllm_client, "_broadcast_tensors_for_vllm_weight_sync", "server_sync", ("communicator", "tensors"))
    client = check(vllm_client, "VLLMClient", "server_sync")
    for method in ("update_flattened_params", "update_named_param"):  # they send through it, then the barrier
        check(client, method, "server_sync", (), ("_broadcast_tensors_for_vllm_weight_sync(", "comm.group.barrier()"))
    check(client, "init_communicator", "server_sync", (), ("StatelessProcessGroup.create(", "PyNcclCommunicator(pg"))


def check_server_seam(rollout: Any = None) -> None:
    """The rollout server's engine, its worker extension and its device check are what this wraps."""
    if rollout is None:
        import importlib

        rollout = importlib.import_module(ROLLOUT_MODULE)
    from swift.arguments import RolloutArguments

    check(RolloutArguments, "_check_device_count", "server_sync", ("self",))
    check(RolloutArguments, "__post_init__", "server_sync", (), ("self._check_device_count()",))
    deploy = check(rollout, "SwiftRolloutDeploy", "server_sync")
    check(deploy, "get_infer_engine", "server_sync", (),  # GRPOVllmEngine built with ms-swift's worker extension
          (f"'worker_extension_cls': '{SWIFT_EXTENSION}'", "return GRPOVllmEngine(**kwargs)"))
    check(rollout, "GRPOVllmEngine", "server_sync")
    extension = check(rollout, "WeightSyncWorkerExtension", "server_sync")
    for method, params in {
        "init_communicator": ("self", "host", "port", "world_size"),
        "update_flattened_params": ("self", "metadatas"),
        "update_named_param": ("self", "name", "dtype", "shape"),
        "process_weights_after_loading": ("self",),
        "close_communicator": ("self",),
    }.items():
        check(extension, method, "server_sync", params)
    check(extension, "init_communicator", "server_worker", (),  # how it joins the group
          ("StatelessProcessGroup.create(host=host", "self.client_rank = world_size - 1"))


def check_seams() -> None:
    """Raise :class:`aworld_swift.seams.SeamChanged` unless ms-swift still has every function this module wraps."""
    check_trainer_seam()
    check_server_seam()


def install_trainer() -> None:
    """The trainer sends weight tensors over TCP where its communicator cannot (idempotent)."""
    if "trainer" in _installed:
        return
    check_trainer_seam()
    from swift.rlhf_trainers import vllm_client

    original = vllm_client._broadcast_tensors_for_vllm_weight_sync

    def _broadcast_tensors_for_vllm_weight_sync(communicator: Any, tensors: Any) -> None:
        if not uses_tcp(communicator):
            return original(communicator, tensors)
        for tensor in list(tensors):
            tcp_broadcast(communicator.group, tensor, src=communicator.rank)
        return None

    vllm_client._broadcast_tensors_for_vllm_weight_sync = _broadcast_tensors_for_vllm_weight_sync
    _installed.add("trainer")


def install_server(rollout: Any) -> None:
    """In a ``swift rollout`` process: accept the CPU, and give its vLLM engine our worker extension."""
    if "server" in _installed:
        return
    check_server_seam(rollout)
    from swift.arguments import RolloutArguments

    original_check = RolloutArguments._check_device_count

    def _check_device_count(self: Any) -> None:
        if not no_accelerator():
            return original_check(self)
        engines = int(self.vllm_data_parallel_size) * int(self.vllm_tensor_parallel_size)
        if engines != 1:
            raise ValueError(
                f"on vLLM's CPU build aworld-swift's rollout server runs one vLLM engine: set "
                f"vllm_data_parallel_size and vllm_tensor_parallel_size to 1 (got {self.vllm_data_parallel_size} "
                f"and {self.vllm_tensor_parallel_size}) in backends.swift.rollout"
            )
        return None

    original_engine = rollout.GRPOVllmEngine

    def GRPOVllmEngine(*args: Any, **kwargs: Any) -> Any:  # stands in for ms-swift's class
        engine_kwargs = dict(kwargs.get("engine_kwargs") or {})
        if engine_kwargs.get("worker_extension_cls") == SWIFT_EXTENSION and no_accelerator():
            engine_kwargs["worker_extension_cls"] = CPU_EXTENSION
            kwargs["engine_kwargs"] = engine_kwargs
        return original_engine(*args, **kwargs)

    RolloutArguments._check_device_count = _check_device_count
    rollout.GRPOVllmEngine = GRPOVllmEngine
    _installed.add("server")


def install() -> bool:
    """Install what applies to this process where vLLM's CPU build is installed: the trainer's
    sending always, the server's pieces in a ``swift rollout`` process (its module is loaded
    before ms-swift imports plugins there). Returns whether anything was installed."""
    if not cpu_build_installed():
        return False
    install_trainer()
    rollout = sys.modules.get(ROLLOUT_MODULE)
    if rollout is not None:
        install_server(rollout)
    return True
