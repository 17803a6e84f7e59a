"""The benchmarks' own imports still resolve (benchmarks are not run by the test suite, so a
moved name would otherwise break one silently). Imports only; nothing is timed."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def _aworld_imports(path: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aworld"):
            found.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names if alias.name.startswith("aworld"))
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_aworld_name_a_benchmark_imports_exists(script):
    for module, name in _aworld_imports(script):
        top = module.split(".")[0]
        if importlib.util.find_spec(top) is None:
            continue  # a plugin that lives in another environment
        imported = importlib.import_module(module)
        assert not name or hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}"), (
            f"{script.name}: 'from {module} import {name}' no longer resolves"
        )
