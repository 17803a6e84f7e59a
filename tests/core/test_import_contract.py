"""The plugin API contract: every plugin and every example imports only the declared plugin API
(``aworld_core.plugin_api.PUBLIC_MODULES``), and the check catches a plugin that reaches into a
private core module."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aworld_core.plugin_api import (
    PUBLIC_MODULES,
    check_paths,
    check_source,
    main,
    public_names,
    python_files,
)

ROOT = Path(__file__).resolve().parents[2]
CHECKED = [ROOT / "plugins", ROOT / "examples"]


def test_every_plugin_and_example_imports_only_the_plugin_api() -> None:
    violations = check_paths(CHECKED)
    assert not violations, "imports outside the plugin API:\n" + "\n".join(map(str, violations))


def test_the_check_sees_every_plugin_and_example() -> None:
    checked = {p.relative_to(ROOT).parts[:2] for p in python_files(CHECKED)}
    for root in CHECKED:
        for child in root.iterdir():
            if child.is_dir() and any(child.rglob("*.py")):
                assert (root.name, child.name) in checked


def test_a_plugin_importing_a_private_module_fails_the_contract(tmp_path: Path) -> None:
    package = tmp_path / "aworld_rogue" / "aworld_rogue"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from aworld_core.worker import EpisodeRunner\n")
    (package / "plugin.py").write_text(
        "from aworld_core import hookimpl\n\n\n"
        "def helper():\n"
        "    from aworld_core.worker.records import mask_runs  # private: worker.records\n"
        "    return mask_runs\n"
    )
    result = subprocess.run([sys.executable, "-m", "aworld_core.plugin_api", str(tmp_path / "aworld_rogue")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{package / 'plugin.py'}:5: 'from aworld_core.worker.records import mask_runs'" in result.stdout
    assert "aworld_core.worker.records is private" in result.stdout
    assert "__init__.py" not in result.stdout  # the public import passes
    assert "1 import(s) outside the plugin API" in result.stdout


@pytest.mark.parametrize(("source", "bad"), [
    ("import aworld_core.tokens.engine\n", "aworld_core.tokens.engine is private"),
    ("from aworld_core.tokens import engine\n", "'engine' is not in aworld_core.tokens's public names"),
    ("from aworld_core.worker import _EXPORTS\n", "'_EXPORTS' is not in aworld_core.worker's public names"),
    ("from aworld_core import secrets, lazy\n", "'lazy' is not in aworld_core's public names"),
    ("from aworld_core.run import print_listing\n", "'print_listing' is not in aworld_core.run's public"),
    ("from aworld_core.schemas import BaseModel\n", "'BaseModel' is not in aworld_core.schemas's public"),
    ("class A:\n    def f(self):\n        import aworld_core.runtime.loop_thread as t\n",
     "aworld_core.runtime.loop_thread is private"),
])
def test_private_names_and_modules_are_refused(source: str, bad: str) -> None:
    violations = check_source(source, "x.py")
    assert len(violations) == 1 and bad in str(violations[0]), violations


@pytest.mark.parametrize("source", [
    "import aworld_core\nimport aworld_core.worker\nfrom aworld_core import worker as kit\n",
    "from aworld_core import Agent, hookimpl\nfrom aworld_core.worker import EpisodeRunner, mask_runs\n",
    "from aworld_core.schemas import Episode, new_id\nfrom aworld_core.errors import UsageError\n",
    "from aworld_core.run import main\nfrom aworld_core.trajectories.cli import main as trajectories\n",
    "from .sibling import thing\nfrom aworld_corex import y\nimport aworld_core_other\n",
])
def test_public_imports_pass(source: str) -> None:
    assert check_source(source, "x.py") == []


def test_every_public_module_and_name_exists() -> None:
    for module, listed in PUBLIC_MODULES.items():
        imported = importlib.import_module(module)
        for name in public_names(module):
            if f"{module}.{name}" in PUBLIC_MODULES:  # a public submodule
                importlib.import_module(f"{module}.{name}")
            else:
                assert hasattr(imported, name), f"{module} declares {name!r} but has no such attribute"
        if listed is not None:
            assert set(listed) <= set(dir(imported))


def test_the_plugin_guide_lists_the_plugin_api() -> None:
    guide = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    section = re.search(r"^## The plugin API\n(.*?)(?=^## )", guide, re.S | re.M)
    assert section, "docs/writing-a-plugin.md has no '## The plugin API' section"
    text = section.group(1)
    for module in PUBLIC_MODULES:
        assert f"`{module}`" in text, f"docs/writing-a-plugin.md's plugin API omits {module}"
        # every public name, so the guide lists exactly the surface (submodules are listed above)
        names = {n for n in public_names(module) if f"{module}.{n}" not in PUBLIC_MODULES} - {"__version__"}
        missing = sorted(n for n in names if not re.search(rf"`{re.escape(n)}`", text))
        assert not missing, f"docs/writing-a-plugin.md ('The plugin API') omits {module}'s {missing}"


def test_the_command_line_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main([str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    (tmp_path / "ok.py").write_text("from aworld_core import Agent\n")
    assert main([str(tmp_path)]) == 0
