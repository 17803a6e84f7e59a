"""AReaL 1.0.4's checkpoint saver where triton is not installed (torch's CPU builds).

``areal.utils.saver.Saver._should_use_async`` decides between its synchronous HF save and the
experimental Archon engine's asynchronous one, and imports ``ArchonEngine`` to do so whatever the
mode; that module imports ``triton`` (a GPU compiler that CUDA builds of torch bring along and the
CPU build does not). So on a CPU every ``Saver.save`` (``saver.freq_*``; by default at the end of
each epoch) raises ``ModuleNotFoundError: No module named 'triton'``.

:func:`install` replaces that one method, only where ``triton`` cannot be imported, with the same
decision made without the import: an engine that is not AReaL's Archon engine (by its class's
module) is saved synchronously, as AReaL itself decides for it (``auto`` and ``sync``: sync;
``async``: a warning and sync). An Archon engine cannot be built without triton, so no other case
exists here. The canary in tests/areal/test_vllm_engine.py fails when AReaL changes the method.
"""

from __future__ import annotations

import importlib.util
from typing import Any

ARCHON_MODULE = "areal.experimental.engine.archon_engine"


def triton_missing() -> bool:
    try:
        return importlib.util.find_spec("triton") is None
    except (ImportError, ValueError):
        return True


def _is_archon(engine: Any) -> bool:
    return any(cls.__module__ == ARCHON_MODULE for cls in type(engine).__mro__)


def install() -> bool:
    """Put the import-free decision in place when triton is missing; ``True`` when it did."""
    if not triton_missing():
        return False
    from areal.utils import saver
    from areal.utils.async_checkpoint import AsyncMode

    if getattr(saver.Saver._should_use_async, "_aworld", False):
        return True
    original = saver.Saver._should_use_async

    def should_use_async(self: Any, engine: Any) -> bool:
        if _is_archon(engine):
            return original(self, engine)
        if self._async_mode == AsyncMode.ASYNC:
            saver.logger.warning("Async checkpoint only supports ArchonEngine, got %s; falling back to sync",
                                 type(engine).__name__)
        return False

    should_use_async._aworld = True  # type: ignore[attr-defined]
    saver.Saver._should_use_async = should_use_async
    return True
