"""Which values of a job are secrets, how they leave this process, and how they are masked.

The one place that knows a job's secrets (:func:`job_secrets`): ``agent.llm_api_key``, in
``agent.mcp_config`` every header of a server whose name says it carries a credential
(``Authorization``, ``X-Api-Key``, ``*token*``, ...), every such variable of a stdio server's
``env`` (:func:`is_secret_name`) and its OAuth ``auth`` secrets (``client_secret``,
``refresh_token``), and every such ``agent.options`` entry (a factory's keyword
argument). Nothing that leaves the process holds them:

* plan files and the printed plan hold an environment-variable reference, ``{"env": "NAME"}``
  (:func:`public_job_dump`); ``llm_api_key`` is left out of every dump and travels as
  ``LLM_API_KEY``;
* the launch puts the values in its own environment (:func:`export_secrets`), which the
  backend's processes inherit; the worker resolves a reference when it reads the MCP config
  (:func:`resolve_env_ref`, called by ``aworld_core.tools.mcp_config``);
* logs and printed plans go through :func:`mask`, which replaces every value registered with
  :func:`register_secret` (the job's secrets, the ``LLM_API_KEY`` / ``MCP_SERVER_TOKEN``
  settings, the task server's token) by ``***``; :func:`install_log_masking` applies it to every
  log record of the process.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MASK = "***"
ENV_REF_KEY = "env"
LLM_API_KEY_ENV = "LLM_API_KEY"

# a header / variable whose name says it holds a credential
_SECRET_NAME = re.compile(
    r"authorization|token(?!iz|s)|secret|passw(or)?d|api[-_]?key|apikey|access[-_]?key|cookie|credential|private[-_]?key",
    re.IGNORECASE,
)
# values shorter than this are not masked in free text (they would blank out ordinary words)
_MIN_MASKED_LEN = 6


def is_secret_name(name: str) -> bool:
    """Whether a header or environment-variable name says its value is a credential."""
    return bool(_SECRET_NAME.search(name))


@dataclass(frozen=True)
class Secret:
    """One secret of a job: where it is in the job's dump, the variable that carries it, its value."""

    path: tuple[str, ...]
    env: str
    value: str


def _env_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").upper() or "X"


def mcp_env_name(
    server: str, header: str | None = None, env_var: str | None = None, auth_field: str | None = None
) -> str:
    """The variable carrying an MCP server's secret: ``AWORLD_MCP_TOKEN_<SERVER>`` for its
    ``Authorization`` header, ``AWORLD_MCP_<SERVER>_HEADER_<NAME>`` for another header,
    ``AWORLD_MCP_<SERVER>_ENV_<NAME>`` for a stdio server's variable, ``AWORLD_MCP_<SERVER>_AUTH_<NAME>``
    for its OAuth ``client_secret`` / ``refresh_token``."""
    if auth_field is not None:
        return f"AWORLD_MCP_{_env_part(server)}_AUTH_{_env_part(auth_field)}"
    if env_var is not None:
        return f"AWORLD_MCP_{_env_part(server)}_ENV_{_env_part(env_var)}"
    if header is not None and header.lower() == "authorization":
        return f"AWORLD_MCP_TOKEN_{_env_part(server)}"
    return f"AWORLD_MCP_{_env_part(server)}_HEADER_{_env_part(header or '')}"


def _mcp_servers(mcp_config: Any) -> dict[str, Any]:
    if not isinstance(mcp_config, dict):
        return {}
    servers = mcp_config.get("mcpServers", mcp_config.get("mcp_servers"))
    return servers if isinstance(servers, dict) else {}


def job_secrets(job: Any) -> list[Secret]:
    """Every secret the job holds as a plain value (a reference ``{"env": ...}`` is not one)."""
    found: list[Secret] = []
    key = getattr(job.agent, "llm_api_key", None)
    if key:
        found.append(Secret(("agent", "llm_api_key"), LLM_API_KEY_ENV, key))
    used: set[str] = {LLM_API_KEY_ENV}
    for name, value in (getattr(job.agent, "options", None) or {}).items():
        if isinstance(value, str) and value and is_secret_name(str(name)):
            env = f"AWORLD_AGENT_OPTION_{_env_part(str(name))}"
            used.add(env)
            found.append(Secret(("agent", "options", str(name)), env, value))
    servers = _mcp_servers(job.agent.mcp_config)
    top = "mcpServers" if "mcpServers" in (job.agent.mcp_config or {}) else "mcp_servers"
    for server, conf in servers.items():
        if not isinstance(conf, dict):
            continue
        for section, kind in (("headers", "header"), ("env", "env_var"), ("auth", "auth_field")):
            values = conf.get(section)
            if not isinstance(values, dict):
                continue
            for name, value in values.items():
                if not isinstance(value, str) or not value or not is_secret_name(str(name)):
                    continue
                env = mcp_env_name(str(server), **{kind: str(name)})
                base, n = env, 2
                while env in used:  # two server names that spell the same variable
                    env, n = f"{base}_{n}", n + 1
                used.add(env)
                found.append(Secret(("agent", "mcp_config", top, str(server), section, str(name)), env, value))
    return found


def public_job_dump(job: Any, **dump_kwargs: Any) -> dict[str, Any]:
    """``job.model_dump(mode="json", **dump_kwargs)`` with each secret replaced by its reference
    ``{"env": NAME}``: what plan files and printed plans hold."""
    data = job.model_dump(mode="json", **dump_kwargs)
    for secret in job_secrets(job):
        node: Any = data
        for part in secret.path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and secret.path[-1] in node:
            node[secret.path[-1]] = {ENV_REF_KEY: secret.env}
    return data


