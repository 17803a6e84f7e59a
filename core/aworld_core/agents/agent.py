"""``Agent`` and ``AgentConfig``: the seed's way of writing an agent, trainable unchanged.

An ``Agent`` is data: a name, a system prompt, how to reach its own LLM, which tools it has.
It holds no per-episode state, so one object serves any number of concurrent episodes; the
runtime (``aworld_core.runtime.episode``) opens per-episode MCP sessions and conversations.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from aworld_core.agents.compaction import CompactionConfig
from aworld_core.errors import ConfigError, UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tools.mcp_config import MCPConfig, MCPServerConfig, parse_mcp_config, select_servers
from aworld_core.tools.python_tools import PythonTool, as_python_tool


class AgentConfig(BaseModel):
    """How an agent reaches its LLM, how it samples, and its limits.

    The one definition of these fields: the job config's ``agent`` section extends this class
    (``aworld_core.config.AgentSection``), ``AgentTrainer`` serializes all of them and
    ``agent_from_job`` rebuilds them in workers. The ``llm_*`` fields fall back to the
    ``LLM_BASE_URL`` / ``LLM_MODEL_NAME`` / ``LLM_API_KEY`` settings when unset. A trained agent
    ignores them during training: it talks to the LLM client the backend passes in.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    llm_provider: Literal["openai"] = Field(
        default="openai", description="only OpenAI-compatible endpoints: vLLM, SGLang, hosted APIs."
    )
    llm_base_url: str | None = Field(
        default=None, description="e.g. http://127.0.0.1:8000/v1; default: LLM_BASE_URL."
    )
    llm_model_name: str | None = Field(default=None, description="Default: LLM_MODEL_NAME.")
    llm_api_key: str | None = Field(
        default=None,
        repr=False,
        exclude=True,  # never in a dumped job, plan file or printed plan: workers get LLM_API_KEY
        description="Default: LLM_API_KEY. Never serialized: a launch hands it to its workers as the "
        "LLM_API_KEY environment variable.",
    )
    temperature: float | None = Field(
        default=None,
        ge=0,
        validation_alias=AliasChoices("temperature", "llm_temperature"),  # upstream AWorld's spelling
        description="Sampling temperature (also accepted as llm_temperature); None: the server's.",
    )
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None
    max_tokens: int | None = Field(default=None, ge=1, description="Tokens per LLM reply.")
    max_steps: int = Field(default=10, ge=1, description="LLM calls per episode before it is cut.")
    llm_timeout_s: float = Field(default=120.0, gt=0, description="One LLM request.")
    llm_retries: int = Field(default=3, ge=0, description="Retries on connection errors, 5xx, 429.")
    tool_timeout_s: float = Field(default=60.0, gt=0, description="One tool call.")
    episode_timeout_s: float | None = Field(default=None, gt=0, description="Whole episode; None: none.")
    mcp_connect_retries: int = Field(default=2, ge=0, description="Retries to reach MCP servers at start.")
    compaction: CompactionConfig | None = Field(
        default=None,
        description="Keep the context within max_context_tokens: truncate or drop old tool results, or have the "
        "policy summarize its history (aworld_core.agents.compaction); None: the context grows.",
    )

    @classmethod
    def parse(cls, data: dict[str, Any], where: str = "conf", agent: str | None = None) -> AgentConfig:
        """``data`` validated, or a ``ConfigError`` naming each bad field as ``<where>.<field>``."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = [
                (
                    ".".join([where, *(str(part) for part in error["loc"])]),
                    "***" if error["loc"][:1] == ("llm_api_key",) else error.get("input"),
                    _expected(cls, error),
                )
                for error in exc.errors()
            ]
            lines = [f"  {field}: got {value!r}; expected {expected}" for field, value, expected in problems]
            header = f"invalid AgentConfig for agent '{agent}'" if agent else "invalid AgentConfig"
            raise ConfigError(f"{header}:\n" + "\n".join(lines), problems) from None

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, max_tokens=self.max_tokens
        )


def _expected(model: type[BaseModel], error: Any) -> str:
    """What a field accepts, for an error line: the allowed values, the field list, or pydantic's rule."""
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"no such field; the fields are {', '.join(model.model_fields)}"
    if kind == "literal_error" and "expected" in ctx:
        info = model.model_fields.get(str(error["loc"][0])) if error["loc"] else None
        note = f" ({info.description.rstrip('.')})" if info is not None and info.description else ""
        return f"one of {ctx['expected']}{note}"
    return str(error.get("msg", "a valid value"))


