"""aworld-core: train tool-using LLM agents with RL through the frameworks you already run.

Public names are imported lazily (PEP 562), so ``import aworld_core`` stays fast and never
imports torch, transformers or an RL framework.

The plugin API (what a plugin or an example may import; everything else is private and may change
without notice) is ``aworld_core.plugin_api.PUBLIC_MODULES``: this module's ``__all__``, the worker
kit ``aworld_core.worker``, the contract modules ``hookspecs``, ``specs``, ``config``, ``schemas``,
``errors``, the launcher side ``launch``, ``vllm_server``, ``evaluate``, ``plots``, the process
rules ``secrets`` and ``offline``, the front doors of ``agents``, ``llm``, ``tokens``,
``datasets``, ``rewards``, ``export``, ``trajectories``, ``gateway``, the test kit
``testing``, and the command lines' ``main``. ``make test`` holds every plugin and example to it;
docs/writing-a-plugin.md ("The plugin API") lists it.
"""

from __future__ import annotations

from aworld_core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "hookimpl": "aworld_core.hookspecs",
    "AworldSettings": "aworld_core.settings",
    "get_settings": "aworld_core.settings",
    "JobConfig": "aworld_core.config",
    "load_job_config": "aworld_core.config",
    "get_plugin_manager": "aworld_core.plugins",
    "maybe_await": "aworld_core.aio",
    "import_ref": "aworld_core.imports",
    "lazy_exports": "aworld_core.lazy",
    "check_report_to": "aworld_core.validation",
    "Backend": "aworld_core.specs",
    "Capabilities": "aworld_core.specs",
    "EnvironmentSpec": "aworld_core.specs",
    "RewardSpec": "aworld_core.specs",
    "RewardConvention": "aworld_core.specs",
    "DatasetSpec": "aworld_core.specs",
    "Episode": "aworld_core.schemas",
    "EpisodeStatus": "aworld_core.schemas",
    "Sample": "aworld_core.schemas",
    "SamplingParams": "aworld_core.schemas",
    "TrainingView": "aworld_core.schemas",
    "TrainingSegment": "aworld_core.schemas",
    "LaunchPlan": "aworld_core.schemas",
    "TrainResult": "aworld_core.schemas",
    "LLMClient": "aworld_core.llm.base",
    "LLMResponse": "aworld_core.llm.base",
    "Agent": "aworld_core.agents.agent",
    "AgentConfig": "aworld_core.agents.agent",
    "Swarm": "aworld_core.agents.swarm",
    "Runners": "aworld_core.runtime.runners",
    "get_agent_tool_env_and_servers": "aworld_core.tools.mcp_config",
    "AgentTrainer": "aworld_core.trainer",
    "EvalReport": "aworld_core.evaluate",
    "TokenEngine": "aworld_core.tokens.engine",
    "TokenOutput": "aworld_core.tokens.engine",
    "TokenLLM": "aworld_core.tokens.llm",
    "HFTokenEngine": "aworld_core.tokens.hf_engine",
    "Gateway": "aworld_core.gateway.app",
    "OpenAICompatibleLLM": "aworld_core.llm.openai_http",
    "AworldTask": "aworld_core.schemas",
    "TaskStatus": "aworld_core.schemas",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

# names that moved to another distribution: asking for one says which to install (an ImportError,
# so ``from aworld_core import AworldTaskClient`` shows it instead of "cannot import name")
_MOVED: dict[str, str] = {
    "AworldTaskClient": "the task service is its own distribution (pip install aworld-service); "
    "import it with `from aworld_service import AworldTaskClient`",
}
_lazy_getattr = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> object:
    if name in _MOVED:
        raise ImportError(f"aworld_core.{name} moved: {_MOVED[name]}", name=name)
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    return __all__

