"""The plugin manager: built-in plugins, in-process registration, conflicts, async hooks, and
plugins whose ``@hookimpl`` names a hook that does not exist."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

import pytest

from aworld_core import hookimpl
from aworld_core.errors import PluginConflictError, UnknownBackendError, UnknownHookError, UsageError
from aworld_core.plugins import DEFAULT_PLUGINS, PluginManager, maybe_await
from aworld_core.specs import Backend
from support.fake_dists import make_dist, run_cli


def _plan(job, output_dir):
    raise AssertionError("not planned in these tests")


class _Plugin:
    def __init__(self, name: str):
        self.name = name

    @hookimpl
    def register_backends(self):
        return [Backend(self.name, "in-process test backend", planner=_plan)]

    @hookimpl
    def compute_reward(self, name, episode, sample):
        if name != "async-one":
            return None

        async def score():
            await asyncio.sleep(0)
            return 1.0

        return score()


def test_builtin_is_a_plugin_and_provides_rewards():
    manager = PluginManager(load_entry_points=False)
    assert [info.distribution for info in manager.plugins()] == ["aworld-core"]
    assert {"gsm8k", "format"} <= set(manager.catalog().items("reward"))
    with pytest.raises(UnknownBackendError, match="backend 'trl' is not installed"):
        manager.catalog().backend("trl")


def test_in_process_registration_and_async_hook_results():
    manager = PluginManager(load_entry_points=False)
    manager.register(_Plugin("mine"), name="mine")
    assert manager.catalog().backend("mine").name == "mine"
    value = manager.hook.compute_reward(name="async-one", episode=None, sample=None)
    assert asyncio.run(maybe_await(value)) == 1.0


def test_same_name_from_one_distribution_twice_is_not_a_conflict_but_two_are():
    manager = PluginManager(load_entry_points=False)
    manager.register(_Plugin("dup"), name="a")
    manager.register(_Plugin("dup"), name="b")
    # both registered in-process: same (pseudo) distribution, the later one wins quietly
    assert manager.catalog().backend("dup")
    catalog = manager.catalog()
    first = catalog.items("backend")["dup"]
    catalog.conflicts[("backend", "dup")] = [first, first]
    with pytest.raises(PluginConflictError, match="provided by more than one distribution"):
        catalog.backend("dup")


def test_a_directory_named_like_a_framework_is_not_the_framework(tmp_path, monkeypatch):
    (tmp_path / "someframework").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not Backend("x", "d", _plan, framework="someframework").framework_installed()
    assert Backend("x", "d", _plan, framework="json").framework_installed()


def test_a_plugin_may_override_a_built_in_name():
    from aworld_core.specs import RewardSpec

    class Override:
        @hookimpl
        def register_rewards(self):
            return [RewardSpec("gsm8k", "my own gsm8k", "mymod:score")]

    manager = PluginManager(load_entry_points=False)
    manager.register(Override(), name="override")
    assert manager.catalog().get("reward", "gsm8k").spec.description == "my own gsm8k"
    assert not manager.catalog().conflicts


# --- hygiene: unknown hooks, default plugins by module name, maybe_await's home -----------------

TYPO_PLUGIN = """
from aworld_core import Backend, hookimpl

@hookimpl
def register_backends():
    return [Backend("{backend}", "a backend whose plugin misspells a hook", planner="json:dumps")]

@hookimpl
def build_agnets(job, settings):
    return None
"""

GOOD_PLUGIN = """
from aworld_core import Backend, hookimpl

@hookimpl
def register_backends():
    return [Backend("{backend}", "a backend from a correct plugin", planner="json:dumps")]
