"""The plugin API: the core modules a plugin (or an example) may import, and the check that holds
plugins to them.

Why: the plugins ship as separately versioned distributions, so every core name they import is a
promise. This module is the one list of those promises; everything else in ``aworld_core`` is
private and may be renamed or moved between core releases without notice. The list is enforced in
``make test`` (tests/core/test_import_contract.py runs :func:`check_paths` over every plugin and
every example), and a third-party plugin can hold itself to it the same way::

    python -m aworld_core.plugin_api path/to/my_plugin/

Why not import-linter: its contracts name what is *forbidden* (every private module, listed, and a
new core module public until someone adds it), it sees module edges but not names (``from
aworld_core.worker import mask_runs`` and ``... import EpisodeRunner`` are the same edge), and it
graphs packages only, not the examples' loose scripts. The rule here is an allow-list of names,
checked from the syntax tree of every ``import`` (function-level ones included).

The rule: a plugin imports ``aworld_core`` names only from a module in :data:`PUBLIC_MODULES`,
and only that module's public names: the names listed there for it, else its ``__all__``, else
the names it defines at top level without a leading underscore (not the names it imports).
Importing a public module itself (``import aworld_core.worker``, ``from aworld_core import
worker as kit``) is allowed; a private one is not. Relative imports (within a plugin's own package)
are not the core's business. Dynamic imports (``importlib``, ``"module:attr"`` references in job
files) are not seen.

To make a core name public: re-export it from a public module (a facade's ``_EXPORTS`` or
``__all__``), or add its module here; then list it in docs/writing-a-plugin.md ("The plugin API").
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CORE = "aworld_core"

#: module -> its public names (``None``: its ``__all__``, else the names it defines). Grouped as in
#: docs/writing-a-plugin.md ("The plugin API"); extend by adding a line.
PUBLIC_MODULES: dict[str, tuple[str, ...] | None] = {
    # the front door: the main types, hookimpl, the plugin manager, agents, engines, the trainer
    "aworld_core": None,
    # the registration contract: hook specs, what hooks return, what a job is, what a run produces
    "aworld_core.hookspecs": None,
    "aworld_core.specs": None,
    "aworld_core.config": ("JobConfig", "load_job_config", "RewardSection", "flatten_dotted"),
    "aworld_core.schemas": None,
    "aworld_core.errors": None,
    # the two halves of a backend: the worker kit (inside the framework's processes) and the
    # launcher side (plan files, the plan's execution, a vLLM server, evaluation, plots, the end-of-run
    # summary, episode files)
    "aworld_core.worker": None,
    "aworld_core.launch": None,
    "aworld_core.vllm_server": (
        "VllmServer", "VllmServerSpec", "VllmWeightSync", "free_port", "gpu_visible", "scratch_root",
        "wait_for_url", "write_safetensors", "reload_payload", "reload_source", "PAUSE_ROUTE",
        "RESUME_ROUTE", "RELOAD_ROUTE", "RESET_PREFIX_CACHE_ROUTE",
    ),
    "aworld_core.evaluate": None,
    "aworld_core.plots": None,
    "aworld_core.run_summary": None,
    "aworld_core.export": ("JsonlEpisodeWriter", "write_jsonl", "read_jsonl", "write_episodes", "read_episodes"),
    # rules every process a plugin starts applies: secrets out of argv and logs, no telemetry
    "aworld_core.secrets": (
        "public_job_dump", "secret_environment", "mask_value", "is_secret_name", "register_secrets",
        "install_log_masking", "check_bind_token", "warn_if_readable_by_others",
    ),
    "aworld_core.offline": ("OFFLINE_ENV", "offline_env", "with_offline_env", "apply_offline_env"),
    # the subpackages' front doors (their __all__)
    "aworld_core.agents": None,
    "aworld_core.llm": None,
    "aworld_core.tokens": None,
    "aworld_core.datasets": None,
    "aworld_core.rewards": None,
    "aworld_core.trajectories": None,
    "aworld_core.gateway": None,
    # MCP configs as agents and jobs take them (the task service checks a task's own)
    "aworld_core.tools.mcp_config": ("parse_mcp_config",),
    # several policies in one job (docs/multi-policy.md): the sections and credit helpers, the per-agent
    # clients a backend passes to the runtime, one policy's view of an engine serving several adapters
    "aworld_core.policies": None,
    "aworld_core.policy_clients": ("PolicyClients", "tag_view"),
    "aworld_core.tokens.adapter_engine": ("AdapterEngine",),
    # the test kit (tiny models, MCP servers, fixtures) for plugins' tests
    "aworld_core.testing": None,
    # the command lines, in-process (``aworld`` / ``python -m aworld_core.run``, ``python -m
    # aworld_core.trajectories``)
    "aworld_core.run": ("main",),
    "aworld_core.trajectories.cli": ("main",),
}


@dataclass(frozen=True)
class Violation:
    """One import of a private core module or of a name a public module does not declare."""

    path: str
    line: int
    module: str
    name: str | None  # None: the module itself was imported

    def __str__(self) -> str:
        if self.name is None:
            what = f"'import {self.module}': {self.module} is private"
        else:
            what = (f"'from {self.module} import {self.name}': "
                    + (f"{self.module} is private" if self.module not in PUBLIC_MODULES
                       else f"{self.name!r} is not in {self.module}'s public names"))
        return (f"{self.path}:{self.line}: {what}; import it from the plugin API "
                "(aworld_core.plugin_api.PUBLIC_MODULES, docs/writing-a-plugin.md 'The plugin API'), "
                "or re-export it there first")


def _defined_names(module: str) -> frozenset[str]:
    """Top-level names ``module``'s source defines (def, class, assignment), underscore-free."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"public module {module} not found")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(n for n in names if not n.startswith("_"))


