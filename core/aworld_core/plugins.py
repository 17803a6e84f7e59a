"""The plugin manager and the catalog of what installed plugins provide.

The core's built-in implementations are registered by module name (``DEFAULT_PLUGINS``) as
plugins like any other. Entry points of the group ``aworld`` are loaded one by one with pluggy's
``load_setuptools_entrypoints`` so that a plugin that fails to import, or that implements a hook
which does not exist (a misspelled ``@hookimpl``), is reported with its distribution and the
error, and none of its hooks are used, while the others keep working. ``AWORLD_DISABLE_PLUGINS``
(comma list of entry-point names) blocks named plugins before they are imported.

An entry-point name that two installed distributions both register is not resolved by load
order (the second one would silently vanish): each is registered as ``name@distribution``, so
both show in ``--list`` beside a conflict line naming them, what they provide under the same
name is the catalog's conflict error, and ``AWORLD_DISABLE_PLUGINS=name@distribution`` (or
uninstalling one) chooses.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as importlib_metadata
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from aworld_core import hookspecs
from aworld_core.aio import maybe_await as maybe_await  # re-export: plugins import it from here
from aworld_core.errors import PluginConflictError, UnknownBackendError, UnknownHookError, UsageError
from aworld_core.specs import Backend, Command, DatasetSpec, EnvironmentSpec, RewardConvention, RewardSpec

# the core's own plugins, registered by module name (imported when a manager is built)
DEFAULT_PLUGINS: tuple[str, ...] = ("aworld_core.builtin",)
CORE_DIST = "aworld-core"

# The backends this project publishes (backend name -> the requirement that installs it, with the
# extra its framework needs): a plugin that is not installed registers nothing, so this index is
# how a missing one is named with its install command (distribution names are not always
# aworld-<backend>; tests/core/test_install_hints.py checks each against the repository). Other
# backends are third-party distributions the core knows nothing about.
PUBLISHED_BACKENDS: dict[str, str] = {
    "trl": "aworld-trl",
    "verl": "aworld-verl[verl]",
    "areal": "aworld-areal[areal]",
    "swift": "aworld-swift[swift]",
}

# The ``aworld`` subcommands this project's distributions add (command -> the distribution that
# registers it): as for backends, only so that a missing one is named with its install command.
PUBLISHED_COMMANDS: dict[str, str] = {"serve": "aworld-service"}

# hooks that were removed, and what replaced them: a plugin still implementing one is told
REMOVED_HOOKS: dict[str, str] = {
    "plan_launch": "a backend is one object now: register_backends returns aworld_core.Backend(name, "
    "description, planner=...) and the core calls its planner (docs/writing-a-plugin.md)",
    "launch_trainer": "a backend's own launch is its Backend object's launcher= (docs/writing-a-plugin.md)",
}


def backend_install_hint(name: str) -> str:
    """How to get a missing backend: the distribution that ships it, or that this project has none."""
    requirement = PUBLISHED_BACKENDS.get(name)
    if requirement is None:
        return (
            f"no distribution of this project provides it (they provide: {', '.join(sorted(PUBLISHED_BACKENDS))}); "
            f"a third-party backend comes with the distribution that registers it"
        )
    return f"install it with: pip install {f'{requirement!r}' if '[' in requirement else requirement}"


def command_install_hint(name: str) -> str:
    """How to get a missing ``aworld`` subcommand: the distribution that adds it, if this project has one."""
    dist = PUBLISHED_COMMANDS.get(name)
    if dist is None:
        return "no distribution of this project provides it; a plugin's command comes with the plugin"
    return f"the '{name}' command comes with {dist}: pip install {dist}"


@dataclass(frozen=True)
class PluginInfo:
    """One plugin as ``--list`` shows it."""

    name: str
    distribution: str
    version: str
    error: str | None = None
    disabled: bool = False


@dataclass(frozen=True)
class EntryPointConflict:
    """One entry-point name registered by more than one distribution."""

    name: str
    owners: tuple[tuple[str, str, str], ...]  # (distribution, version, name it is registered under)

    def describe(self) -> str:
        who = " and ".join(f"{dist} {version} (as '{registered}')" for dist, version, registered in self.owners)
        return (
            f"plugin '{self.name}' is registered by more than one distribution: {who}; uninstall one, "
            f"or disable one with AWORLD_DISABLE_PLUGINS={self.owners[-1][2]}"
        )


def qualified_name(name: str, dist: str) -> str:
    """The name a plugin whose entry-point name another distribution also uses is registered under."""
    return f"{name}@{dist}"


def _entry_points() -> list[tuple[Any, str, str, str]]:
    """``(entry point, distribution, version, registered name)`` for every ``aworld`` entry point.

    The registered name is the entry point's own name, or ``name@distribution`` when another
    distribution registers the same name (pluggy keys plugins by name: loading only the first
    would make the other vanish without a word)."""
    found = []
    for ep in importlib_metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        dist = ep.dist.metadata["Name"] if ep.dist is not None else "unknown distribution"
        version = ep.dist.version if ep.dist is not None else "?"
        found.append((ep, dist, version))
    dists_by_name: dict[str, set[str]] = {}
    for ep, dist, _ in found:
        dists_by_name.setdefault(ep.name, set()).add(dist)
    return [
        (ep, dist, version, qualified_name(ep.name, dist) if len(dists_by_name[ep.name]) > 1 else ep.name)
        for ep, dist, version in found
    ]


@dataclass(frozen=True)
class Provided:
    """An item a plugin provides, tagged with who provides it."""

    spec: Any
    plugin: str
    distribution: str
    version: str

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class Catalog:
    """Backends, environments, rewards, reward conventions, datasets and commands, by name, with
    conflicts kept aside."""

    kinds: dict[str, dict[str, Provided]] = field(default_factory=dict)
    conflicts: dict[tuple[str, str], list[Provided]] = field(default_factory=dict)
    errors: list[PluginInfo] = field(default_factory=list)

    def items(self, kind: str) -> dict[str, Provided]:
        return self.kinds.get(kind, {})

    def get(self, kind: str, name: str) -> Provided | None:
        key = (kind, name)
        if key in self.conflicts:
            owners = self.conflicts[key]
            who = " and ".join(f"{p.distribution} {p.version} (plugin '{p.plugin}')" for p in owners)
            raise PluginConflictError(
                f"{kind} '{name}' is provided by more than one distribution: {who}. "
                f"Uninstall one of them, or disable one with AWORLD_DISABLE_PLUGINS="
                f"{owners[-1].plugin}"
            )
        return self.items(kind).get(name)

    def backend(self, name: str) -> Backend:
        """The backend registered as ``name``; ``UnknownBackendError`` naming the installed ones and
        how to get it when it is not installed."""
        provided = self.get("backend", name)
        if provided is None:
            installed = ", ".join(sorted(self.items("backend"))) or "none"
            raise UnknownBackendError(
                f"backend '{name}' is not installed; {backend_install_hint(name)}\n"
                f"installed backends: {installed}"
            )
        return provided.spec

    def command(self, name: str) -> Command:
        """The ``aworld`` subcommand registered as ``name``; ``UsageError`` naming the installed ones
        and the distribution that adds it when it is not installed."""
        provided = self.get("command", name)
        if provided is None:
            installed = ", ".join(sorted(self.items("command"))) or "none"
            raise UsageError(
                f"unknown command '{name}': {command_install_hint(name)} (installed commands: {installed}; "
                f"to run a job: aworld --config job.yaml; see aworld --list)"
            )
        return provided.spec


_KINDS = {
    "backend": ("register_backends", Backend),
    "environment": ("register_environments", EnvironmentSpec),
    "reward": ("register_rewards", RewardSpec),
    "reward_convention": ("register_reward_conventions", RewardConvention),
    "dataset": ("register_datasets", DatasetSpec),
    "command": ("register_commands", Command),
}


class PluginManager:
    """pluggy's manager plus load errors, distribution info and the catalog."""

    def __init__(self, disabled: Iterable[str] = (), load_entry_points: bool = True):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.disabled = {name.strip() for name in disabled if name.strip()}
        self.load_errors: list[PluginInfo] = []
        self.entry_point_conflicts: list[EntryPointConflict] = []
        # registered name -> (distribution, version) of entry points loaded under a qualified name
        self._entry_dists: dict[str, tuple[str, str]] = {}
        self._catalog: Catalog | None = None
        for module_name in DEFAULT_PLUGINS:
            self.register(importlib.import_module(module_name), name=module_name)
        if load_entry_points:
            self._load_entry_points()

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def _load_entry_points(self) -> None:
        for name in sorted(self.disabled):
            self.pm.set_blocked(name)
        seen: set[str] = set()
        entry_points = _entry_points()
        owners: dict[str, list[tuple[str, str, str]]] = {}
        for ep, dist, version, registered in entry_points:
            if registered != ep.name:
                owners.setdefault(ep.name, []).append((dist, version, registered))
        self.entry_point_conflicts = [EntryPointConflict(name, tuple(who)) for name, who in owners.items()]
        for ep, dist, version, registered in entry_points:
            if registered in seen:  # the same distribution seen twice on sys.path
                continue
            seen.add(registered)
            if self.pm.is_blocked(ep.name) or self.pm.is_blocked(registered):
                continue
            try:
                if registered == ep.name:
                    self.pm.load_setuptools_entrypoints(hookspecs.ENTRY_POINT_GROUP, name=ep.name)
                else:  # pluggy loads a name once: this one is registered under its qualified name
                    self.pm.register(ep.load(), name=registered)
                    self._entry_dists[registered] = (dist, version)
            except Exception as exc:  # a broken plugin must not take the others down
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                self.load_errors.append(
                    PluginInfo(registered, dist, version, error=f"failed to load {ep.value}: {detail}")
                )
                continue
            plugin = self.pm.get_plugin(registered)
            unknown = self._unknown_hooks(plugin) if plugin is not None else []
            if unknown:  # unregister it whole: a plugin with only some hooks working misbehaves quietly
                self.pm.unregister(name=registered)
                error = self._unknown_hooks_message(unknown)
                self.load_errors.append(PluginInfo(registered, dist, version, error=error))
        self._check_pending()

    def _check_pending(self) -> None:
        """pluggy's ``check_pending``, with any plugin it names unregistered and recorded."""
        while True:
            try:
                self.pm.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin)
                if name is None:
                    raise
                unknown = self._unknown_hooks(exc.plugin)
                error = self._unknown_hooks_message(unknown) if unknown else str(exc)
                dist, version = self._dist_of(name)
                self.pm.unregister(name=name)
                self.load_errors.append(PluginInfo(name, dist, version, error=error))
                self._catalog = None

    def _unknown_hooks(self, plugin: object) -> list[str]:
        """Names of the hooks ``plugin`` implements that no spec in ``aworld_core.hookspecs`` has
        (``@hookimpl(optionalhook=True)`` impls are allowed, as in pluggy)."""
        return sorted(
            caller.name
            for caller in self.pm.get_hookcallers(plugin) or []
            if not caller.has_spec()
            and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
        )

    def _unknown_hooks_message(self, unknown: list[str]) -> str:
        """Say which hooks do not exist, the closest real ones, and how to fix it."""
        specs = [name for name, caller in vars(self.pm.hook).items() if name[0] != "_" and caller.has_spec()]
        parts = []
        for name in unknown:
            if name in REMOVED_HOOKS:
                parts.append(f"hook '{name}' was removed: {REMOVED_HOOKS[name]}")
                continue
            close = difflib.get_close_matches(name, specs, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            parts.append(f"unknown hook '{name}' (no such hook in aworld_core.hookspecs{hint})")
        fix = "" if set(unknown) <= set(REMOVED_HOOKS) else "; rename the function to a hook aworld_core.hookspecs defines"
        return "; ".join(parts) + fix

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register a plugin object in-process (tests, notebooks); invalidates the catalog.

        Raises :class:`~aworld_core.errors.UnknownHookError` (and registers nothing) when the
        plugin implements a hook that ``aworld_core.hookspecs`` does not define."""
        registered = self.pm.register(plugin, name=name)
        if registered is None:  # blocked name: pluggy registers nothing
            return
        self._catalog = None
        unknown = self._unknown_hooks(plugin)
        if unknown:
            self.pm.unregister(plugin)
            label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
            raise UnknownHookError(f"plugin '{label}' not registered: {self._unknown_hooks_message(unknown)}")

    def _dist_of(self, plugin_name: str) -> tuple[str, str]:
        if plugin_name in DEFAULT_PLUGINS:
            return CORE_DIST, _version(CORE_DIST)
        if plugin_name in self._entry_dists:
            return self._entry_dists[plugin_name]
        plugin = self.pm.get_plugin(plugin_name)
        for loaded, dist in self.pm.list_plugin_distinfo():
            if loaded is plugin:
                return dist.metadata["Name"], dist.version
        return "(registered in-process)", "-"

    def plugins(self) -> list[PluginInfo]:
        """Every plugin: loaded ones, ones that failed, and disabled ones."""
        hook_errors = {info.name: info for info in self.catalog().errors}
        infos = [
            hook_errors.get(name) or PluginInfo(name, *self._dist_of(name))
            for name, plugin in self.pm.list_name_plugin()
            if plugin is not None  # None: a blocked (disabled) name, listed below
        ]
        infos += self.load_errors
        for ep, dist, version, registered in _entry_points():
            if ep.name in self.disabled or registered in self.disabled:
                infos.append(PluginInfo(registered, dist, version, disabled=True))
        return infos

    def catalog(self) -> Catalog:
        """Call every ``register_*`` hook once, plugin by plugin, and index the answers."""
        if self._catalog is not None:
            return self._catalog
        catalog = Catalog()
        failed: set[str] = set()
        for kind, (hook_name, spec_type) in _KINDS.items():
            by_name = catalog.kinds.setdefault(kind, {})
            # pluggy calls the last-registered first; reverse so the built-in comes first
            for impl in reversed(getattr(self.pm.hook, hook_name).get_hookimpls()):
                dist, version = self._dist_of(impl.plugin_name)
                try:
                    specs = impl.function() or []
                    for spec in specs:
                        if not isinstance(spec, spec_type):
                            raise TypeError(
                                f"{hook_name} returned {type(spec).__name__}, "
                                f"expected {spec_type.__name__}"
                            )
                except Exception as exc:
                    if impl.plugin_name not in failed:
                        failed.add(impl.plugin_name)
                        catalog.errors.append(
                            PluginInfo(impl.plugin_name, dist, version, error=f"{hook_name} failed: {exc!r}")
                        )
                    continue
                for spec in specs:
                    item = Provided(spec, impl.plugin_name, dist, version)
                    key = (kind, spec.name)
                    existing = by_name.get(spec.name)
                    if key in catalog.conflicts:
                        catalog.conflicts[key].append(item)
                    elif existing is not None and existing.distribution == CORE_DIST and dist != CORE_DIST:
                        by_name[spec.name] = item  # a plugin may override a built-in name
                    elif existing is not None and dist == CORE_DIST:
                        continue
                    elif existing is not None and existing.distribution != dist:
                        catalog.conflicts[key] = [by_name.pop(spec.name), item]
                    else:
                        by_name[spec.name] = item
        self._catalog = catalog
        return catalog


def _version(dist: str) -> str:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


_lock = threading.Lock()
_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, built on first use from the settings."""
    global _manager
    with _lock:
        if _manager is None:
            from aworld_core.settings import get_settings

            _manager = PluginManager(disabled=get_settings().disabled_plugins)
        return _manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Replace (or drop, so it is rebuilt) the process-wide manager. For tests and embedding."""
    global _manager
    with _lock:
        _manager = manager
