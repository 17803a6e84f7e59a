"""The seed's MCP configuration, validated, and the seed's tool-environment shortcut.

Form (as AWorld users write it)::

    {"mcpServers": {"aworld-mcp": {"type": "streamable-http", "url": "http://host:8000/mcp",
                                   "headers": {"Authorization": "Bearer T", "MCP_SERVERS": "wiki,arxiv"},
                                   "timeout": 600, "sse_read_timeout": 600,
                                   "tools_cache_ttl": 300, "session": "auto", "direct_calls": true}}}

``type`` is ``streamable-http``, ``sse`` or ``stdio`` (``command``/``args``/``env``/``cwd``).
A header or ``env`` value may be a reference ``{"env": "NAME"}``, read from the environment
variable NAME when the config is parsed: plan files carry secrets this way (``aworld_core.secrets``).
Only a config the operator wrote may do that: a config that came from elsewhere (a task submitted
to the task server) is parsed with ``env_refs=False``, which refuses such a reference, since it
would otherwise copy this host's secrets into headers sent to a URL of the submitter's choosing.
Unknown keys are errors naming the server and the key: a misspelt ``headers`` would otherwise
silently run episodes unauthenticated.

``tools_cache_ttl`` (seconds, default 300; 0 turns it off) is how long the server's tool list is
reused by later episodes (``mcp_tool_cache.ToolListCache``). ``session`` (``auto``, ``episode``,
``shared``; default ``auto``) says whether episodes share one MCP session to this server
(``mcp_shared``): ``auto`` shares when the server speaks the stateless 2026 protocol.
``direct_calls`` (default true): on such a shared session a ``tools/call`` is sent as one POST by
``mcp_direct`` (the SDK's own wire, a third of its CPU); false sends every call through the SDK.
``release`` (``"METHOD URL"``, e.g. ``"DELETE {base}/sessions/{episode_id}"``; default none) is
the request that tells the server an episode ended, sent once per episode whatever its outcome and
bounded by ``release_timeout`` (seconds, default 5): ``mcp_release``.
``auth`` (``{"type": "oauth", "grant": ..., ...}``) signs in with OAuth 2.1 through the SDK
(``mcp_auth``; its ``client_secret`` / ``refresh_token`` may be ``{"env": NAME}``).
``elicitation`` (``decline``, ``cancel``, ``accept_defaults``; default ``decline``) answers a
server's requests for user input; each is recorded with the tool call that caused it.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from aworld_core.errors import ConfigError, UsageError
from aworld_core.secrets import is_env_ref, resolve_env_ref
from aworld_core.tools.mcp_auth import SECRET_FIELDS, MCPAuthConfig

logger = logging.getLogger(__name__)

DEFAULT_ENV_SERVER_NAME = "aworld-mcp"
# MCP_SERVER_RELEASE's former boolean spellings (before it held the request itself)
_FORMER_FALSE = frozenset({"", "0", "false", "no", "off"})
_FORMER_TRUE = frozenset({"1", "true", "yes", "on"})

_TYPE_ALIASES = {
    "streamable-http": "streamable-http",
    "streamable_http": "streamable-http",
    "streamablehttp": "streamable-http",
    "http": "streamable-http",
    "sse": "sse",
    "stdio": "stdio",
}


class MCPServerConfig(BaseModel):
    """One MCP server an agent may use."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["streamable-http", "sse", "stdio"] = "streamable-http"
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # may hold tokens
    timeout: float = Field(default=30.0, gt=0, description="Connect / request timeout in seconds.")
    sse_read_timeout: float = Field(default=300.0, gt=0, description="How long a stream may stay silent.")
    client_session_timeout_seconds: float | None = Field(
        default=None, gt=0, description="The seed's per-call timeout; the agent's tool timeout when unset."
    )
    tools_cache_ttl: float = Field(
        default=300.0,
        ge=0,
        description=(
            "Seconds this server's tool list is reused by later episodes; 0 lists the tools in every episode."
        ),
    )
    session: Literal["auto", "episode", "shared"] = Field(
        default="auto",
        description=(
            "Whether episodes share one MCP session to this server (streamable HTTP only): 'auto' shares "
            "when the server speaks the stateless 2026 protocol (no Mcp-Session-Id), 'episode' opens one "
            "per episode, 'shared' shares whatever the server speaks. Each request carries its episode's "
            "X-Episode-Id / X-Task-Id headers either way."
        ),
    )
    direct_calls: bool = Field(
        default=True,
        description=(
            "On a shared session to a stateless (2026) server, send each tools/call as one HTTP POST "
            "(mcp_direct: the SDK's request, a third of its CPU); false sends every call through the SDK."
        ),
    )
    release: str | None = Field(
        default=None,
        description=(
            "The request ('METHOD URL', placeholders {url}, {base}, {episode_id}, {task_id}) that frees "
            "what the server keeps for an episode, sent once when the episode ends (mcp_release)."
        ),
    )
    release_timeout: float = Field(default=5.0, gt=0, description="Seconds the release request may take.")
    auth: MCPAuthConfig | None = Field(
        default=None, repr=False, description="OAuth 2.1 for this server (mcp_auth); none: headers only."
    )
    elicitation: Literal["decline", "cancel", "accept_defaults"] = Field(
        default="decline",
        description=(
            "How a server's elicitation/create request (the server asks the user for input) is answered: "
            "'decline' (default), 'cancel', or 'accept_defaults' (accept with the requested schema's "
            "defaults; declined when a required field has none). Each request is recorded with the tool call."
        ),
    )
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = Field(default=None, repr=False)  # may hold keys
    cwd: str | None = None
    description: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            kind = data.get("type")
            if kind is None:
                data["type"] = "stdio" if data.get("command") else "streamable-http"
            elif isinstance(kind, str) and kind.lower() in _TYPE_ALIASES:
                data["type"] = _TYPE_ALIASES[kind.lower()]
            # a secret passed by reference, {"env": NAME} (plan files hold these: aworld_core.secrets);
            # refused in a config from outside (env_refs=False), which must not read this host's variables
            env_refs = (info.context or {}).get("env_refs", True)
            auth = data.get("auth")
            if isinstance(auth, dict):
                auth = data["auth"] = dict(auth)
                refs = [k for k in SECRET_FIELDS if is_env_ref(auth.get(k))]
                if refs and not env_refs:
                    raise ValueError(
                        f"auth {refs} are environment references ({{'env': NAME}}), which only a config "
                        f"written by the operator (a job or plan file) may use; give the value itself"
                    )
                for key in refs:
                    auth[key] = resolve_env_ref(auth[key], f"auth.{key}")
            for section in ("headers", "env"):
                if isinstance(data.get(section), dict):
                    if not env_refs:
                        refs = [k for k, v in data[section].items() if is_env_ref(v)]
                        if refs:
                            raise ValueError(
                                f"{section} {refs} are environment references ({{'env': NAME}}), which only "
                                f"a config written by the operator (a job or plan file) may use; give the "
                                f"value itself"
                            )
                        continue
                    data[section] = {
                        k: resolve_env_ref(v, f"{section}.{k}") for k, v in data[section].items()
                    }
            headers = data.get("headers")
            if isinstance(headers, dict):
                # header values must be text; a None header is a config mistake, not "no header"
                bad = [k for k, v in headers.items() if v is None]
                if bad:
                    raise ValueError(f"header(s) {bad} have no value (None); remove them or set a value")
                data["headers"] = {str(k): str(v) for k, v in headers.items()}
        return data

    @model_validator(mode="after")
    def _complete(self) -> MCPServerConfig:
        if self.type == "stdio":
            if not self.command:
                raise ValueError("a 'stdio' server needs 'command' (and usually 'args')")
        else:
            if not self.url:
                raise ValueError(f"a '{self.type}' server needs 'url'")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"'url' must be an http(s) URL, got {self.url!r}")
        if self.auth is not None:
            if self.type == "stdio":
                raise ValueError("'auth' (OAuth) is for HTTP servers; a stdio server gets its secrets in 'env'")
            if any(name.lower() == "authorization" for name in self.headers):
                raise ValueError(
                    "both 'auth' and an Authorization header: OAuth sets the header itself; remove one of them"
                )
        if self.release is not None:
            from aworld_core.tools.mcp_release import parse_release, release_request

            if self.type == "stdio":
                raise ValueError("'release' is an HTTP request: only a streamable-http or sse server may have one")
            parse_release(self.release)
            _, url = release_request(self, "ep", "task")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"'release' must give an http(s) URL, got {url!r} from {self.release!r}")
        return self