class Agent:
    """A tool-using agent.

    ``mcp_config`` is the seed's ``{"mcpServers": {...}}`` and ``mcp_servers`` selects which of its
    servers this agent uses (all when None). ``tools`` are Python callables (sync or async).
    ``trainable`` marks the agent whose turns are trained when it runs in a ``Swarm`` (a lone agent
    run by a backend is the trained one unless it says ``trainable=False``). ``llm`` optionally
    gives a ready ``LLMClient`` to use instead of ``conf``'s endpoint when the agent is not the
    one being trained.
    """

    def __init__(
        self,
        name: str,
        desc: str = "",
        system_prompt: str | None = None,
        conf: AgentConfig | dict[str, Any] | None = None,
        mcp_config: dict[str, Any] | MCPConfig | None = None,
        mcp_servers: list[str] | None = None,
        tools: list[Callable[..., Any] | PythonTool] | None = None,
        trainable: bool = True,
        *,
        llm: Any = None,
    ):
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"an agent needs a non-empty name, got {name!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise UsageError(f"agent '{name}': system_prompt must be a string or None, got {type(system_prompt).__name__}")
        if conf is None:
            conf = AgentConfig()
        elif isinstance(conf, dict):
            conf = AgentConfig.parse(conf, agent=name)
        elif not isinstance(conf, AgentConfig):
            raise UsageError(
                f"agent '{name}': conf must be an AgentConfig or a dict of its fields, "
                f"got {type(conf).__name__}"
            )
        self.name = name
        self.desc = desc or ""
        self.system_prompt = system_prompt
        self.conf = conf
        self.trainable = bool(trainable)
        self.mcp_config: MCPConfig | None = parse_mcp_config(mcp_config) if mcp_config is not None else None
        if mcp_servers is not None and isinstance(mcp_servers, str):
            mcp_servers = [s.strip() for s in mcp_servers.split(",") if s.strip()]
        if mcp_servers and self.mcp_config is None:
            raise UsageError(
                f"agent '{name}' names mcp_servers {mcp_servers} but has no mcp_config; pass "
                f"mcp_config (e.g. from get_agent_tool_env_and_servers())"
            )
        self.mcp_servers: list[str] | None = list(mcp_servers) if mcp_servers is not None else None
        self.servers: dict[str, MCPServerConfig] = (
            select_servers(self.mcp_config, self.mcp_servers) if self.mcp_config is not None else {}
        )
        self.tools: list[PythonTool] = [as_python_tool(t) for t in (tools or [])]
        seen: set[str] = set()
        for tool in self.tools:
            if tool.name in seen:
                raise UsageError(f"agent '{name}' has two tools named '{tool.name}'")
            seen.add(tool.name)
        self._llm = llm
        self._own_llms: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={len(self.tools)}, mcp_servers={list(self.servers)})"

    @property
    def id(self) -> str:
        return self.name

    def sampling(self) -> SamplingParams:
        return self.conf.sampling()

    def own_llm(self) -> Any:
        """The agent's own LLM client (its fixed endpoint), one per event loop, reused across episodes."""
        if self._llm is not None:
            return self._llm
        loop = asyncio.get_running_loop()
        client = self._own_llms.get(loop)
        if client is None:
            client = self._make_llm()
            self._own_llms[loop] = client
        return client

    def _make_llm(self) -> Any:
        from aworld_core.llm.openai_http import OpenAICompatibleLLM
        from aworld_core.settings import get_settings

        settings = get_settings()
        base_url = self.conf.llm_base_url or settings.llm_base_url
        model = self.conf.llm_model_name or settings.llm_model_name
        api_key = self.conf.llm_api_key or settings.llm_api_key
        if not base_url or not model:
            missing = [n for n, v in (("llm_base_url", base_url), ("llm_model_name", model)) if not v]
            raise UsageError(
                f"agent '{self.name}' has no LLM endpoint ({', '.join(missing)} unset): set "
                f"AgentConfig(llm_base_url=..., llm_model_name=...) or LLM_BASE_URL / LLM_MODEL_NAME, "
                f"or run it as the trained agent under a backend, which passes its own LLM"
            )
        return OpenAICompatibleLLM(
            base_url,
            model,
            api_key,
            timeout_s=self.conf.llm_timeout_s,
            retries=self.conf.llm_retries,
        )

    async def aclose(self) -> None:
        """Close the agent's own LLM clients on this loop (Runners.sync_run does it for you)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        client = self._own_llms.pop(loop, None)
        if client is not None:
            await client.aclose()
