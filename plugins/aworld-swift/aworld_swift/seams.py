"""The canaries on the ms-swift private API aworld-swift wraps, written once.

:mod:`aworld_swift.segments`, :mod:`aworld_swift.vllm_cpu_sync` and :mod:`aworld_swift.server_sync`
each wrap a few private ms-swift functions at the narrowest seam. Before wrapping (and in
``tests/swift`` / ``tests/swift_vllm``, which run their ``check_seams``) each checks with
:func:`check` that every function it relies on is still there, takes the parameters it calls it
with, and still holds the lines its wrapper depends on; a change fails loudly with
:class:`SeamChanged`, naming the function and the module to update, rather than training wrongly.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any


class SeamChanged(RuntimeError):
    """ms-swift changed a private function aworld-swift wraps: the module the message names needs updating."""


def check(owner: Any, name: str, module: str, params: Sequence[str] = (), lines: Sequence[str] = (), *,
          exact: bool = False) -> Any:
    """``owner.name`` (a module's or a class's), checked: it exists, takes ``params`` first (``exact``:
    only them) and its source holds each of ``lines``; else :class:`SeamChanged` naming
    ``aworld_swift/<module>.py``. Wrapped functions are checked as what they wrap."""
    where = f"ms-swift's {getattr(owner, '__qualname__', None) or owner.__name__}.{name}"
    fix = f"update aworld_swift/{module}.py"
    function = getattr(owner, name, None)
    if function is None:
        raise SeamChanged(f"{where} is gone; {fix}")
    if params:
        names = tuple(inspect.signature(function).parameters)
        if names[: len(params)] != tuple(params) or (exact and len(names) != len(params)):
            raise SeamChanged(f"{where} takes {names}, aworld-swift expects {tuple(params)}{'' if exact else ' first'}; "
                              f"{fix}")
    if lines:
        try:
            source = inspect.getsource(inspect.unwrap(function))
        except (OSError, TypeError) as exc:
            raise SeamChanged(f"cannot read the source of {where} ({exc}); {fix}") from None
        for line in lines:
            if line not in source:
                raise SeamChanged(f"{where} no longer holds {line!r}; {fix}")
    return function
