"""Building what a backend worker needs, with one rule each: the job, the agent, the token client.

A backend worker gets the job as serialized config (JSON text, a dict or a file path) and
re-creates everything from it in its own process. The agent is built once per process and job
(agents hold no episode state, so one serves every concurrent episode). The token client follows
one rule for its chat template, tool parser and limits: an explicit argument, else the job's
``model`` section, else the tokenizer's own template and the ``hermes`` parser.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aworld_core.config import JobConfig, load_job_config
from aworld_core.errors import UsageError
from aworld_core.worker.cache import WorkerCache

#: the job files this process read, by (path, modification time)
_jobs: WorkerCache[JobConfig] = WorkerCache()


def _close_agent(agent: Any) -> None:
    """An ``OpenAIAgent`` stops its gateways; other agents hold nothing to close."""
    from aworld_core.worker.openai_agent import OpenAIAgent

    if isinstance(agent, OpenAIAgent):
        agent.close()


#: the agents built, by (plugin manager, job): one serves every concurrent episode; an
#: ``OpenAIAgent``'s gateways stop with it (``clear_caches``, at exit)
_agents: WorkerCache[Any] = WorkerCache(close=_close_agent)


def load_job(job: str | Path | dict[str, Any] | JobConfig, *, setting: str | None = None) -> JobConfig:
    """The job a worker was handed: a ``JobConfig``, a dict, JSON text or a config file path.

    A file is read once per process (per modification time); its directory goes on ``sys.path``
    so ``module:function`` references written beside it import in workers started elsewhere.
    ``setting`` names where the framework's config gave the job, for the error when it is bad.
    """
    try:
        return _load_job(job)
    except UsageError as exc:
        if setting is None:
            raise
        raise UsageError(f"{exc} ({setting})") from None


def _load_job(job: str | Path | dict[str, Any] | JobConfig) -> JobConfig:
    if isinstance(job, JobConfig):
        return job
    if isinstance(job, dict):
        return load_job_config(data=job)
    if isinstance(job, str) and job.strip().startswith("{"):
        return load_job_config(data=json.loads(job))
    if not isinstance(job, (str, Path)):
        raise UsageError(f"job must be a JobConfig, a dict, JSON text or a file path; got {type(job).__name__}")
    file = Path(job)
    if not file.is_file():
        raise UsageError(f"job config file {str(job)!r} does not exist")
    cached = _jobs.get((str(file.resolve()), file.stat().st_mtime), lambda: load_job_config(file))
    if cached.base_dir and cached.base_dir not in sys.path:
        sys.path.append(cached.base_dir)
    return cached


def job_key(job: JobConfig) -> str:
    """A stable key for ``job`` (its JSON), for per-process caches keyed by the job."""
    return job.model_dump_json()


def build_agent(job: JobConfig, *, settings: Any = None, manager: Any = None, cache: bool = True) -> Any:
    """The job's ``Agent`` or ``Swarm`` through the ``build_agents`` hook, once per process and job;
    for ``agent.openai_agent``, the :class:`~aworld_core.worker.openai_agent.OpenAIAgent` it names
    (the core's ``rollout`` hook runs it through the gateway; it owns its gateways, closed with the
    cache, or by its caller when ``cache=False``).

    Raises ``UsageError`` when no plugin builds one or the answer is not an Agent/Swarm.
    """
    from aworld_core.plugins import get_plugin_manager

    manager = manager or get_plugin_manager()
    if job.agent.openai_agent:
        from aworld_core.worker.openai_agent import OpenAIAgent

        if not cache:
            return OpenAIAgent.from_job(job)
        return _agents.get((id(manager), job_key(job)), lambda: OpenAIAgent.from_job(job))
    if not cache:
        return _build_agent(job, settings, manager)
    return _agents.get((id(manager), job_key(job)), lambda: _build_agent(job, settings, manager))


def _build_agent(job: JobConfig, settings: Any, manager: Any) -> Any:
    if settings is None:
        from aworld_core.settings import get_settings

        settings = get_settings()
    agent = manager.hook.build_agents(job=job, settings=settings)
    if agent is None:
        raise UsageError(
            "no plugin built an agent for the job: set 'agent' in the job (its fields, or "
            "'factory: module:function' returning an Agent or Swarm)"
        )
    check_agent(agent, "the build_agents hook")
    return agent


def chat_template_of(job: JobConfig | None, chat_template: str | None = None) -> str | None:
    """The chat template a worker uses: ``chat_template`` (text or a file), else the job's
    ``model.chat_template`` (a file resolved against the config's folder), else ``None`` (the
    tokenizer's own)."""
    template = chat_template
    if template is None and job is not None and job.model is not None:
        template = job.model.chat_template
    if template is None:
        return None
    if "{{" in template or "{%" in template:
        return template
    return job.resolve_path(template) if job is not None else template


def tool_parser_of(
    job: JobConfig | None, tool_parser: Any = None, *, framework_format: str | None = None, setting: str = "tool_parser"
) -> Any:
    """``tool_parser``, else the job's ``model.tool_parser``, else the framework's own tool-call
    format (``framework_format``, e.g. verl's ``multi_turn.format``) when the core has a parser of
    that name, else ``hermes``. A framework format the core does not know is a ``UsageError``
    naming ``setting`` (where to choose a parser instead)."""
    if tool_parser is not None:
        return tool_parser
    if job is not None and job.model is not None:
        return job.model.tool_parser
    if framework_format is None:
        return "hermes"
    from aworld_core.tokens.parsers import available_tool_parsers

    if framework_format not in available_tool_parsers():
        raise UsageError(
            f"the framework's tool-call format {framework_format!r} has no AWorld tool parser of the same name; "
            f"give {setting} (e.g. hermes, llama3_json, qwen3_coder or 'module:Class')"
        )
    return framework_format


def check_agent(agent: Any, source: str) -> Any:
    """``agent`` when it is an ``Agent``, a ``Swarm`` or an ``OpenAIAgent`` (what the kit runs);
    else a ``UsageError`` naming ``source``."""
    from aworld_core.agents import Agent, Swarm
    from aworld_core.worker.openai_agent import OpenAIAgent

    if not isinstance(agent, (Agent, Swarm, OpenAIAgent)):
        raise UsageError(f"{source} returned {type(agent).__name__}; it must return an aworld_core.Agent or "
                         f"aworld_core.Swarm")
    return agent


def agent_from_ref(ref: str, base_dir: str | None = None) -> Any:
    """The agent an import reference names: an ``Agent``/``Swarm`` object, or a function
    returning one (called)."""
    from aworld_core.agents import Agent, Swarm
    from aworld_core.imports import import_ref

    target = import_ref(ref, base_dir)
    return target if isinstance(target, (Agent, Swarm)) or not callable(target) else target()


def pad_id_of(tokenizer: Any) -> int:
    """The id a placeholder or padding row uses: the tokenizer's pad token, else ``eos``, else 0."""
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad if pad is not None else (getattr(tokenizer, "eos_token_id", None) or 0))


