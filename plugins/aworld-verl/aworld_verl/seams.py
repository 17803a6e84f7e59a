"""Where aworld-verl reaches into verl 0.9.1, all in one place (each has a canary test in
``tests/verl/test_cpu_seams.py`` that fails loudly when verl changes what it relies on).

Loaded by verl itself: ``aworld_verl.verl_plugin`` is a ``verl.plugins`` entry point, which
``import verl`` loads in every process (the driver, the TaskRunner, every Ray worker). What it
does there:

1. **CPU platform** (public API): ``PlatformRegistry.register("cpu")`` (``aworld_verl.cpu_platform``).
2. **Process group** (private function wrapped): ``verl.utils.distributed.
   initialize_global_process_group_ray`` builds ``f"cpu:gloo,{device}:{backend}"``, which on the
   CPU platform is ``cpu:gloo,cpu:gloo`` and torch refuses ("Duplicate device type cpu"). The
   wrapper passes ``backend="cpu:gloo"`` when the device is ``cpu`` and the caller gave none
   (verl's own ``CheckpointEngineWorker`` passes exactly that), and changes nothing otherwise.
   ``verl.workers.engine_workers`` imports the function by name, so the wrapper must be in place
   before it is imported: plugin load time, during ``import verl``, is.
3. **Registrations when verl loads the registry's module** (no import of heavy verl modules at
   plugin load: a process that never builds a rollout or an engine never pays for them):
   * ``verl.workers.rollout.replica``: ``RolloutReplicaRegistry.register("external_vllm", ...)``
     (public API);
   * ``verl.workers.rollout.base``: ``_ROLLOUT_REGISTRY[("external_vllm", "async")]`` (a private
     dict: ``get_rollout_class`` has no register function);
   * ``verl.workers.engine.fsdp.transformer_impl``: the FSDP engines registered for device
     ``cpu`` with ``EngineRegistry.register`` (public API; verl registers them for cuda and npu).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

EXTERNAL_ROLLOUT = "external_vllm"
ADAPTER_FQN = "aworld_verl.external_rollout.ExternalVllmAdapter"
PROCESS_GROUP_MODULE = "verl.utils.distributed"
PROCESS_GROUP_FUNC = "initialize_global_process_group_ray"
CPU_BACKEND = "cpu:gloo"
REPLICA_MODULE = "verl.workers.rollout.replica"
ROLLOUT_BASE_MODULE = "verl.workers.rollout.base"
FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
FSDP_ENGINES = (("language_model", "FSDPEngineWithLMHead"), ("value_model", "FSDPEngineWithValueHead"))


# -- 2. the process group ----------------------------------------------------------------------


def wrap_process_group_init() -> Callable[..., Any]:
    """Put :func:`_cpu_process_group` around verl's function (once); returns the wrapper."""
    module = importlib.import_module(PROCESS_GROUP_MODULE)
    original = getattr(module, PROCESS_GROUP_FUNC)
    if getattr(original, "__aworld_wrapped__", None) is not None:
        return original

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
        if backend is None:
            from verl.utils.device import get_device_name

            if get_device_name() == "cpu":
                backend = CPU_BACKEND
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray.__aworld_wrapped__ = original  # type: ignore[attr-defined]
    setattr(module, PROCESS_GROUP_FUNC, initialize_global_process_group_ray)
    return initialize_global_process_group_ray


# -- 3. registrations when verl imports a module -------------------------------------------------


def _load_replica() -> type:
    from aworld_verl.external_rollout import ExternalVllmReplica

    return ExternalVllmReplica


def register_replica(module: ModuleType) -> None:
    module.RolloutReplicaRegistry.register(EXTERNAL_ROLLOUT, _load_replica)


def register_adapter(module: ModuleType) -> None:
    module._ROLLOUT_REGISTRY[(EXTERNAL_ROLLOUT, "async")] = ADAPTER_FQN


def register_cpu_engines(module: ModuleType) -> None:
    from verl.workers.engine.base import EngineRegistry

    for model_type, class_name in FSDP_ENGINES:
        engine = getattr(module, class_name)
        for backend in ("fsdp", "fsdp2"):
            try:
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(engine)
            except AssertionError:  # verl registers one for cpu itself (a later release): keep verl's
                pass


class _ChainedLoader(importlib.abc.Loader):
    """The module's own loader, then the callbacks waiting for it (the module's ``__loader__``
    and ``__spec__.loader`` are put back to the original afterwards)."""

    def __init__(self, inner: Any, run: Callable[[ModuleType], None]):
        self.inner = inner
        self.run = run

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        self.run(module)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after ``module`` first executes (a post-import hook)."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[ModuleType], None]]] = {}
        self.lock = threading.Lock()

    def add(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        with self.lock:
            self.pending.setdefault(name, []).append(callback)

    def _run(self, module: ModuleType) -> None:
        with self.lock:
            callbacks = self.pending.pop(module.__name__, [])
        for callback in callbacks:
            callback(module)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ChainedLoader(spec.loader, self._run)
                return spec
        return None


_hook: _AfterImport | None = None
_installed = False


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Run ``callback(module)`` once ``name`` is imported (now, when it already is)."""
    global _hook
    if _hook is None:
        _hook = _AfterImport()
        sys.meta_path.insert(0, _hook)
    _hook.add(name, callback)


def install() -> None:
    """Everything above; idempotent (verl loads entry points once per ``import verl``)."""
    global _installed
    if _installed:
        return
    _installed = True
    from aworld_verl.cpu_platform import register_cpu_platform

    register_cpu_platform()
    wrap_process_group_init()
    after_import(REPLICA_MODULE, register_replica)
    after_import(ROLLOUT_BASE_MODULE, register_adapter)
    after_import(FSDP_ENGINE_MODULE, register_cpu_engines)
