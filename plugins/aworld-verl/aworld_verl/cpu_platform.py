"""verl on a machine without an accelerator: ``PlatformCPU``, registered as verl platform ``cpu``.

verl 0.9.1 routes every device question through its platform layer
(``verl.plugin.platform``: ``PlatformBase``, ``PlatformRegistry``) and ships nvidia, npu and rocm
only; without one of them it falls back to ``nvidia`` and calls ``torch.cuda`` from then on. This
module adds the missing ``cpu`` platform through verl's own registry. It is selected by
``VERL_PLATFORM=cpu`` (the CPU plan sets it for every process, Ray workers included) or, when no
accelerator platform is found, by verl's auto-detection, which probes the built-in platforms first.

Choices, each from what verl does with the answer:

* ``current_device()`` is the string ``"cpu"``: verl writes ``.to(get_device_id())`` and
  ``torch.device(get_device_id())``, which then stay on the CPU (verl's own CPU FSDP test patches
  ``get_device_id`` the same way).
* ``device_module`` is :data:`cpu_device_module`: ``torch.cpu`` plus the calls verl makes on
  ``get_torch_device()`` that ``torch.cpu`` lacks (``empty_cache``, ``mem_get_info``, RNG state,
  ``get_device_name``, ...), as no-ops or their ``torch.*`` equivalents. ``torch.cpu`` itself is
  not modified.
* ``ray_resource_name()`` is ``"GPU"``: verl's resource pools ask Ray for one GPU bundle per
  trainer process (``use_gpu=True`` is hard-coded), so the CPU plan starts Ray with *logical*
  GPUs (``ray_init.num_gpus``); Ray only sets ``CUDA_VISIBLE_DEVICES``, which CPU torch ignores.
* ``communication_backend_name()`` is ``gloo``; IPC weight transfer is off.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any

import torch

PLATFORM_NAME = "cpu"


# memory: a CPU has no device allocator to report or release (each call's answer)
_NO_DEVICE_MEMORY: dict[str, Any] = {
    "empty_cache": None, "ipc_collect": None, "reset_peak_memory_stats": None, "set_per_process_memory_fraction": None,
    "mem_get_info": (0, 0), "memory_allocated": 0, "memory_reserved": 0, "max_memory_allocated": 0,
    "max_memory_reserved": 0,
}


class _CpuDeviceModule(types.ModuleType):
    """``torch.cpu`` with the device calls verl makes that it lacks (no-ops on a CPU)."""

    def __init__(self) -> None:
        super().__init__("aworld_verl.cpu_device", "torch.cpu plus no-op accelerator calls for verl")

    def __getattr__(self, name: str) -> Any:
        if name in _NO_DEVICE_MEMORY:
            answer = _NO_DEVICE_MEMORY[name]
            return lambda *args, **kwargs: answer
        return getattr(torch.cpu, name)

    # RNG: the CPU generator is torch's default one
    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"  # verl's FLOPs table has no CPU entry: MFU reads as 0, as for any unknown device

    @staticmethod
    def is_available() -> bool:
        return True


cpu_device_module = _CpuDeviceModule()


def _platform_class() -> type:
    """``PlatformCPU``, defined against verl's ``PlatformBase`` (imported here so that importing
    this module does not import verl)."""
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's platform interface answered for the CPU (module docstring)."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return cpu_device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            # probed after nvidia/npu/rocm (registered later): reached only when none of them is there
            return not torch.cuda.is_available()

        def current_device(self) -> Any:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def _nothing(self, *args: Any, **kwargs: Any) -> None:
            return None

        # one device, no allocator, no CUDA runtime, no profiler: nothing to do
        set_device = synchronize = set_allocator_settings = empty_cache = _nothing
        profiler_start = profiler_stop = cudart = _nothing

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; CPU torch ignores it

        @contextmanager
        def nvtx_range(self, msg: str):  # type: ignore[override]
            yield

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

    PlatformCPU.__module__ = __name__
    PlatformCPU.__qualname__ = "PlatformCPU"
    return PlatformCPU


_registered: type | None = None


def register_cpu_platform() -> type:
    """Register ``PlatformCPU`` under ``cpu`` in verl's ``PlatformRegistry`` (once); returns it."""
    global _registered
    if _registered is None:
        from verl.plugin.platform.platform_manager import PlatformRegistry

        _registered = PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())
    return _registered
