"""What a plugin declares it provides: backends, tool environments, rewards, datasets.

Plugins return these from the ``register_*`` hooks; the core collects them into a catalog
(``aworld_core.plugins``) tagged with the distribution that provided each one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BackendSpec:
    """An RL training backend.

    ``framework`` is the import name of the RL framework it drives (``verl``, ``areal``,
    ``swift``, ``trl``), checked lazily so ``--list`` works where it is not installed;
    ``install_hint`` is what to run to get it.
    """

    name: str
    description: str
    framework: str | None = None
    install_hint: str = ""
    requires_gpu: bool = False

    def framework_installed(self) -> bool:
        if self.framework is None:
            return True
        try:
            spec = importlib.util.find_spec(self.framework)
        except (ImportError, ValueError):
            return False
        # a bare directory named like the framework (e.g. tests/verl on sys.path) is a namespace
        # package with no origin: that is not the framework
        return spec is not None and spec.origin is not None

    def install_text(self) -> str:
        """What to run to get the framework (never a guessed package name: import names and
        distribution names differ, e.g. ``swift`` is ms-swift)."""
        return self.install_hint or f"install the package that provides the '{self.framework}' module"


@dataclass(frozen=True)
class EnvironmentSpec:
    """A tool environment (usually an MCP server) agents can be pointed at."""

    name: str
    description: str
    servers: tuple[str, ...] = ()
    serve_command: tuple[str, ...] = ()
    #: the request that frees what the server keeps for an episode, as ``mcp_config``'s
    #: ``release`` takes it (``"METHOD URL-template"``, ``mcp_release``); none when it keeps
    #: nothing. A job running this environment exports it as ``MCP_SERVER_RELEASE``, and agents
    #: built from the job's defaults send exactly that at episode end.
    release: str | None = None

    def __post_init__(self) -> None:
        if self.release is not None:
            from aworld_core.tools.mcp_release import parse_release

            try:
                parse_release(self.release)
            except ValueError as exc:  # the plugin's mistake, named at registration
                raise ValueError(f"environment {self.name!r}: {exc}") from None


@dataclass(frozen=True)
class RewardSpec:
    """A named reward.

    ``func`` is a callable or an import reference (``module:func`` / ``path/file.py:func``).
    A plain reward has the seed's signature ``(data_source, solution_str, ground_truth,
    extra_info) -> float``; a trajectory-aware one (``trajectory_aware=True``) is called as
    ``func(episode=..., sample=...)`` with the whole :class:`~aworld_core.schemas.Episode`.
    """

    name: str
    description: str
    func: Callable[..., Any] | str
    trajectory_aware: bool = False


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset loader: ``loader(**options) -> list[Sample]``."""

    name: str
    description: str
    loader: Callable[..., Any] | str
    options: dict[str, Any] = field(default_factory=dict)
