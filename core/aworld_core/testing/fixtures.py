"""Session-scoped pytest fixtures for the tiny model, as a pytest plugin module::

    pytest_plugins = ["aworld_core.testing.fixtures"]

``tiny_model_dir`` (the ``qwen2_5``-template model directory, built once per process),
``tiny_tokenizer`` and ``tiny_model`` (loaded from it). Kept apart from
``aworld_core.testing.tiny_model`` so test modules can import its helpers directly while pytest
loads this module as a plugin (a module imported before it is registered as a plugin cannot have
its asserts rewritten, and pytest warns about it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aworld_core.testing.tiny_model import get_tiny_model_dir, load_tiny_model, load_tiny_tokenizer


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """Session-scoped: the directory of a tiny Qwen2 model and its tokenizer."""
    return get_tiny_model_dir()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Any:
    """Session-scoped: the tiny model's tokenizer (``PreTrainedTokenizerFast``)."""
    return load_tiny_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir: Path) -> Any:
    """Session-scoped: the tiny Qwen2 model, in eval mode."""
    return load_tiny_model(tiny_model_dir)
