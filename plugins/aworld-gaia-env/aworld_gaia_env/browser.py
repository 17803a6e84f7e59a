"""The browser behind the ``browser`` tool server: one Chromium per environment process, one
Playwright browser context (cookies, storage, cache, tabs) per episode.

Chromium is Debian's ``chromium`` package driven through Playwright's ``executable_path``: nothing
is downloaded at install or run time. Every request a page makes goes through a route handler that
applies the environment's address policy (http/https only; private and loopback hosts refused
unless ``GAIA_ENV_ALLOW_PRIVATE_URLS`` or ``GAIA_ENV_ALLOWED_HOSTS`` allow them). ``file://`` never
reaches Chromium: a workspace file is opened as ``http://workspace.invalid/<path>`` and served by
the route handler from the race-free workspace reader, anything else is refused. Chromium itself
has no network (a namespace of its own, :mod:`aworld_gaia_env.browser_launch`): requests are
fetched by Playwright's driver after the check, WebSockets relayed by this process after the same
check on every address they connect to. WebRTC is off in every page, ``browser__open`` takes no
``data:``/``javascript:``/``blob:`` URL, and Chromium runs with a scrubbed environment (no API keys)
and a private HOME, as its own unprivileged uid inside bubblewrap with its own sandbox on
(:mod:`aworld_gaia_env.browser_launch`). Downloads are copied into the workspace through its writer (size-capped by
``DOWNLOAD_MAX_BYTES``).

Limits per episode: pages loaded (``BROWSER_MAX_PAGES``), open tabs (``BROWSER_MAX_TABS``), time of
one action (``BROWSER_ACTION_TIMEOUT_S``), lifetime of the episode's browser (``BROWSER_EPISODE_S``),
V8 heap of each renderer (``BROWSER_JS_HEAP_MB``), and the number of episodes with a live browser
(``BROWSER_MAX_EPISODES``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import os
import re
import shutil
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit

from aworld_gaia_env.browser_launch import IsolatedChromium, browser_uid, chromium_switches, missing_isolation
from aworld_gaia_env.errors import ToolError

if TYPE_CHECKING:
    from aworld_gaia_env.services import Services
    from aworld_gaia_env.settings import GaiaEnvSettings
    from aworld_gaia_env.workspace import Workspace

logger = logging.getLogger("aworld_gaia_env.browser")

REDIRECT_MARK = "aworld-redirect"
"""Marks the page that hands a checked redirect over to a new navigation (see ``_route``)."""

WORKSPACE_ORIGIN = "http://workspace.invalid"
"""Workspace files are shown under this origin (never as file://): the route handler serves them."""

EXECUTABLE_CANDIDATES = (
    "/usr/lib/chromium/chromium",  # Debian's chromium package (the binary behind /usr/bin/chromium)
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/lib/chromium/chromium-headless-shell",
)

VIEWPORT = {"width": 1280, "height": 800}

# WebRTC's STUN (UDP) and TURN (UDP/TCP) connections are made by Chromium's network service and never
# pass the route handler, so a page could reach any host and port with them: every frame of every
# page loses the WebRTC interfaces before its own scripts run, and Chromium sends no non-proxied UDP
# (``--webrtc-ip-handling-policy``; Chromium has no switch that turns WebRTC off, and TURN over TCP
# still connects under that policy, which is why the interfaces go too)
_NO_WEBRTC_JS = r"""
(() => {
  for (const name of Object.getOwnPropertyNames(globalThis)) {
    if (/^(webkit)?RTC/.test(name)) { try { delete globalThis[name]; } catch (e) {} }
  }
})();
"""

CHROMIUM_ENV_PASSED = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "TZ", "TMPDIR", "FONTCONFIG_FILE", "FONTCONFIG_PATH")
"""What Chromium keeps of the server's environment (which holds API keys it has no use for)."""


