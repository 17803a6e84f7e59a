"""Settings of the GAIA tool environment: every key a deployment can set, read from the
environment and an optional ``.env`` file (``deploy/env.template`` lists them all).

Names keep the upstream environment's spelling (``MCP_LLM_*``, ``THINK_LLM_*``, ``TAVILY_API_KEY``,
...), so an existing ``.env`` keeps working. Every external base URL is a setting, so tests (and
air-gapped deployments with mirrors) can point tools at other hosts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

LLM_ROLES = ("code", "think", "guard", "image", "audio")
"""Tools that call a model; each may override the shared ``MCP_LLM_*`` endpoint."""


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class GaiaEnvSettings(BaseSettings):
    """One place for the environment's configuration (populated by field name or env name)."""

    model_config = SettingsConfigDict(env_file=None, extra="ignore", populate_by_name=True, env_ignore_empty=True)

    # --- the endpoint -------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", validation_alias=_env("GAIA_ENV_HOST", "host"))
    port: int = Field(default=8000, ge=0, le=65535, validation_alias=_env("GAIA_ENV_PORT", "port"))
    token: str | None = Field(
        default=None,
        validation_alias=_env("MCP_SERVER_TOKEN", "token"),
        description="Bearer token clients must send; random per start when unset.",
    )
    token_file: Path | None = Field(
        default=None,
        validation_alias=_env("MCP_SERVER_TOKEN_FILE", "token_file"),
        description="A file holding the bearer token (first line); wins over MCP_SERVER_TOKEN.",
    )
    servers: str = Field(
        default="",
        validation_alias=_env("GAIA_ENV_SERVERS", "servers"),
        description="Comma list of tool servers to serve; all when empty.",
    )
    workspace_root: Path = Field(
        default=Path("gaia_workspaces"),
        validation_alias=_env("GAIA_ENV_WORKSPACE", "workspace_root"),
    )
    workspace_quota_mb: int = Field(
        default=1024,
        ge=0,
        validation_alias=_env("GAIA_ENV_WORKSPACE_QUOTA_MB", "workspace_quota_mb"),
        description="Size of each episode's workspace (its own tmpfs; needs root); 0: no quota, a plain directory.",
    )
    workspace_idle_s: float = Field(
        default=3600.0,
        ge=0,
        validation_alias=_env("GAIA_ENV_WORKSPACE_IDLE_S", "workspace_idle_s"),
        description="Remove a workspace after this many seconds without a call; 0: only on DELETE and at shutdown.",
    )
    tls_terminated: bool = Field(
        default=False,
        validation_alias=_env("GAIA_ENV_TLS_TERMINATED", "tls_terminated"),
        description="Set when a TLS terminator (ingress, proxy) fronts a non-loopback bind.",
    )
    gaia_dir: Path | None = Field(
        default=None,
        validation_alias=_env("GAIA_DIR", "gaia_dir"),
        description="Local GAIA directory; attachments of the X-Gaia-Task-Id task are copied into workspaces.",
    )
    max_upload_bytes: int = Field(default=200 * 2**20, validation_alias=_env("GAIA_ENV_MAX_UPLOAD_BYTES", "max_upload_bytes"))
    log_level: str = Field(default="WARNING", validation_alias=_env("GAIA_ENV_LOG_LEVEL", "log_level"))

    # --- sandbox (intelligence-code, terminal) ---------------------------------------------------
    sandbox_timeout_s: float = Field(default=60.0, gt=0, validation_alias=_env("SANDBOX_TIMEOUT_S", "sandbox_timeout_s"))
    sandbox_cpu_s: int = Field(default=30, ge=1, validation_alias=_env("SANDBOX_CPU_S", "sandbox_cpu_s"))
    sandbox_memory_mb: int = Field(default=2048, ge=64, validation_alias=_env("SANDBOX_MEMORY_MB", "sandbox_memory_mb"))
    sandbox_max_output_bytes: int = Field(
        default=256 * 1024, ge=1024, validation_alias=_env("SANDBOX_MAX_OUTPUT_BYTES", "sandbox_max_output_bytes")
    )
    sandbox_max_processes: int = Field(default=64, ge=1, validation_alias=_env("SANDBOX_MAX_PROCESSES", "sandbox_max_processes"))
    sandbox_max_file_mb: int = Field(default=512, ge=1, validation_alias=_env("SANDBOX_MAX_FILE_MB", "sandbox_max_file_mb"))
    sandbox_allow_network: bool = Field(
        default=False, validation_alias=_env("SANDBOX_ALLOW_NETWORK", "sandbox_allow_network")
    )
    sandbox_isolation: Literal["bwrap", "audit"] = Field(
        default="bwrap",
        validation_alias=_env("SANDBOX_ISOLATION", "sandbox_isolation"),
        description="bwrap: each run in fresh bubblewrap namespaces under seccomp (the code tools refuse when it "
        "cannot be set up); audit: rlimits plus a Python audit hook only, an opt-out for trusted local use.",
    )
    sandbox_allow_unisolated_shell: bool = Field(
        default=False,
        validation_alias=_env("SANDBOX_ALLOW_UNISOLATED_SHELL", "sandbox_allow_unisolated_shell"),
        description="Let the terminal run when only the audit-hook sandbox is available (no kernel isolation).",
    )
    sandbox_uid_base: int = Field(
        default=200_000,
        ge=1000,
        validation_alias=_env("SANDBOX_UID_BASE", "sandbox_uid_base"),
        description="Episodes' sandboxes run as this uid + a slot (one uid per live episode; as root).",
    )

    # --- documents, downloads, web ---------------------------------------------------------------
    doc_max_chars: int = Field(default=20_000, ge=100, validation_alias=_env("DOC_MAX_CHARS", "doc_max_chars"))
    download_max_bytes: int = Field(
        default=100 * 2**20, ge=1, validation_alias=_env("DOWNLOAD_MAX_BYTES", "download_max_bytes")
    )
    http_timeout_s: float = Field(default=30.0, gt=0, validation_alias=_env("HTTP_TIMEOUT_S", "http_timeout_s"))
    allow_private_urls: bool = Field(
        default=False,
        validation_alias=_env("GAIA_ENV_ALLOW_PRIVATE_URLS", "allow_private_urls"),
        description="Let download/readweb reach loopback and private addresses (off: no SSRF into the cluster).",
    )
    allowed_hosts: str = Field(
        default="",
        validation_alias=_env("GAIA_ENV_ALLOWED_HOSTS", "allowed_hosts"),
        description="Comma list of host or host:port that download/readweb/browser may reach even when private "
        "(e.g. an intranet mirror); everything else private stays refused.",
    )
    user_agent: str = Field(
        default="aworld-gaia-env/0.1 (+https://github.com/inclusionAI/AWorld)",
        validation_alias=_env("GAIA_ENV_USER_AGENT", "user_agent"),
    )

    # --- browser (Playwright driving Debian's chromium) -------------------------------------------
    browser_executable: Path | None = Field(
        default=None,
        validation_alias=_env("BROWSER_EXECUTABLE", "browser_executable"),
        description="Chromium binary; default Debian's /usr/lib/chromium/chromium.",
    )
    browser_max_pages: int = Field(default=60, ge=1, validation_alias=_env("BROWSER_MAX_PAGES", "browser_max_pages"),
                                   description="Page loads per episode.")
    browser_max_tabs: int = Field(default=6, ge=1, validation_alias=_env("BROWSER_MAX_TABS", "browser_max_tabs"))
    browser_max_elements: int = Field(default=300, ge=10, validation_alias=_env("BROWSER_MAX_ELEMENTS", "browser_max_elements"),
                                      description="Links and interactive elements listed per page read.")
    browser_action_timeout_s: float = Field(
        default=20.0, gt=0, validation_alias=_env("BROWSER_ACTION_TIMEOUT_S", "browser_action_timeout_s")
    )
    browser_episode_s: float = Field(
        default=1800.0, gt=0, validation_alias=_env("BROWSER_EPISODE_S", "browser_episode_s"),
        description="Lifetime of one episode's browser; later actions are refused.",
    )
    browser_js_heap_mb: int = Field(default=512, ge=64, validation_alias=_env("BROWSER_JS_HEAP_MB", "browser_js_heap_mb"),
                                    description="V8 heap limit of each renderer process.")
    browser_max_episodes: int = Field(
        default=16, ge=1, validation_alias=_env("BROWSER_MAX_EPISODES", "browser_max_episodes"),
        description="Episodes with a browser context open at once (each costs ~100-300 MB).",
    )

    # --- external services -----------------------------------------------------------------------
    wiki_base_url: str = Field(default="https://en.wikipedia.org", validation_alias=_env("WIKI_BASE_URL", "wiki_base_url"))
    wayback_api_base_url: str = Field(
        default="https://archive.org", validation_alias=_env("WAYBACK_API_BASE_URL", "wayback_api_base_url")
    )
    wayback_snapshot_base_url: str = Field(
        default="https://web.archive.org",
        validation_alias=_env("WAYBACK_SNAPSHOT_BASE_URL", "wayback_snapshot_base_url"),
    )
    arxiv_api_base_url: str = Field(
        default="https://export.arxiv.org/api/query", validation_alias=_env("ARXIV_API_BASE_URL", "arxiv_api_base_url")
    )
    arxiv_pdf_base_url: str = Field(
        default="https://arxiv.org/pdf", validation_alias=_env("ARXIV_PDF_BASE_URL", "arxiv_pdf_base_url")
    )
    google_api_key: str | None = Field(default=None, validation_alias=_env("GOOGLE_API_KEY", "google_api_key"))
    google_cse_id: str | None = Field(default=None, validation_alias=_env("GOOGLE_CSE_ID", "google_cse_id"))
    google_search_base_url: str = Field(
        default="https://www.googleapis.com/customsearch/v1",
        validation_alias=_env("GOOGLE_SEARCH_BASE_URL", "google_search_base_url"),
    )
    tavily_api_key: str | None = Field(default=None, validation_alias=_env("TAVILY_API_KEY", "tavily_api_key"))
    tavily_base_url: str = Field(default="https://api.tavily.com", validation_alias=_env("TAVILY_BASE_URL", "tavily_base_url"))
    jina_api_key: str | None = Field(default=None, validation_alias=_env("JINA_API_KEY", "jina_api_key"))
    jina_search_base_url: str = Field(
        default="https://s.jina.ai", validation_alias=_env("JINA_SEARCH_BASE_URL", "jina_search_base_url")
    )

    # --- models behind intelligence-* and media-* (OpenAI-compatible) -----------------------------
    mcp_llm_base_url: str | None = Field(default=None, validation_alias=_env("MCP_LLM_BASE_URL", "mcp_llm_base_url"))
    mcp_llm_model_name: str | None = Field(default=None, validation_alias=_env("MCP_LLM_MODEL_NAME", "mcp_llm_model_name"))
    mcp_llm_api_key: str | None = Field(default=None, validation_alias=_env("MCP_LLM_API_KEY", "mcp_llm_api_key"))
    code_llm_base_url: str | None = Field(default=None, validation_alias=_env("CODE_LLM_BASE_URL", "code_llm_base_url"))
    code_llm_model_name: str | None = Field(default=None, validation_alias=_env("CODE_LLM_MODEL_NAME", "code_llm_model_name"))
    code_llm_api_key: str | None = Field(default=None, validation_alias=_env("CODE_LLM_API_KEY", "code_llm_api_key"))
    think_llm_base_url: str | None = Field(default=None, validation_alias=_env("THINK_LLM_BASE_URL", "think_llm_base_url"))
    think_llm_model_name: str | None = Field(default=None, validation_alias=_env("THINK_LLM_MODEL_NAME", "think_llm_model_name"))
    think_llm_api_key: str | None = Field(default=None, validation_alias=_env("THINK_LLM_API_KEY", "think_llm_api_key"))
    guard_llm_base_url: str | None = Field(default=None, validation_alias=_env("GUARD_LLM_BASE_URL", "guard_llm_base_url"))
    guard_llm_model_name: str | None = Field(default=None, validation_alias=_env("GUARD_LLM_MODEL_NAME", "guard_llm_model_name"))
    guard_llm_api_key: str | None = Field(default=None, validation_alias=_env("GUARD_LLM_API_KEY", "guard_llm_api_key"))
    image_llm_base_url: str | None = Field(default=None, validation_alias=_env("IMAGE_LLM_BASE_URL", "image_llm_base_url"))
    image_llm_model_name: str | None = Field(default=None, validation_alias=_env("IMAGE_LLM_MODEL_NAME", "image_llm_model_name"))
    image_llm_api_key: str | None = Field(default=None, validation_alias=_env("IMAGE_LLM_API_KEY", "image_llm_api_key"))
    audio_llm_base_url: str | None = Field(default=None, validation_alias=_env("AUDIO_LLM_BASE_URL", "audio_llm_base_url"))
    audio_llm_model_name: str | None = Field(default=None, validation_alias=_env("AUDIO_LLM_MODEL_NAME", "audio_llm_model_name"))
    audio_llm_api_key: str | None = Field(default=None, validation_alias=_env("AUDIO_LLM_API_KEY", "audio_llm_api_key"))
    llm_timeout_s: float = Field(default=120.0, gt=0, validation_alias=_env("MCP_LLM_TIMEOUT_S", "llm_timeout_s"))

    def selected_servers(self) -> list[str]:
        return [name.strip() for name in self.servers.split(",") if name.strip()]


def load_settings(env_file: str | None = None, **overrides: object) -> GaiaEnvSettings:
    """Settings from the environment (and ``env_file`` when given); ``overrides`` win (CLI flags)."""
    given = {key: value for key, value in overrides.items() if value is not None}
    if env_file is not None:
        if not Path(env_file).is_file():  # pydantic-settings would ignore it, and every key with it
            raise FileNotFoundError(
                f"--env-file {env_file}: no such file; copy deploy/env.template there and fill in the keys "
                f"you have, or leave --env-file out"
            )
        return GaiaEnvSettings(_env_file=env_file, **given)  # type: ignore[call-arg]
    return GaiaEnvSettings(**given)