def secret_environment(job: Any) -> dict[str, str]:
    """``{variable: value}`` a launched process needs to resolve the job's references."""
    return {secret.env: secret.value for secret in job_secrets(job)}


def export_secrets(job: Any) -> dict[str, str]:
    """Put the job's secrets in this process's environment, which every process the backend
    starts inherits (never its command line); registers them for masking. Returns what was set."""
    env = secret_environment(job)
    for name, value in env.items():
        os.environ[name] = value
        register_secret(value)
    if env:
        from aworld_core.settings import get_settings

        get_settings.cache_clear()
    return env


def is_env_ref(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {ENV_REF_KEY} and isinstance(value[ENV_REF_KEY], str)


def resolve_env_ref(value: Any, where: str) -> Any:
    """A value ``{"env": NAME}`` read from the environment; any other value unchanged."""
    if not is_env_ref(value):
        return value
    name = value[ENV_REF_KEY]
    resolved = os.environ.get(name)
    if resolved is None:
        raise ValueError(
            f"{where} refers to the environment variable {name}, which is not set in this process; "
            f"a launch exports it to the processes it starts; a process started by hand (a rollout "
            f"server, a Ray worker of an existing cluster) needs it in its environment"
        )
    register_secret(resolved)
    return resolved


# --- masking --------------------------------------------------------------------------------------

_known: set[str] = set()
_known_lock = threading.Lock()
_pattern: re.Pattern[str] | None = None


def register_secret(value: str | None) -> None:
    """Mask ``value`` (and ``Bearer value``'s token part) wherever :func:`mask` sees it."""
    global _pattern
    if not value or len(value) < _MIN_MASKED_LEN:
        return
    values = {value}
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "bearer" and len(token.strip()) >= _MIN_MASKED_LEN:
        values.add(token.strip())
    with _known_lock:
        if values <= _known:
            return
        _known.update(values)
        ordered = sorted(_known, key=len, reverse=True)  # longest first: no partial masks
        _pattern = re.compile("|".join(re.escape(v) for v in ordered))


def register_secrets(values: Iterable[str | None]) -> None:
    for value in values:
        register_secret(value)


def register_settings_secrets() -> None:
    """The ``LLM_API_KEY`` and ``MCP_SERVER_TOKEN`` settings of this process."""
    from aworld_core.settings import get_settings

    settings = get_settings()
    register_secrets([settings.llm_api_key, settings.mcp_server_token])


def register_job_secrets(job: Any) -> None:
    register_secrets(secret.value for secret in job_secrets(job))


def mask(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(MASK, text)


def mask_value(name: str, value: str) -> str:
    """A value printed beside its name (an environment listing): ``***`` when the name says it is
    a credential, else the value with registered secrets masked."""
    return MASK if is_secret_name(name) and value else mask(value)


class _MaskingFactory:
    """Wraps the log-record factory: every record's message (and traceback) comes out masked,
    whichever logger or handler takes it (pytest's caplog included)."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        if _pattern is None:
            return record
        # text arguments masked in place (formatters that unpack record.args, uvicorn's access
        # log, keep working); anything else that still shows a secret is formatted and masked
        if isinstance(record.msg, str):
            record.msg = mask(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(mask(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: mask(v) if isinstance(v, str) else v for k, v in record.args.items()}
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it for logging's own error report
            return record
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = mask(logging.Formatter().formatException(record.exc_info))
        return record


def install_log_masking() -> None:
    """Mask registered secrets in every log record of this process (idempotent)."""
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, _MaskingFactory):
        logging.setLogRecordFactory(_MaskingFactory(factory))


# --- tokens of servers we run ----------------------------------------------------------------------

# what the repository's templates ship (deploy/task-service/k8s/secret.yaml,
# plugins/aworld-gaia-env/deploy/k8s/secret.yaml) and the usual stand-ins
PLACEHOLDER_TOKENS = frozenset(
    {"change-me", "changeme", "change_me", "replace-with-a-long-random-token", "replace-me", "token",
     "secret", "password", "your-token", "your-token-here", "xxx", "none", "null"}
)
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine only."""
    import ipaddress

    name = host.strip().strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_bind_token(token: str | None, host: str, how_to_set: str) -> None:
    """Refuse (``UsageError``) a server that binds beyond loopback with no token, a shipped
    placeholder or a short one: anyone who can reach the port could use it."""
    from aworld_core.errors import UsageError

    if is_loopback(host):
        return
    value = (token or "").strip()
    if not value:
        problem = "no bearer token"
    elif value.lower() in PLACEHOLDER_TOKENS:
        problem = f"the placeholder token {value!r} from a template"
    elif len(value) < MIN_TOKEN_CHARS:
        problem = f"a bearer token of {len(value)} characters (at least {MIN_TOKEN_CHARS})"
    else:
        return
    raise UsageError(
        f"refusing to bind {host} (beyond this machine) with {problem}; {how_to_set} a long random token "
        f"(python -c \"import secrets; print(secrets.token_urlsafe(32))\"), or bind 127.0.0.1"
    )


def warn_if_readable_by_others(path: str | os.PathLike[str], what: str) -> str | None:
    """A warning (also logged) when a file holding secrets can be read by other users."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & (stat.S_IRGRP | stat.S_IROTH):
        return None
    message = (
        f"{what} {path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
        f"restrict it: chmod 600 {path}"
    )
    logging.getLogger("aworld_core.secrets").warning("%s", message)
    return message
