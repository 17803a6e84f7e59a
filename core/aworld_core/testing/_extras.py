"""Clear errors when an optional dependency of the test kit is missing."""

from __future__ import annotations

import importlib.util

from aworld_core.errors import UsageError

# the extra of aworld-core that brings each module the kit imports lazily
EXTRA_OF = {"torch": "hf", "transformers": "hf", "tokenizers": "hf"}


class MissingExtraError(UsageError, ImportError):
    """A part of ``aworld_core.testing`` needs a package this environment lacks; the message
    names what to install."""


def require(*modules: str, what: str) -> None:
    """Raise ``MissingExtraError`` naming the install command unless every module is importable."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    extras = sorted({EXTRA_OF[m] for m in missing if m in EXTRA_OF})
    hint = f"pip install 'aworld-core[{','.join(extras)}]'" if extras else f"pip install {' '.join(missing)}"
    raise MissingExtraError(f"{what} needs {', '.join(missing)}, which is not installed: {hint}")
