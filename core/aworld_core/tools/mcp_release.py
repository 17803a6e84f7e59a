"""Telling MCP servers that an episode ended, so they free what they keep for it.

Why: servers such as the GAIA environment keep per-episode state (a workspace on a tmpfs, a
browser context) keyed on the ``X-Episode-Id`` header every request carries, and free it on a
request (``DELETE /workspaces/<episode>``); left alone they hold it until an idle timeout (an hour
by default), which a training run's thousands of finished episodes turn into memory. A server's
``release`` setting (``mcp_config``) names that request as ``"METHOD URL"``, e.g.
``"DELETE {base}/workspaces/{episode_id}"``; the runtime sends it once when the episode ends,
whatever the outcome (success, failure, timeout, cancellation).

Placeholders: ``{url}`` (the server's ``url``), ``{base}`` (that URL without its last path
segment: ``http://h:8000/mcp`` gives ``http://h:8000``), ``{episode_id}`` and ``{task_id}``
(percent-encoded). The request carries the server's configured ``headers`` (its bearer token)
and the episode's ``X-Episode-Id`` / ``X-Task-Id``. It is best-effort: bounded by the server's
``release_timeout``, a failure is logged (never the headers) and never changes the episode's
outcome, since the server's own idle sweep still frees what was not released.
"""

from __future__ import annotations

import asyncio
import logging
import string
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

if TYPE_CHECKING:
    import aiohttp

    from aworld_core.tools.mcp_config import MCPServerConfig

logger = logging.getLogger(__name__)

RELEASE_METHODS = ("DELETE", "POST")
RELEASE_FIELDS = ("url", "base", "episode_id", "task_id")

# servers whose last release failed: the next failures are logged at debug level until one succeeds
# (a server that is down would otherwise log one warning per episode)
_failing: set[str] = set()


def parse_release(template: str) -> tuple[str, str]:
    """``"METHOD URL"`` as ``(method, url_template)``; ``ValueError`` saying what is wrong."""
    parts = template.split()
    if len(parts) != 2:
        raise ValueError(
            f"release {template!r} must be 'METHOD URL', e.g. 'DELETE {{base}}/workspaces/{{episode_id}}'"
        )
    method, url = parts[0].upper(), parts[1]
    if method not in RELEASE_METHODS:
        raise ValueError(f"release method {parts[0]!r} is not one of {', '.join(RELEASE_METHODS)}")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(url) if name is not None}
    except ValueError as exc:
        raise ValueError(f"release URL {url!r} is not a valid template: {exc}") from None
    unknown = sorted(n for n in names if n not in RELEASE_FIELDS)
    if unknown:
        raise ValueError(
            f"release URL {url!r} uses unknown placeholder(s) {unknown}; known: "
            + ", ".join("{" + f + "}" for f in RELEASE_FIELDS)
        )
    if "episode_id" not in names:
        raise ValueError(f"release URL {url!r} must name the episode with {{episode_id}}")
    return method, url


def base_of(url: str) -> str:
    """The server URL without its last path segment (the endpoint, usually ``/mcp``)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    path = path[: path.rfind("/")] if "/" in path else ""
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def release_request(cfg: MCPServerConfig, episode_id: str, task_id: str) -> tuple[str, str]:
    """The ``(method, url)`` that releases ``episode_id`` on this server (which has ``release``)."""
    assert cfg.release is not None and cfg.url is not None
    method, template = parse_release(cfg.release)
    url = template.format(
        url=cfg.url,
        base=base_of(cfg.url),
        episode_id=quote(episode_id, safe=""),
        task_id=quote(task_id, safe=""),
    )
    return method, url


async def release_episode(
    servers: Iterable[tuple[str, MCPServerConfig]], episode_id: str, task_id: str
) -> None:
    """Send each server's release request for this episode (once per distinct request, at once).

    Never raises for a failed request (logged); a cancellation of the caller propagates."""
    requests: dict[tuple[str, str], tuple[str, MCPServerConfig]] = {}
    for name, cfg in servers:
        if cfg.release is not None:
            requests.setdefault(release_request(cfg, episode_id, task_id), (name, cfg))
    if not requests:
        return
    import aiohttp

    async with aiohttp.ClientSession() as http:
        sends = [
            _send(http, name, cfg, method, url, episode_id, task_id)
            for (method, url), (name, cfg) in requests.items()
        ]
        await asyncio.gather(*sends)


async def _send(
    http: aiohttp.ClientSession, name: str, cfg: MCPServerConfig, method: str, url: str, episode_id: str, task_id: str
) -> None:
    import aiohttp

    headers = {**cfg.headers, "X-Episode-Id": episode_id, "X-Task-Id": task_id}
    try:
        async with http.request(
            method, url, headers=headers, timeout=aiohttp.ClientTimeout(total=cfg.release_timeout)
        ) as response:
            if response.status >= 400:
                body = (await response.text())[:200]
                _failed(name, f"{method} {url} answered {response.status}: {body}")
                return
    except asyncio.CancelledError:
        raise
    except TimeoutError:
        _failed(name, f"{method} {url} did not answer within release_timeout={cfg.release_timeout:g} s")
        return
    except Exception as exc:  # best-effort: the server's idle sweep frees what is not released
        _failed(name, f"{method} {url} failed: {type(exc).__name__}: {exc}")
        return
    _failing.discard(name)
    logger.debug("released episode %s on MCP server '%s' (%s %s)", episode_id, name, method, url)


def _failed(name: str, what: str) -> None:
    if name in _failing:
        logger.debug("releasing an episode on MCP server '%s': %s", name, what)
        return
    _failing.add(name)
    logger.warning(
        "releasing an episode on MCP server '%s' failed (%s); the episode's result is unchanged and the "
        "server keeps its state until its own idle timeout. Further failures of this server are logged at "
        "debug level until a release succeeds.",
        name,
        what,
    )