class MCPConfig(BaseModel):
    """``{"mcpServers": {name: MCPServerConfig}}``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    mcp_servers: dict[str, MCPServerConfig] = Field(alias="mcpServers")


def parse_mcp_config(config: dict[str, Any] | MCPConfig, *, env_refs: bool = True) -> MCPConfig:
    """Validate the seed's MCP config; raises ``ConfigError`` naming the server and field.

    ``env_refs=False`` (a config from outside, such as a submitted task's) refuses
    ``{"env": NAME}`` values instead of reading them from this process's environment.
    """
    if isinstance(config, MCPConfig):
        return config
    if not isinstance(config, dict):
        raise ConfigError(
            f"mcp_config must be a mapping like {{'mcpServers': {{name: {{...}}}}}}, got {type(config).__name__}",
            [("mcp_config", config, "a mapping with 'mcpServers'")],
        )
    if "mcpServers" not in config and "mcp_servers" not in config:
        raise ConfigError(
            "mcp_config has no 'mcpServers' key; write it as {'mcpServers': {'name': {'type': "
            "'streamable-http', 'url': ...}}}",
            [("mcp_config.mcpServers", None, "a mapping of server name to server settings")],
        )
    try:
        return MCPConfig.model_validate(config, context={"env_refs": env_refs})
    except ValidationError as exc:
        problems = []
        lines = []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"]]
            if loc and loc[0] in ("mcpServers", "mcp_servers"):
                loc[0] = "mcpServers"
            where = "mcp_config." + ".".join(loc)
            expected = f"no such key (known: {', '.join(MCPServerConfig.model_fields)})" \
                if err["type"] == "extra_forbidden" else err["msg"]
            problems.append((where, err.get("input"), expected))
            lines.append(f"  {where}: {expected}")
        raise ConfigError("invalid MCP config:\n" + "\n".join(lines), problems) from None


def select_servers(config: MCPConfig, names: list[str] | None) -> dict[str, MCPServerConfig]:
    """The servers an agent uses: ``names`` in that order, or all of them when ``names`` is None."""
    if names is None:
        return dict(config.mcp_servers)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    missing = [n for n in names if n not in config.mcp_servers]
    if missing:
        raise ConfigError(
            f"mcp_servers names {missing} are not in mcp_config (it defines: "
            f"{', '.join(config.mcp_servers) or 'none'})",
            [("mcp_servers", missing, f"names among {sorted(config.mcp_servers)}")],
        )
    return {name: config.mcp_servers[name] for name in dict.fromkeys(names)}


def configured_release(value: str | None) -> str | None:
    """The release request that the ``MCP_SERVER_RELEASE`` setting ``value`` names; None for none.

    Why a template and not a flag: the core must not know any environment's routes. The
    environment says which request frees an episode (its ``EnvironmentSpec.release``, exported
    by a job that runs it, or the line its serve command prints for a ``.env``), and agents send
    exactly that. The setting was a boolean before; ``false``/``0`` still mean none, and
    ``true``/``1`` is read, with a deprecation warning, as the release of the one installed
    environment that declares one (refused, naming them, when that is not exactly one).
    """
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in _FORMER_FALSE:
        return None
    if text.lower() in _FORMER_TRUE:
        return _release_for_former_boolean(text)
    from aworld_core.tools.mcp_release import parse_release

    try:
        parse_release(text)
    except ValueError as exc:
        raise UsageError(f"MCP_SERVER_RELEASE={text!r}: {exc}") from None
    return text


def _release_for_former_boolean(text: str) -> str:
    from aworld_core.plugins import get_plugin_manager

    declared = {
        name: provided.spec.release
        for name, provided in get_plugin_manager().catalog().items("environment").items()
        if getattr(provided.spec, "release", None)
    }
    listed = "; ".join(f"{name}: MCP_SERVER_RELEASE='{release}'" for name, release in sorted(declared.items()))
    if len(declared) != 1:
        raise UsageError(
            f"MCP_SERVER_RELEASE={text!r} is the former boolean form; it now holds the release request "
            f"itself ('METHOD URL-template', as the environment's serve command prints it). "
            + (f"Installed environments declare: {listed}." if declared else
               "No installed environment declares one; set the request your MCP server takes, or "
               "MCP_SERVER_RELEASE=false for none.")
        )
    (release,) = declared.values()
    message = (f"MCP_SERVER_RELEASE={text!r} is deprecated (the former boolean form); read as the "
               f"installed environment's release. Write it out instead: {listed}")
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    logger.warning(message)
    return release


def get_agent_tool_env_and_servers(
    url: str | None = None,
    token: str | None = None,
    servers: list[str] | str | None = None,
    *,
    name: str = DEFAULT_ENV_SERVER_NAME,
    timeout: float = 600.0,
    release: str | None = None,
    release_workspace: bool = True,
) -> tuple[dict[str, Any], list[str]]:
    """The seed's helper: an ``mcp_config`` for the tool environment and the server names.

    ``url``/``token``/``servers`` default to the ``MCP_SERVER_URL``, ``MCP_SERVER_TOKEN`` and
    ``MCP_SERVERS`` settings. The token goes in ``Authorization: Bearer``; ``servers`` (the
    environment's tool servers, e.g. ``readweb-server,wiki``) goes in the ``MCP_SERVERS`` header
    as a comma list, which the environment uses to pick the tools it offers.
    ``release`` (``"METHOD URL-template"``) is the request that frees an episode's state on the
    server at episode end; it defaults to the ``MCP_SERVER_RELEASE`` setting, which the GAIA
    environment's serve command prints and a job's environment exports (``configured_release``).
    ``release_workspace=False`` leaves any release out (a server without such a route).
    """
    from aworld_core.settings import get_settings

    settings = get_settings()
    url = url or settings.mcp_server_url
    token = token if token is not None else settings.mcp_server_token
    if servers is None:
        servers = settings.mcp_servers
    if not url:
        raise UsageError(
            "no MCP server URL: set MCP_SERVER_URL (e.g. in .env, as printed by "
            "'python -m aworld_gaia_env serve') or pass url="
        )
    if not release_workspace:
        release = None
    elif release is None:
        release = configured_release(settings.mcp_server_release)
    headers: dict[str, str] = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if servers:
        names = [s.strip() for s in servers.split(",")] if isinstance(servers, str) else [str(s).strip() for s in servers]
        names = [n for n in names if n]
        if names:
            headers["MCP_SERVERS"] = ",".join(names)
    config = {
        "mcpServers": {
            name: {
                "type": "streamable-http",
                "url": url,
                "headers": headers,
                "timeout": timeout,
                "sse_read_timeout": timeout,
                "client_session_timeout_seconds": timeout,
                **({"release": release} if release else {}),
            }
        }
    }
    parse_mcp_config(config)  # fail here, not at the first episode
    return config, [name]
