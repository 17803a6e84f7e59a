"""Every ``pip install`` the CLI and the plugins print names a distribution of this repository,
with extras that distribution really has, and the one that really provides what is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from aworld_core.plugins import PUBLISHED_BACKENDS, backend_install_hint

REPO = Path(__file__).resolve().parents[2]
PYPROJECTS = sorted([REPO / "core/pyproject.toml", *REPO.glob("plugins/*/pyproject.toml"),
                     *REPO.glob("examples/*/pyproject.toml")])
SOURCES = sorted(p for root in ("core", "plugins", "examples") for p in (REPO / root).rglob("*.py")
                 if ".venv" not in p.parts and "tests" not in p.parts)
HINT = re.compile(r"pip install (?P<req>'[^']+'|[A-Za-z0-9][\w.\[\],-]*)")


def _distributions() -> dict[str, tuple[Path, set[str], dict[str, str]]]:
    """name -> (root, extras, aworld entry points) of every distribution in the repository."""
    out = {}
    for path in PYPROJECTS:
        project = tomllib.loads(path.read_text())["project"]
        extras = set(project.get("optional-dependencies", {}))
        out[project["name"]] = (path.parent, extras, project.get("entry-points", {}).get("aworld", {}))
    return out


DISTS = _distributions()


def _check(requirement_text: str, where: str) -> Requirement:
    requirement = Requirement(requirement_text.strip("'\""))
    assert requirement.name in DISTS, f"{where}: '{requirement.name}' is no distribution of this repository"
    unknown = set(requirement.extras) - DISTS[requirement.name][1]
    assert not unknown, f"{where}: {requirement.name} has no extra {sorted(unknown)}"
    return requirement


def _backends_by_distribution() -> dict[str, dict[str, dict[str, str | None]]]:
    """What each repository distribution's aworld plugins register as backends, from the source
    (imported in a child with every distribution root on the path: installed or not)."""
    roots = [str(root) for root, _, _ in DISTS.values()]
    plugins = {name: list(eps.values()) for name, (_, _, eps) in DISTS.items() if eps}
    code = (
        "import importlib, json, sys\n"
        "out = {}\n"
        "for dist, modules in json.loads(sys.argv[1]).items():\n"
        "    for module in modules:\n"
        "        mod = importlib.import_module(module)\n"
        "        for spec in (mod.register_backends() if hasattr(mod, 'register_backends') else []):\n"
        "            out.setdefault(dist, {})[spec.name] = {'framework': spec.framework, 'hint': spec.install_hint}\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(roots)}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(plugins)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_every_hint_in_the_source_names_a_real_distribution_and_extra() -> None:
    seen = 0
    for path in SOURCES:
        for match in HINT.finditer(path.read_text()):
            text = match.group("req")
            if "{" in text or not text.strip("'").startswith("aworld"):
                continue  # a placeholder (checked below) or a third-party package (uvloop)
            _check(text, f"{path.relative_to(REPO)}")
            seen += 1
    assert seen >= 8


def test_the_missing_backend_hint_names_the_distribution_that_provides_it() -> None:
    provided = _backends_by_distribution()
    backend_to_dist = {backend: dist for dist, backends in provided.items() for backend in backends}
    plugins = {backend for backend, dist in backend_to_dist.items() if (REPO / "plugins") in DISTS[dist][0].parents}
    assert set(PUBLISHED_BACKENDS) == plugins, "PUBLISHED_BACKENDS must list every backend plugins/ publishes"
    for backend, requirement_text in PUBLISHED_BACKENDS.items():
        requirement = _check(requirement_text, f"PUBLISHED_BACKENDS[{backend!r}]")
        assert requirement.name == backend_to_dist[backend], backend
        hint = backend_install_hint(backend)
        assert hint.startswith("install it with: pip install ")
        _check(hint.removeprefix("install it with: pip install "), f"backend_install_hint({backend!r})")
    # the examples are not published: the hint never guesses a distribution for them
    for backend in ("echo", "reinforce", "nosuch"):
        assert "pip install" not in backend_install_hint(backend)
        assert "no distribution of this project provides it" in backend_install_hint(backend)


def test_every_framework_hint_names_the_providing_distribution() -> None:
    for dist, backends in _backends_by_distribution().items():
        for backend, spec in backends.items():
            if not spec["hint"]:
                assert spec["framework"] is None, f"{backend}: a framework needs an install_hint"
                continue
            match = HINT.search(spec["hint"])
            assert match, f"{backend}: {spec['hint']!r} is not a pip install command"
            # the distribution itself, or the core whose extra brings the framework (torch: [hf])
            assert _check(match.group("req"), f"backend {backend} of {dist}").name in (dist, "aworld-core")


def test_the_cli_names_the_installed_backends_for_a_missing_third_party_one(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: hint-test\nagent:\n  name: a\n  max_steps: 3\n")
    done = subprocess.run([sys.executable, "-m", "aworld_core.run", "--backend", "echo", "--config", str(job),
                           "--dry-run"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AWORLD_DISABLE_PLUGINS": "echo"})
    assert done.returncode == 2
    assert "backend 'echo' is not installed; no distribution of this project provides it" in done.stderr
    assert "pip install aworld-echo" not in done.stderr  # never a guessed name
    installed = done.stderr.split("installed backends: ", 1)[1].split("\n", 1)[0]
    assert "trl" in installed.split(", ") and "echo" not in installed.split(", ")