@cache
def public_names(module: str) -> frozenset[str]:
    """The names a plugin may import from public ``module`` (public submodules included)."""
    listed = PUBLIC_MODULES[module]
    if listed is not None:
        names = frozenset(listed)
    else:
        exported = getattr(importlib.import_module(module), "__all__", None)
        names = frozenset(exported) if exported is not None else _defined_names(module)
    submodules = {m.rsplit(".", 1)[1] for m in PUBLIC_MODULES if m.rpartition(".")[0] == module}
    return names | submodules


def _is_core(module: str) -> bool:
    return module == CORE or module.startswith(CORE + ".")


def check_source(source: str, path: str = "<source>") -> list[Violation]:
    """The violations in one file's source."""
    found: list[Violation] = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_core(alias.name) and alias.name not in PUBLIC_MODULES:
                    found.append(Violation(path, node.lineno, alias.name, None))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_core(node.module):
            if node.module not in PUBLIC_MODULES:
                found.extend(Violation(path, node.lineno, node.module, a.name) for a in node.names)
                continue
            allowed = public_names(node.module)
            found.extend(Violation(path, node.lineno, node.module, a.name) for a in node.names
                         if a.name != "*" and a.name not in allowed)
    return found


def python_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    """Every ``.py`` file under ``paths`` (files given directly included), caches skipped."""
    skip = {"__pycache__", "node_modules", ".venv", "build", "dist"}
    for root in map(Path, paths):
        if root.is_file():
            yield root
            continue
        for path in sorted(root.rglob("*.py")):
            if not skip.intersection(path.relative_to(root).parts):
                yield path


def check_paths(paths: Iterable[str | Path]) -> list[Violation]:
    """The violations in every Python file under ``paths``."""
    found: list[Violation] = []
    for path in python_files(paths):
        found.extend(check_source(path.read_text(encoding="utf-8"), str(path)))
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m aworld_core.plugin_api PATH...``: exit 1 listing each violation, 2 on bad input."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m aworld_core.plugin_api PATH... (plugin packages or files to check)",
              file=sys.stderr)
        return 2
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        print(f"error: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    violations = check_paths(paths)
    for violation in violations:
        print(violation)
    print(f"{len(violations)} import(s) outside the plugin API" if violations
          else "every aworld_core import is in the plugin API")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