def chromium_env(home: Path) -> dict[str, str]:
    """Chromium's whole environment: a private HOME and XDG directories, locale, fonts, PATH."""
    env = {name: os.environ[name] for name in CHROMIUM_ENV_PASSED if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache"), ("XDG_DATA_HOME", ".local/share")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(home / sub)
    runtime = home / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    return env

# Marks interactive elements with stable references (data-aw-ref, kept across snapshots of a page)
# and returns the readable text, links and elements, each capped so a huge page stays cheap.
_SNAPSHOT_JS = r"""
([maxText, maxItems]) => {
  const w = window;
  if (!w.__awNext) w.__awNext = 1;
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) return false;
    const s = getComputedStyle(el);
    return s.visibility !== 'hidden' && s.display !== 'none';
  };
  const ref = (el) => {
    let r = el.getAttribute('data-aw-ref');
    if (!r) { r = 'e' + (w.__awNext++); el.setAttribute('data-aw-ref', r); }
    return r;
  };
  const label = (el) => {
    const forLabel = el.id ? document.querySelector('label[for="' + CSS.escape(el.id) + '"]') : null;
    const t = (el.getAttribute('aria-label') || (forLabel && forLabel.innerText) || el.innerText || el.value
             || el.getAttribute('placeholder') || el.getAttribute('name') || el.getAttribute('title') || el.id || '').trim();
    return t.replace(/\s+/g, ' ').slice(0, 80);
  };
  const body = document.body;
  const text = body ? (body.innerText || '') : '';
  const links = [], elements = [];
  let more = false;
  const sel = 'a[href],button,input,select,textarea,summary,[role=button],[role=tab],[role=link],[onclick],[contenteditable=true]';
  for (const el of document.querySelectorAll(sel)) {
    if (links.length + elements.length >= maxItems) { more = true; break; }
    if (!visible(el) || el.disabled) continue;
    const tag = el.tagName.toLowerCase();
    if (tag === 'a') { links.push({ref: ref(el), text: label(el), href: el.href}); continue; }
    const item = {ref: ref(el), tag: tag, label: label(el)};
    if (tag === 'input') { item.type = el.type; if (el.type !== 'password') item.value = (el.value || '').slice(0, 80); }
    if (tag === 'select') item.options = Array.from(el.options).slice(0, 30).map(o => o.value + (o.text !== o.value ? '=' + o.text : ''));
    if (el.getAttribute('role')) item.role = el.getAttribute('role');
    elements.push(item);
  }
  return {title: document.title, url: location.href, text: text.slice(0, maxText), textLength: text.length,
          links, elements, more, scrollY: Math.round(w.scrollY), scrollHeight: document.documentElement.scrollHeight};
}
"""


# Whether the reference is on the page, and how many references the page has handed out
_REF_CHECK_JS = r"""
(ref) => [document.querySelector('[data-aw-ref="' + ref + '"]') !== null, (window.__awNext || 1) - 1]
"""


def find_executable(configured: Path | None) -> str | None:
    """The Chromium to drive: ``BROWSER_EXECUTABLE`` when set, else Debian's package paths."""
    if configured is not None:
        return str(configured) if os.access(configured, os.X_OK) else None
    for candidate in EXECUTABLE_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium")


def missing_browser(settings: GaiaEnvSettings) -> ToolError | None:
    """Why the browser tools cannot run on this deployment (None: they can)."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return ToolError("the browser tools need the 'playwright' Python package: pip install playwright "
                         "(its driver is enough; the browser is Debian's chromium, no 'playwright install')")
    if find_executable(settings.browser_executable) is None:
        where = settings.browser_executable or " or ".join(EXECUTABLE_CANDIDATES[:2])
        return ToolError(f"the browser tools need Chromium at {where}: apt-get install -y chromium "
                         f"(or set BROWSER_EXECUTABLE to its binary)")
    return None


@dataclass
class TimelineEntry:
    at: float
    tool: str
    summary: str
    ok: bool
    ms: float


@dataclass
class EpisodeBrowser:
    """One episode's browser context, its tabs, counters and what the live view shows."""

    key: str
    workspace: Workspace
    context: Any
    started: float = field(default_factory=time.monotonic)
    pages: list[Any] = field(default_factory=list)
    current: int = 0
    loads: int = 0
    downloads: list[str] = field(default_factory=list)
    pending: set[asyncio.Task[Any]] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    refused: list[str] = field(default_factory=list)
    rejected: list[Any] = field(default_factory=list)  # tabs closed for BROWSER_MAX_TABS
    last_screenshot: bytes | None = None
    last_screenshot_at: float = 0.0
    relays: set[asyncio.Task[Any]] = field(default_factory=set)  # WebSockets relayed for the pages
    screenshots: int = 0  # saved in the workspace so far

    @property
    def page(self) -> Any:
        if not self.pages:
            raise ToolError("no page is open: call browser__open with a URL first")
        return self.pages[self.current]


class BrowserPool:
    """The Chromium of this process and the episodes' contexts, created on first use."""

    def __init__(self, settings: GaiaEnvSettings, services: Services):
        self.settings = settings
        self.services = services
        self._playwright: Any = None
        self._browser: Any = None
        self._start_lock = asyncio.Lock()
        self.episodes: dict[str, EpisodeBrowser] = {}
        self._host_ok: dict[tuple[str, int | None], tuple[float, str | None]] = {}
        self._home: Path | None = None
        self._isolation: IsolatedChromium | None = None
        self._ws_session: Any = None  # aiohttp, for WebSockets relayed after the policy's check

    # --- life cycle -----------------------------------------------------------------------------

    async def _ensure_browser(self) -> Any:
        async with self._start_lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            problem = missing_browser(self.settings)
            if problem is not None:
                raise problem
            from playwright.async_api import async_playwright

            if self._playwright is None:
                self._playwright = await async_playwright().start()
            args = chromium_switches(self.settings.browser_js_heap_mb)
            executable = find_executable(self.settings.browser_executable)
            assert executable is not None  # missing_browser said so
            isolated = self.settings.sandbox_isolation == "bwrap"
            if isolated:
                problem = missing_isolation()
                if problem is not None:
                    raise problem
                if self._isolation is not None:  # a Chromium that died: its directories go with it
                    self._isolation.cleanup()
                self._isolation = IsolatedChromium.prepare(browser_uid(self.settings.sandbox_uid_base))
                env = {**chromium_env(self._isolation.home), "TMPDIR": "/tmp", **self._isolation.env(executable)}
                launch: dict[str, Any] = {
                    "executable_path": self._isolation.launcher,
                    "downloads_path": str(self._isolation.downloads),
                    "chromium_sandbox": True,  # not root inside bubblewrap: Chromium's own sandbox is on
                }
            else:
                logger.warning(
                    "SANDBOX_ISOLATION=audit: Chromium runs WITHOUT bubblewrap, as this server's user%s; a renderer "
                    "exploit is held only by the container. Use SANDBOX_ISOLATION=bwrap outside trusted local use.",
                    " (root, so with its own sandbox off)" if os.geteuid() == 0 else "",
                )
                if self._home is None:
                    import tempfile

                    self._home = Path(tempfile.mkdtemp(prefix="gaia-chromium-home-"))
                env = {**chromium_env(self._home), "AWORLD_BROWSER_EXECUTABLE": executable}
                launch = {"executable_path": IsolatedChromium.unisolated_launcher(self._home),
                          "chromium_sandbox": os.geteuid() != 0}
            started = time.perf_counter()
            try:
                self._browser = await self._playwright.chromium.launch(
                    headless=True, args=args, env=env, timeout=60_000, **launch
                )
            except Exception as exc:
                if self._isolation is not None:
                    self._isolation.cleanup()
                    self._isolation = None
                where, hint = " in bubblewrap" if isolated else "", ""
                if isolated and "sandbox" in str(exc).lower():
                    hint = ("; Chromium's own sandbox needs user namespaces inside bubblewrap's "
                            "(user.max_user_namespaces > 0, no AppArmor/seccomp rule refusing them; see deploy/README.md)")
                raise ToolError(f"Chromium did not start{where}: {_short(exc)}{hint}") from None
            how = "unisolated"
            if self._isolation is not None:
                uid = os.getuid() if self._isolation.uid is None else self._isolation.uid
                how = f"in bubblewrap as uid {uid}, its own sandbox on"
            logger.info("chromium %s started in %.0f ms (%s)", self._browser.version,
                        (time.perf_counter() - started) * 1e3, how)
            return self._browser

    async def episode(self, workspace: Workspace) -> EpisodeBrowser:
        """The episode's browser (a new context on its first browser call)."""
        state = self.episodes.get(workspace.key)
        if state is not None:
            if time.monotonic() - state.started > self.settings.browser_episode_s:
                raise ToolError(
                    f"this episode's browser has run for more than BROWSER_EPISODE_S={self.settings.browser_episode_s:g} s "
                    f"and is closed to new actions; answer with what you found"
                )
            return state
        if len(self.episodes) >= self.settings.browser_max_episodes:
            raise ToolError(
                f"{len(self.episodes)} episodes already have a browser open (BROWSER_MAX_EPISODES="
                f"{self.settings.browser_max_episodes}); try again when one has ended"
            )
        browser = await self._ensure_browser()
        context = await browser.new_context(
            viewport=VIEWPORT,
            accept_downloads=True,
            service_workers="block",  # their requests would not pass the route handler
            user_agent=None,
        )
        timeout_ms = self.settings.browser_action_timeout_s * 1000
        context.set_default_timeout(timeout_ms)
        context.set_default_navigation_timeout(timeout_ms)
        await context.add_init_script(_NO_WEBRTC_JS)
        state = EpisodeBrowser(workspace.key, workspace, context)
        await context.route("**/*", lambda route: self._route(state, route))
        with contextlib.suppress(AttributeError):  # Playwright >= 1.48: WebSockets pass the same policy
            await context.route_web_socket(re.compile(".*"), lambda ws: self._route_ws(state, ws))
        context.on("page", lambda page: self._adopt(state, page))
        self.episodes[workspace.key] = state
        return state

    async def close_episode(self, key: str) -> None:
        state = self.episodes.pop(key, None)
        if state is None:
            return
        for task in [*state.pending, *state.relays]:
            task.cancel()
        with contextlib.suppress(Exception):
            await state.context.close()

    async def close(self) -> None:
        for key in list(self.episodes):
            await self.close_episode(key)
        if self._browser is not None:
            with contextlib.suppress(Exception):
                await self._browser.close()
            self._browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
        if self._ws_session is not None:
            with contextlib.suppress(Exception):
                await self._ws_session.close()
            self._ws_session = None
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None
        if self._isolation is not None:
            self._isolation.cleanup()
            self._isolation = None

    # --- pages, tabs, downloads -------------------------------------------------------------------

    def _adopt(self, state: EpisodeBrowser, page: Any) -> None:
        if page in state.pages or page in state.rejected:
            return
        if len(state.pages) >= self.settings.browser_max_tabs:
            state.refused.append(f"a new tab was closed: BROWSER_MAX_TABS={self.settings.browser_max_tabs} are open")
            state.rejected = [*state.rejected[-20:], page]
            asyncio.ensure_future(page.close())
            return
        state.pages.append(page)
        state.current = len(state.pages) - 1
        page.on("framenavigated", lambda frame: self._navigated(state, page, frame))
        page.on("download", lambda download: self._download(state, download))
        page.on("close", lambda _page: self._closed(state, page))

    def _navigated(self, state: EpisodeBrowser, page: Any, frame: Any) -> None:
        if frame == page.main_frame and not frame.url.startswith("about:"):
            state.loads += 1

    def _closed(self, state: EpisodeBrowser, page: Any) -> None:
        if page in state.pages:
            index = state.pages.index(page)
            state.pages.remove(page)
            if state.current >= index and state.current > 0:
                state.current -= 1

    def _download(self, state: EpisodeBrowser, download: Any) -> None:
        task = asyncio.ensure_future(self._save_download(state, download))
        state.pending.add(task)
        task.add_done_callback(state.pending.discard)

    async def _save_download(self, state: EpisodeBrowser, download: Any) -> None:
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", download.suggested_filename or "download").strip("._") or "download"
        try:
            path = await download.path()
            size = os.path.getsize(path)
            limit = self.settings.download_max_bytes
            if size > limit:
                state.downloads.append(f"{name}: not kept, {size} bytes is over DOWNLOAD_MAX_BYTES={limit}")
                return
            rel, size = await asyncio.to_thread(state.workspace.copy_in, Path(path), name)
            state.downloads.append(f"saved {rel} ({size} bytes) in the workspace")
        except Exception as exc:  # reported to the model with the next action's result
            state.downloads.append(f"{name}: download failed: {exc}")
        finally:
            with contextlib.suppress(Exception):
                await download.delete()

    async def settle_downloads(self, state: EpisodeBrowser) -> None:
        if state.pending:
            await asyncio.wait(set(state.pending), timeout=self.settings.browser_action_timeout_s)

    # --- address policy ---------------------------------------------------------------------------

    async def _refusal(self, url: str) -> str | None:
        """Why a page may not load ``url`` (None: it may)."""
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            return None
        if url.startswith(WORKSPACE_ORIGIN + "/"):
            return None
        if parts.scheme not in ("http", "https"):
            return f"{parts.scheme}: URLs are not allowed (http and https only; workspace files open by their path)"
        key = (parts.hostname or "", parts.port)
        cached = self._host_ok.get(key)
        if cached is not None and time.monotonic() - cached[0] < 30:
            return cached[1]
        try:
            await self.services.check_public_url(url)
            reason = None
        except ToolError as exc:
            reason = str(exc)
        self._host_ok[key] = (time.monotonic(), reason)
        return reason

    async def _route(self, state: EpisodeBrowser, route: Any) -> None:
        request = route.request
        url = request.url
        try:
            navigation = request.is_navigation_request()
            frame_url = _frame_url(request)
            on_workspace = frame_url.startswith(WORKSPACE_ORIGIN + "/")
            if url.startswith(WORKSPACE_ORIGIN + "/"):
                # a workspace file is shown when navigated to, and loads its own subresources; a web
                # page cannot pull workspace files in as scripts, images or fetches
                if navigation or on_workspace:
                    await self._serve_workspace_file(state, route, url)
                else:
                    await route.abort("blockedbyclient")
                return
            if on_workspace and not navigation:
                # a workspace page is offline: its scripts cannot send the workspace's files anywhere
                reason = "a page opened from the workspace loads nothing from the network"
            else:
                reason = await self._refusal(url)
        except Exception as exc:  # never leave a request hanging
            reason = f"internal error checking {url}: {exc}"
        if reason is not None:
            if request.is_navigation_request():
                state.refused.append(reason)
            with contextlib.suppress(Exception):
                await route.abort("blockedbyclient")
            return
        # fetched here without following redirects and handed to Chromium: a redirect comes back to
        # this handler as a new request, so its target passes the same policy (route.continue_()
        # would let Chromium follow it unchecked, into the cluster)
        timeout_ms = self.settings.browser_action_timeout_s * 1000
        try:
            response = await route.fetch(max_redirects=0, timeout=timeout_ms)
        except Exception as exc:
            if request.is_navigation_request():
                state.refused.append(f"{url} did not answer within {timeout_ms / 1000:g} s ({short_error(exc)})")
            with contextlib.suppress(Exception):
                await route.abort("timedout")
            return
        hops = 0
        while 300 <= response.status < 400 and response.headers.get("location") and hops < 10:
            # Chromium follows a fulfilled redirect without asking this handler again: the target is
            # checked here, then a navigation is sent there by a new request (which comes back here)
            # and a subresource's redirect is followed hop by hop by this handler
            target = urljoin(url, response.headers["location"])
            reason = await self._refusal(target)
            if reason is not None:
                if request.is_navigation_request():
                    state.refused.append(f"{url} redirects to {target}: {reason}")
                with contextlib.suppress(Exception):
                    await route.abort("blockedbyclient")
                return
            if request.is_navigation_request():
                body = f'<!doctype html><meta name="{REDIRECT_MARK}"><script>location.replace({json.dumps(target)})</script>'
                with contextlib.suppress(Exception):
                    await route.fulfill(status=200, content_type="text/html", body=body)
                return
            try:
                response = await route.fetch(url=target, max_redirects=0, timeout=timeout_ms)
            except Exception:
                with contextlib.suppress(Exception):
                    await route.abort("timedout")
                return
            url, hops = target, hops + 1
        with contextlib.suppress(Exception):
            await route.fulfill(response=response)

    async def settle(self, page: Any) -> bool:
        """Wait for ``page`` to load, through redirect hand-offs; False when it is still loading."""
        deadline = time.monotonic() + self.settings.browser_action_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if page.is_closed():
                return True
            if remaining <= 0:
                return False
            try:
                await page.wait_for_load_state("load", timeout=remaining * 1000)
                handing_off = await page.evaluate(f"!!document.querySelector('meta[name=\"{REDIRECT_MARK}\"]')")
            except Exception as exc:
                if "Timeout" in str(exc):
                    return False
                handing_off = True  # the context was destroyed by the navigation: look again
            if not handing_off:
                return True
            await asyncio.sleep(0.05)

    async def _route_ws(self, state: EpisodeBrowser, ws: Any) -> None:
        url = ws.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        reason = await self._refusal(url)
        if reason is None:
            # Chromium has no network (its own namespace, browser_launch): this process connects,
            # every address it connects to checked by the same policy, and relays both ways
            try:
                upstream = await asyncio.wait_for(self._ws_connect(ws), self.settings.browser_action_timeout_s)
            except Exception as exc:
                reason = f"did not connect ({short_error(exc) or type(exc).__name__})"
            else:
                self._relay(state, ws, upstream)
                return
        state.refused.append(f"WebSocket {ws.url}: {reason}")
        with contextlib.suppress(Exception):
            await ws.close(code=1008, reason="refused by the environment")

    async def _ws_connect(self, ws: Any) -> Any:
        import aiohttp

        if self._ws_session is None or self._ws_session.closed:
            connector = aiohttp.TCPConnector(resolver=_PolicyResolver(self), limit=64)
            self._ws_session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.settings.user_agent}
            )
        return await self._ws_session.ws_connect(
            ws.url, protocols=ws.protocols, max_msg_size=self.settings.download_max_bytes,
            timeout=aiohttp.ClientWSTimeout(ws_close=5.0),
        )

    def _relay(self, state: EpisodeBrowser, ws: Any, upstream: Any) -> None:
        """Page -> server through Playwright's route handlers, server -> page by a task that lives
        until either side closes (or the episode's browser does)."""
        import aiohttp

        def to_server(message: str | bytes) -> Any:
            return upstream.send_str(message) if isinstance(message, str) else upstream.send_bytes(message)

        async def page_closed(code: int | None, reason: str | None) -> None:
            await upstream.close()

        ws.on_message(to_server)
        ws.on_close(page_closed)

        async def to_page() -> None:
            try:
                async for message in upstream:
                    if message.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                        ws.send(message.data)
                    elif message.type == aiohttp.WSMsgType.ERROR:
                        break
            finally:
                with contextlib.suppress(Exception):
                    await upstream.close()
                with contextlib.suppress(Exception):
                    await ws.close(code=upstream.close_code or 1000, reason="")

        task = asyncio.ensure_future(to_page())
        state.relays.add(task)
        task.add_done_callback(state.relays.discard)

    async def _serve_workspace_file(self, state: EpisodeBrowser, route: Any, url: str) -> None:
        import mimetypes

        rel = unquote(urlsplit(url).path).lstrip("/")
        try:
            body = await asyncio.to_thread(
                state.workspace.read_bytes, rel, max_bytes=self.settings.download_max_bytes
            )
        except ToolError as exc:
            await route.fulfill(status=404, content_type="text/plain", body=str(exc))
            return
        kind = mimetypes.guess_type(PurePosixPath(rel).name)[0] or "application/octet-stream"
        await route.fulfill(status=200, content_type=kind, body=body)

    def workspace_url(self, state: EpisodeBrowser, url: str) -> str:
        """``url`` as Chromium may load it: ``file://`` inside the workspace mapped to its origin."""
        if not url.startswith("file:"):
            return url
        path = unquote(urlsplit(url).path)
        rel = state.workspace.relative(path)  # raises for anything outside the workspace
        if not rel:
            raise ToolError("file:// of the workspace directory itself: give a file in it")
        return f"{WORKSPACE_ORIGIN}/{rel}"

    # --- reading a page ---------------------------------------------------------------------------

    async def snapshot(self, state: EpisodeBrowser, *, start_char: int = 0, max_chars: int | None = None) -> str:
        """The current tab as the model reads it: URL, title, text window, links and elements with refs."""
        page = state.page
        limit = min(max_chars or self.settings.doc_max_chars, self.settings.doc_max_chars)
        try:
            data = await page.evaluate(_SNAPSHOT_JS, [start_char + limit, self.settings.browser_max_elements])
        except Exception as exc:
            raise ToolError(f"cannot read the page {page.url}: {_short(exc)}") from None
        text = data["text"][start_char : start_char + limit]
        lines = [f"[tab {state.current + 1}/{len(state.pages)}] {data['title'] or '(no title)'} - {data['url']}"]
        lines.append(
            f"text {start_char}-{start_char + len(text)} of {data['textLength']} characters; "
            f"scrolled to {data['scrollY']} of {data['scrollHeight']} px"
        )
        lines += ["", text.strip()]
        if start_char + len(text) < data["textLength"]:
            lines.append(f"[more text: browser__read_page with start_char={start_char + len(text)}]")
        if data["links"]:
            lines += ["", "Links:"]
            lines += [f"  [{item['ref']}] {item['text'] or '(no text)'} -> {item['href']}" for item in data["links"]]
        if data["elements"]:
            lines += ["", "Interactive elements:"]
            for item in data["elements"]:
                extra = ""
                if item.get("type"):
                    extra += f" type={item['type']}"
                if item.get("value"):
                    extra += f" value={item['value']!r}"
                if item.get("role"):
                    extra += f" role={item['role']}"
                if item.get("options"):
                    extra += f" options={item['options']}"
                lines.append(f"  [{item['ref']}] <{item['tag']}>{extra} {item['label']}".rstrip())
        if data["more"]:
            lines.append(f"[only the first {self.settings.browser_max_elements} links and elements are listed]")
        return "\n".join(lines)

    def notes(self, state: EpisodeBrowser) -> str:
        """What happened besides the action (downloads, refused loads), reported once."""
        notes = [*state.downloads, *(f"refused: {r}" for r in state.refused)]
        state.downloads.clear()
        state.refused.clear()
        return "\n".join(notes)

    async def locator(self, state: EpisodeBrowser, ref: str) -> Any:
        """The element ``ref`` names, checked first: a stale or unknown reference is answered at
        once (an action on a missing element would wait BROWSER_ACTION_TIMEOUT_S for it)."""
        if not re.fullmatch(r"e\d+", ref):
            raise ToolError(f"bad element reference {ref!r}: use a reference like 'e12' from browser__read_page")
        page = state.page
        try:
            found, given = await page.evaluate(_REF_CHECK_JS, ref)
        except Exception as exc:  # navigating: the document is being replaced
            raise ToolError(f"cannot look up {ref} on {page.url} ({_short(exc)}); read the page again with "
                            f"browser__read_page") from None
        if not found:
            again = "read the page again with browser__read_page and use a reference from that reading"
            if given == 0:
                raise ToolError(f"element {ref} is not on this page: the page ({page.url}) has not been read since "
                                f"it loaded, so none of its elements has a reference yet; {again}")
            if int(ref[1:]) <= given:
                raise ToolError(f"element {ref} is no longer on the page: the page ({page.url}) changed since it was "
                                f"read; {again}")
            raise ToolError(f"there is no element {ref} on this page (its references go up to e{given}); {again}")
        return page.locator(f'[data-aw-ref="{ref}"]')

    def check_loads(self, state: EpisodeBrowser) -> None:
        limit = self.settings.browser_max_pages
        if state.loads >= limit:
            raise ToolError(
                f"this episode has loaded {state.loads} pages, the limit (BROWSER_MAX_PAGES={limit}); "
                f"work with the pages you have or answer"
            )

    async def screenshot(self, state: EpisodeBrowser, *, full_page: bool = False, kind: str = "png") -> bytes:
        page = state.page
        options: dict[str, Any] = {"full_page": full_page, "type": kind, "timeout": self.settings.browser_action_timeout_s * 1000}
        if kind == "jpeg":
            options["quality"] = 60
        data = await page.screenshot(**options)
        state.last_screenshot, state.last_screenshot_at = data, time.monotonic()
        return data

    async def save_screenshot(self, state: EpisodeBrowser, data: bytes) -> str:
        """Keep a screenshot the agent asked for in the workspace (``screenshots/NNN.png``), so a
        text-only agent can hand it to the image tools; the sentence that says where (or why not)."""
        state.screenshots += 1
        name = f"screenshots/{state.screenshots:03d}.png"
        try:
            rel = await asyncio.to_thread(state.workspace.add_file, name, data)
        except ToolError as exc:
            return f"not saved in the workspace: {exc}"
        return f"saved in the workspace as {rel} (media-image__ask_image can look at it)"


