"""Error types.

Every error the user can cause says what was wrong and how to fix it. ``exit_code`` is what
the CLI exits with: 2 for bad input (config, arguments, unknown names), 1 for failures at run time.
"""

from __future__ import annotations


class AworldError(Exception):
    """Base class of every error aworld-core raises on purpose."""

    exit_code = 1


class UsageError(AworldError):
    """Bad input from the user: a CLI argument, a config value, an unknown name."""

    exit_code = 2


class EpisodeInputError(UsageError):
    """One episode's input cannot be run (a sample with no prompt, a malformed message, a
    conversation its chat template refuses). A ``UsageError`` for direct callers; the worker kit
    records it as that episode's failure instead of stopping the batch."""


class ConfigError(UsageError):
    """A job config that does not validate. ``problems`` lists ``(field, value, expected)``."""

    def __init__(self, message: str, problems: list[tuple[str, object, str]] | None = None):
        super().__init__(message)
        self.problems = problems or []


class UnknownBackendError(UsageError):
    """The backend asked for is not installed."""


class PluginConflictError(UsageError):
    """Two distributions claim the same name (backend, environment, reward or dataset)."""


class PluginLoadError(AworldError):
    """A plugin could not be imported or registered."""


class UnknownHookError(PluginLoadError, UsageError):
    """A plugin implements a hook that ``aworld_core.hookspecs`` does not define (a misspelled
    ``@hookimpl`` function): the plugin is not registered."""


class FrameworkNotInstalledError(UsageError):
    """A backend's RL framework is missing from this environment."""


class MCPConnectionError(AworldError):
    """An MCP server refused us or could not be reached when an episode started."""


class LLMError(AworldError):
    """The LLM endpoint failed after retries."""


class RewardError(AworldError):
    """A reward function raised or returned something that is not a number."""


class DatasetError(UsageError):
    """A dataset could not be loaded or has malformed rows."""
