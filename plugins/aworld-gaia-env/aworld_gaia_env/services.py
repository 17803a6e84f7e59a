"""Shared clients the tools use: one HTTP session (limits, SSRF guard), the model endpoints, the sandbox.

One ``aiohttp`` session per server process keeps connections to the external APIs warm. URLs a
*model* chose (download, readweb) are checked against private and loopback addresses, on every
redirect hop, unless the deployment allows them; base URLs an operator configured are trusted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urljoin, urlsplit

from aworld_gaia_env.errors import MissingConfigError, ToolError
from aworld_gaia_env.settings import GaiaEnvSettings

_MAX_REDIRECTS = 5


@dataclass
class FetchResult:
    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool

    def text(self) -> str:
        charset = "utf-8"
        if "charset=" in self.content_type:
            charset = self.content_type.split("charset=", 1)[1].split(";")[0].strip() or "utf-8"
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")

    def json(self, service: str) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise ToolError(f"{service} answered with something that is not JSON: {self.text()[:200]!r}") from None


@dataclass(frozen=True)
class LLMEndpoint:
    base_url: str
    model: str
    api_key: str | None


class Services:
    """Per-process clients, created lazily inside the server's event loop."""

    def __init__(self, settings: GaiaEnvSettings):
        from aworld_gaia_env.sandbox import Sandbox

        self.settings = settings
        self.sandbox = Sandbox(settings)
        self._session: Any = None
        self._browsers: Any = None

    @property
    def browsers(self) -> Any:
        """The browser pool (:class:`aworld_gaia_env.browser.BrowserPool`), made on first use."""
        if self._browsers is None:
            from aworld_gaia_env.browser import BrowserPool

            self._browsers = BrowserPool(self.settings, self)
        return self._browsers

    async def session(self) -> Any:
        if self._session is None or self._session.closed:
            import aiohttp

            self._session = aiohttp.ClientSession(
                headers={"User-Agent": self.settings.user_agent},
                connector=aiohttp.TCPConnector(limit=64, ttl_dns_cache=300),
            )
        return self._session

    async def end_episode(self, key: str) -> None:
        """Close what an episode holds besides its workspace (its browser context)."""
        if self._browsers is not None:
            await self._browsers.close_episode(key)

    async def close(self) -> None:
        if self._browsers is not None:
            await self._browsers.close()
        if self._session is not None and not self._session.closed:
            await self._session.close()

    # ------------------------------------------------------------------------------------------
    # HTTP
    # ------------------------------------------------------------------------------------------

    async def check_public_url(self, url: str) -> None:
        """Refuse non-http(s) URLs, and private/loopback hosts unless the deployment allows them."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ToolError(f"unsupported URL {url!r}: only http:// and https:// URLs with a host can be fetched")
        if self.settings.allow_private_urls:
            return
        host = parts.hostname
        allowed = {h.strip().lower() for h in self.settings.allowed_hosts.split(",") if h.strip()}
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if host.lower() in allowed or f"{host.lower()}:{port}" in allowed:
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ToolError(f"cannot resolve host {host!r} of {url!r}: {exc}") from None
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_global:
                raise ToolError(
                    f"refusing to fetch {url!r}: {host} resolves to the non-public address {address}; "
                    f"set GAIA_ENV_ALLOW_PRIVATE_URLS=true if this environment may reach private networks, "
                    f"or list the host in GAIA_ENV_ALLOWED_HOSTS"
                )

    async def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        service: str = "request",
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        json_body: Any = None,
        data: Any = None,
        max_bytes: int | None = None,
        timeout_s: float | None = None,
        untrusted: bool = False,
        raise_for_status: bool = True,
    ) -> FetchResult:
        """One HTTP exchange with a size cap and a timeout; errors become :class:`ToolError`."""
        import aiohttp

        session = await self.session()
        limit = max_bytes if max_bytes is not None else self.settings.download_max_bytes
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.settings.http_timeout_s)
        current = url
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                if untrusted:
                    await self.check_public_url(current)
                async with session.request(
                    method,
                    current,
                    params=params,
                    headers=headers,
                    json=json_body,
                    data=data,
                    timeout=timeout,
                    allow_redirects=not untrusted,
                ) as response:
                    if untrusted and response.status in (301, 302, 303, 307, 308) and "Location" in response.headers:
                        current = urljoin(str(response.url), response.headers["Location"])
                        params = None
                        if response.status == 303:
                            method, json_body, data = "GET", None, None
                        continue
                    body, truncated = await _read_capped(response, limit)
                    result = FetchResult(
                        str(response.url), response.status, response.headers.get("Content-Type", ""), body, truncated
                    )
                    if raise_for_status and response.status >= 400:
                        raise ToolError(
                            f"{service} failed: {method} {_safe_url(current)} answered HTTP {response.status}: "
                            f"{result.text()[:300]!r}"
                        )
                    return result
            raise ToolError(f"{service} failed: more than {_MAX_REDIRECTS} redirects from {_safe_url(url)}")
        except TimeoutError:
            raise ToolError(
                f"{service} failed: {_safe_url(current)} did not answer within {timeout.total:.0f} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise ToolError(f"{service} failed: {_safe_url(current)}: {type(exc).__name__}: {exc}") from None

    async def download_to(self, url: str, out: BinaryIO, *, max_bytes: int, timeout_s: float) -> FetchResult:
        """Stream ``url`` into ``out`` (at most ``max_bytes``; a larger body is an error, and the
        caller discards the partial file)."""
        import aiohttp

        session = await self.session()
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        current = url
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                await self.check_public_url(current)
                async with session.get(current, timeout=timeout, allow_redirects=False) as response:
                    if response.status in (301, 302, 303, 307, 308) and "Location" in response.headers:
                        current = urljoin(str(response.url), response.headers["Location"])
                        continue
                    if response.status >= 400:
                        excerpt = (await response.content.read(300)).decode("utf-8", "replace")
                        raise ToolError(f"download failed: {_safe_url(current)} answered HTTP {response.status}: {excerpt!r}")
                    declared = response.content_length
                    if declared is not None and declared > max_bytes:
                        raise ToolError(
                            f"download refused: {_safe_url(current)} is {declared} bytes, over the limit of "
                            f"{max_bytes} bytes (DOWNLOAD_MAX_BYTES)"
                        )
                    size = 0
                    async for chunk in response.content.iter_chunked(64 * 1024):
                        size += len(chunk)
                        if size > max_bytes:
                            raise ToolError(
                                f"download stopped: {_safe_url(current)} sent more than the limit of "
                                f"{max_bytes} bytes (DOWNLOAD_MAX_BYTES); nothing was kept"
                            )
                        out.write(chunk)
                    return FetchResult(
                        str(response.url), response.status, response.headers.get("Content-Type", ""), b"", False
                    )
            raise ToolError(f"download failed: more than {_MAX_REDIRECTS} redirects from {_safe_url(url)}")
        except TimeoutError:
            raise ToolError(f"download failed: {_safe_url(current)} did not finish within {timeout_s:.0f} s") from None
        except aiohttp.ClientError as exc:
            raise ToolError(f"download failed: {_safe_url(current)}: {type(exc).__name__}: {exc}") from None

    # ------------------------------------------------------------------------------------------
    # Models
    # ------------------------------------------------------------------------------------------

    def llm_endpoint(self, role: str, tool: str) -> LLMEndpoint:
        return resolve_llm_endpoint(self.settings, role, tool)

    async def chat(self, endpoint: LLMEndpoint, messages: list[dict[str, Any]], *, tool: str, **extra: Any) -> str:
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        result = await self.fetch(
            f"{endpoint.base_url}/chat/completions",
            method="POST",
            service=f"{tool} (model {endpoint.model})",
            headers=headers,
            json_body={"model": endpoint.model, "messages": messages, **extra},
            timeout_s=self.settings.llm_timeout_s,
            max_bytes=16 * 2**20,
        )
        payload = result.json(f"{tool} model endpoint")
        try:
            content = payload["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ToolError(f"{tool}: the model endpoint answered without choices[0].message: {str(payload)[:300]}") from None
        return content if isinstance(content, str) else json.dumps(content)


def resolve_llm_endpoint(settings: GaiaEnvSettings, role: str, tool: str) -> LLMEndpoint:
    """The endpoint for ``role`` (code/think/guard/image/audio): its override, else ``MCP_LLM_*``."""
    prefix = role.upper()
    base = getattr(settings, f"{role}_llm_base_url") or settings.mcp_llm_base_url
    model = getattr(settings, f"{role}_llm_model_name") or settings.mcp_llm_model_name
    key = getattr(settings, f"{role}_llm_api_key") or settings.mcp_llm_api_key
    missing = []
    if not base:
        missing.append("MCP_LLM_BASE_URL")
    if not model:
        missing.append("MCP_LLM_MODEL_NAME")
    if missing:
        raise MissingConfigError(
            tool, missing, f"({prefix}_LLM_BASE_URL / {prefix}_LLM_MODEL_NAME override them for this tool only.)"
        )
    return LLMEndpoint(base.rstrip("/"), model, key)


async def _read_capped(response: Any, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        remaining = limit - size
        if len(chunk) > remaining:
            chunks.append(chunk[:remaining])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _safe_url(url: str) -> str:
    """The URL without its query (API keys travel there)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