def build_token_llm(
    engine: Any,
    tokenizer: Any,
    job: JobConfig | None = None,
    *,
    chat_template: str | None = None,
    tool_parser: Any = None,
    max_response_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    **kwargs: Any,
) -> Any:
    """The token-level client over ``engine`` with the one rule for template, parser and limits.

    ``kwargs`` go to :class:`~aworld_core.tokens.llm.TokenLLM` (``model_name``,
    ``chat_template_kwargs``, ``end_of_turn``, ...). The job's ``model.family`` and
    ``model.template_options`` choose the chat-template family (terminators, tool parser, template
    options); ``family=`` / ``template_options=`` given here win.
    """
    from aworld_core.tokens.llm import TokenLLM

    if job is not None and job.model is not None:
        kwargs.setdefault("family", job.model.family)
        kwargs.setdefault("template_options", job.model.template_options)
    return TokenLLM(
        engine,
        tokenizer,
        chat_template=chat_template_of(job, chat_template),
        tool_parser=tool_parser_of(job, tool_parser),
        max_response_tokens=max_response_tokens,
        max_prompt_tokens=max_prompt_tokens,
        **kwargs,
    )


def clear_caches() -> None:
    """Forget cached jobs and agents (tests; a worker that reloads its job)."""
    _jobs.close()
    _agents.close()
