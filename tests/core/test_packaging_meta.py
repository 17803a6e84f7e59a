"""Every distribution in the repository says the Python it really needs (3.11: asyncio.timeout)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_pyproject_requires_python_311() -> None:
    found = {}
    paths = [ROOT / "pyproject.toml", ROOT / "core" / "pyproject.toml"]
    paths += sorted(ROOT.glob("plugins/*/pyproject.toml")) + sorted(ROOT.glob("examples/*/pyproject.toml"))
    for path in paths:
        project = tomllib.loads(path.read_text()).get("project")
        if project is not None:
            found[str(path.relative_to(ROOT))] = project.get("requires-python")
    assert "core/pyproject.toml" in found and len(found) >= 7
    assert {p: v for p, v in found.items() if v != ">=3.11"} == {}
