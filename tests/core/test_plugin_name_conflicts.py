"""Two installed distributions registering the same plugin (entry-point) name: both are loaded
under ``name@distribution``, ``--list`` shows the conflict naming both, using what both provide
is a clear error saying how to choose, and choosing (AWORLD_DISABLE_PLUGINS) works. Before, the
second distribution vanished without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from aworld_core.errors import PluginConflictError
from aworld_core.plugins import PluginManager
from support.fake_dists import make_dist, run_cli

PLUGIN = '''
from aworld_core import Backend, LaunchPlan, hookimpl

def plan(job, output_dir):
    return LaunchPlan(backend="twin", entrypoint="{module}:train")

@hookimpl
def register_backends():
    return [Backend("twin", "the twin backend from {dist}", planner=plan)]

def train():
    return {{"trained": "{dist}"}}
'''


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    for dist, module in (("aworld-twin-a", "twin_a"), ("aworld-twin-b", "twin_b")):
        make_dist(site, dist, "1.0.0", {"twin": module},
                  {f"{module}.py": PLUGIN.format(dist=dist, module=module)})
    return site


def test_both_are_loaded_under_qualified_names_and_using_the_name_is_a_conflict(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    manager = PluginManager()
    names = {info.name: info.distribution for info in manager.plugins()}
    assert names["twin@aworld-twin-a"] == "aworld-twin-a"
    assert names["twin@aworld-twin-b"] == "aworld-twin-b"
    assert "twin" not in names
    [conflict] = manager.entry_point_conflicts
    assert "aworld-twin-a 1.0.0" in conflict.describe() and "aworld-twin-b 1.0.0" in conflict.describe()
    with pytest.raises(PluginConflictError) as info:
        manager.catalog().backend("twin")
    message = str(info.value)
    assert "aworld-twin-a" in message and "aworld-twin-b" in message
    assert "AWORLD_DISABLE_PLUGINS=twin@aworld-twin-" in message and "Uninstall one" in message


def test_disabling_one_by_its_qualified_name_chooses_the_other(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    manager = PluginManager(disabled=["twin@aworld-twin-a"])
    provided = manager.catalog().get("backend", "twin")
    assert provided is not None and provided.distribution == "aworld-twin-b"
    disabled = [(i.name, i.distribution) for i in manager.plugins() if i.disabled]
    assert disabled == [("twin@aworld-twin-a", "aworld-twin-a")]
    # the plain name disables both
    both = PluginManager(disabled=["twin"])
    assert both.catalog().get("backend", "twin") is None


def test_list_shows_the_conflict_and_a_job_using_it_exits_2_saying_how_to_choose(site, tmp_path):
    listing = run_cli("--list", site=site)
    assert listing.returncode == 0, listing.stderr
    out = listing.stdout
    assert "twin@aworld-twin-a" in out and "twin@aworld-twin-b" in out
    conflicts = out.split("Conflicts", 1)[1]
    assert "plugin 'twin' is registered by more than one distribution" in conflicts
    assert "backend 'twin': aworld-twin-a 1.0.0, aworld-twin-b 1.0.0" in conflicts
    job = tmp_path / "job.yaml"
    job.write_text("name: twin-job\nbackend: twin\n")
    result = run_cli("--config", str(job), "--dry-run", site=site, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "aworld-twin-a" in result.stderr and "aworld-twin-b" in result.stderr
    assert "AWORLD_DISABLE_PLUGINS=" in result.stderr
    chosen = run_cli("--config", str(job), site=site, cwd=tmp_path,
                     env={"AWORLD_DISABLE_PLUGINS": "twin@aworld-twin-a"})
    assert chosen.returncode == 0, chosen.stderr