"""


def _typo_site(site: Path, suffix: str) -> tuple[str, str]:
    """A misspelled-hook plugin and a correct one, installed into ``site``; their entry-point names."""
    typo, good = f"typo_{suffix}", f"good_{suffix}"
    make_dist(site, "aworld-typo", "0.4.0", {typo: f"aworld_{typo}"},
              {f"aworld_{typo}.py": TYPO_PLUGIN.format(backend=typo)})
    make_dist(site, "aworld-fine", "2.0.0", {good: f"aworld_{good}"},
              {f"aworld_{good}.py": GOOD_PLUGIN.format(backend=good)})
    return typo, good


def test_misspelled_hook_fails_its_plugin_in_list_and_others_keep_working(tmp_path: Path):
    typo, good = _typo_site(tmp_path / "site", "cli")
    listing = run_cli("--list", site=tmp_path / "site")
    assert listing.returncode == 0, listing.stderr
    out = listing.stdout
    line = next(line for line in out.splitlines() if "aworld-typo" in line)
    assert line.split()[:3] == [typo, "aworld-typo", "0.4.0"]
    assert "ERROR: unknown hook 'build_agnets'" in line
    assert "(no such hook in aworld_core.hookspecs; did you mean 'build_agents'?)" in line
    backends = out.split("Backends:\n", 1)[1].split("Tool environments:", 1)[0]
    assert typo not in backends, "a plugin that failed to load must provide nothing"
    assert good in backends and "aworld-fine" in backends
    assert "trl " in backends and "aworld-core 0.1.0  [ok]" in out


def test_misspelled_hook_is_a_load_error_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    typo, good = _typo_site(tmp_path / "site", "inproc")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for module in (f"aworld_{typo}", f"aworld_{good}"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    manager = PluginManager()
    error = next(info for info in manager.load_errors if info.name == typo)
    assert (error.distribution, error.version) == ("aworld-typo", "0.4.0")
    assert "unknown hook 'build_agnets'" in error.error and "did you mean 'build_agents'?" in error.error
    assert manager.pm.get_plugin(typo) is None
    assert manager.catalog().get("backend", typo) is None
    assert manager.catalog().backend(good).name == good
    assert [info for info in manager.plugins() if info.name == typo] == [error]
    manager.pm.check_pending()  # nothing unknown was kept


def test_register_in_process_with_an_unknown_hook_raises_and_registers_nothing():
    class Typo:
        @hookimpl
        def register_backends(self):
            return [Backend("typo", "never registered", planner=_plan)]

        @hookimpl
        def compute_rewrad(self, name, episode, sample):
            return 1.0

    manager = PluginManager(load_entry_points=False)
    with pytest.raises(UnknownHookError, match=r"plugin 'typo' not registered: unknown hook 'compute_rewrad' "
                       r"\(no such hook in aworld_core.hookspecs; did you mean 'compute_reward'\?\)") as caught:
        manager.register(Typo(), name="typo")
    assert isinstance(caught.value, UsageError)
    assert manager.pm.get_plugin("typo") is None
    assert manager.catalog().get("backend", "typo") is None
    manager.pm.check_pending()


def test_an_unknown_hook_without_a_close_match_and_an_optional_hook():
    class Odd:
        @hookimpl
        def frobnicate(self):
            return None

    class Optional:
        @hookimpl(optionalhook=True)
        def a_hook_from_a_later_core(self):
            return None

    manager = PluginManager(load_entry_points=False)
    with pytest.raises(UnknownHookError, match=r"unknown hook 'frobnicate' \(no such hook in aworld_core.hookspecs\);"):
        manager.register(Odd(), name="odd")
    manager.register(Optional(), name="optional")  # optionalhook: pluggy's explicit opt-out
    assert manager.pm.get_plugin("optional") is not None
    manager.pm.check_pending()


def test_check_pending_safety_net_unregisters_and_records_the_plugin():
    class Sneaky:
        @hookimpl
        def register_backends(self):
            return [Backend("sneaky", "registered behind the manager's back", planner=_plan)]

        @hookimpl
        def on_episode_edn(self, episode):
            return None

    manager = PluginManager(load_entry_points=False)
    manager.pm.register(Sneaky(), name="sneaky")  # bypasses PluginManager.register's check
    manager._check_pending()
    assert manager.pm.get_plugin("sneaky") is None
    assert manager.catalog().get("backend", "sneaky") is None
    (error,) = manager.load_errors
    assert error.name == "sneaky" and "unknown hook 'on_episode_edn'" in error.error
    assert "did you mean 'on_episode_end'?" in error.error


def test_default_plugins_are_registered_by_module_name():
    assert DEFAULT_PLUGINS == ("aworld_core.builtin",)
    manager = PluginManager(load_entry_points=False)
    for name in DEFAULT_PLUGINS:
        assert manager.pm.get_plugin(name) is importlib.import_module(name)
    assert [(info.name, info.distribution, info.error) for info in manager.plugins()] == [
        ("aworld_core.builtin", "aworld-core", None)
    ]


def test_a_disabled_plugin_is_listed_once_as_disabled():
    manager = PluginManager(disabled=["trl"])
    trl = [info for info in manager.plugins() if info.name == "trl"]
    assert [(info.distribution, info.disabled) for info in trl] == [("aworld-trl", True)]


def test_maybe_await_lives_in_aio_and_is_re_exported():
    import aworld_core
    import aworld_core.aio
    import aworld_core.plugins

    assert aworld_core.plugins.maybe_await is aworld_core.aio.maybe_await
    assert aworld_core.maybe_await is aworld_core.aio.maybe_await
    assert aworld_core.aio.maybe_await.__module__ == "aworld_core.aio"

    async def three() -> int:
        return 3

    assert asyncio.run(maybe_await(three())) == 3
    assert asyncio.run(maybe_await(4)) == 4