class _PolicyResolver:
    """An aiohttp resolver for the relayed WebSockets that resolves each host once and applies
    the address policy to the very addresses it hands the connector (a redirect during the
    handshake included).

    Why once: checking a name with one lookup and connecting with another lets a name that
    answers a public address first and a private one next (DNS rebinding) through the policy.
    Here the addresses checked are the addresses connected to; ``GAIA_ENV_ALLOWED_HOSTS`` and
    ``GAIA_ENV_ALLOW_PRIVATE_URLS`` are honoured as ``Services.check_public_url`` honours them.
    (An IP literal never reaches a resolver: aiohttp connects to it as given, after
    ``_route_ws``'s check of the URL, which for a literal is a check of that address.)
    """

    def __init__(self, pool: BrowserPool, resolver: Any = None):
        import aiohttp

        self._pool = pool
        self._resolver = resolver if resolver is not None else aiohttp.DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
        results = await self._resolver.resolve(host, port, family)
        reason = address_refusal(self._pool.settings, host, port, [r["host"] for r in results])
        if reason is not None:  # with an errno: aiohttp's connection error shows strerror only
            raise OSError(errno.EACCES, f"refused: {reason}")
        return results

    async def close(self) -> None:
        await self._resolver.close()


def address_refusal(settings: GaiaEnvSettings, host: str, port: int, addresses: list[str]) -> str | None:
    """Why ``host`` may not be connected to at ``addresses`` (what it resolved to); None: it may."""
    if settings.allow_private_urls:
        return None
    allowed = {h.strip().lower() for h in settings.allowed_hosts.split(",") if h.strip()}
    if host.lower() in allowed or f"{host.lower()}:{port}" in allowed:
        return None
    if not addresses:
        return f"{host} resolves to no address"
    for text in addresses:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return f"{host} resolves to {text!r}, which is not an IP address"
        if not address.is_global:
            return (
                f"{host} resolves to the non-public address {address}; set GAIA_ENV_ALLOW_PRIVATE_URLS=true "
                f"if this environment may reach private networks, or list the host in GAIA_ENV_ALLOWED_HOSTS"
            )
    return None


def _frame_url(request: Any) -> str:
    """The URL of the frame that made ``request`` ('' when there is none, e.g. a worker's)."""
    try:
        return request.frame.url or ""
    except Exception:
        return ""


def _short(exc: BaseException) -> str:
    text = str(exc).strip().split("\n")[0]
    return text[:300]


def short_error(exc: BaseException) -> str:
    """A Playwright error's first line (its call logs are for developers)."""
    return _short(exc)


def timeline_summary(arguments: dict[str, Any] | None) -> str:
    if not arguments:
        return ""
    parts = [f"{k}={str(v)[:60]!r}" for k, v in arguments.items()]
    return ", ".join(parts)[:200]


TIMELINE_LIMIT = 200


def new_timeline() -> deque[TimelineEntry]:
    return deque(maxlen=TIMELINE_LIMIT)
