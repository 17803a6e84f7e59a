"""Process settings: environment variables with the ``AWORLD_`` prefix, and a ``.env`` file.

A few names keep the seed's spelling without the prefix, because users' ``.env`` files and the
GAIA environment's output already use them: ``MCP_SERVER_URL``, ``MCP_SERVER_TOKEN``,
``MCP_SERVERS``, ``LLM_BASE_URL``, ``LLM_MODEL_NAME``, ``LLM_API_KEY``. The prefixed form wins
when both are set.
"""

from __future__ import annotations

import functools

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _alias(name: str) -> AliasChoices:
    return AliasChoices(f"AWORLD_{name}", name)


class AworldSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AWORLD_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    disable_plugins: str = Field(
        default="", description="Comma-separated entry-point names of plugins not to load."
    )
    default_backend: str = Field(default="trl", description="Backend used when --backend is omitted.")
    output_root: str = Field(default="runs", description="Where jobs write when output_dir is unset.")
    log_level: str = Field(default="INFO")

    mcp_server_url: str | None = Field(default=None, validation_alias=_alias("MCP_SERVER_URL"))
    mcp_server_token: str | None = Field(default=None, validation_alias=_alias("MCP_SERVER_TOKEN"))
    mcp_servers: str | None = Field(default=None, validation_alias=_alias("MCP_SERVERS"))
    mcp_server_release: str | None = Field(
        default=None, validation_alias=_alias("MCP_SERVER_RELEASE"),
        description="The request ('METHOD URL-template', as mcp_config's 'release') that frees what the "
                    "MCP_SERVER_URL environment keeps for an episode; agents built from the job's defaults "
                    "and get_agent_tool_env_and_servers() send it at episode end. A job's environment "
                    "exports its spec's; an environment's serve command prints its own. Empty: none. "
                    "The former boolean form: 'false' means none, 'true' is read for now with a "
                    "deprecation warning (mcp_config.configured_release).",
    )

    llm_base_url: str | None = Field(default=None, validation_alias=_alias("LLM_BASE_URL"))
    llm_model_name: str | None = Field(default=None, validation_alias=_alias("LLM_MODEL_NAME"))
    llm_api_key: str | None = Field(default=None, validation_alias=_alias("LLM_API_KEY"))

    @property
    def disabled_plugins(self) -> list[str]:
        return [name.strip() for name in self.disable_plugins.split(",") if name.strip()]


@functools.lru_cache(maxsize=1)
def get_settings() -> AworldSettings:
    """Settings of this process, read once. ``get_settings.cache_clear()`` re-reads them."""
    return AworldSettings()
