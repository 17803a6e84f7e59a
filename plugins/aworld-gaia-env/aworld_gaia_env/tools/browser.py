"""browser: a real Chromium for web research (pages that need JavaScript, forms, tabs, downloads).

Every action answers with the page as the model reads it: text, links and interactive elements,
each with a reference (``e12``) that stays the same for that element while the page lives; click,
type and select take those references. See :mod:`aworld_gaia_env.browser` for the limits and the
address policy.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import Field

from aworld_gaia_env.browser import EpisodeBrowser, missing_browser, short_error
from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.tools.base import Args, ToolContext, ToolOutput, tool

SERVER = "browser"


async def _act(
    ctx: ToolContext, action: Callable[[EpisodeBrowser], Awaitable[str | None]], *, read: bool = True
) -> str:
    """Run ``action`` on the episode's browser under its lock; the page after it, with notes."""
    pool = ctx.services.browsers
    state = await pool.episode(ctx.workspace)
    async with state.lock:
        try:
            head = await action(state)
        except ToolError:
            raise
        except Exception as exc:  # Playwright's errors (timeouts, detached elements) go to the model
            notes = pool.notes(state)
            raise ToolError(f"{short_error(exc)}{(chr(10) + notes) if notes else ''}") from None
        await pool.settle_downloads(state)
        parts = [head] if head else []
        notes = pool.notes(state)
        if notes:
            parts.append(notes)
        if read and state.pages:
            parts.append(await pool.snapshot(state))
        return "\n".join(parts)


async def _load(ctx: ToolContext, state: EpisodeBrowser, go: Callable[[], Awaitable[Any]]) -> str | None:
    """A navigation bounded by BROWSER_ACTION_TIMEOUT_S: a page still loading is shown as far as it got."""
    timeout = ctx.settings.browser_action_timeout_s
    await go()
    if not await ctx.services.browsers.settle(state.page):
        with contextlib.suppress(Exception):
            await state.page.evaluate("window.stop()")
        return f"[the page was still loading after {timeout:g} s (BROWSER_ACTION_TIMEOUT_S); loading stopped, showing what arrived]"
    return None


class OpenArgs(Args):
    url: str = Field(description="http(s) URL, or a workspace file as file:///<workspace path> or its relative path.")
    new_tab: bool = Field(default=False, description="Open it in a new tab instead of the current one.")


@tool(
    SERVER,
    "open",
    "Open a URL in the episode's browser (JavaScript runs); returns the page's text, links and interactive elements "
    "with references for click/type/select.",
    OpenArgs,
    missing=missing_browser,
)
async def open_url(ctx: ToolContext, args: OpenArgs) -> str:
    pool = ctx.services.browsers

    async def action(state: EpisodeBrowser) -> str | None:
        url = args.url.strip()
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
        if scheme and scheme.group(1).lower() not in ("http", "https", "file"):
            # data:, javascript: and blob: would run JavaScript the model wrote itself, outside any site
            raise ToolError(
                f"refused: browser__open takes http(s) URLs and workspace files, not {scheme.group(1)}: URLs "
                f"(a workspace file whose name has a colon opens as ./<name>)"
            )
        if "://" not in url:
            url = "file://" + ctx.workspace.path.as_posix() + "/" + ctx.workspace.relative(url)
        url = pool.workspace_url(state, url)
        reason = await pool._refusal(url)
        if reason is not None:
            raise ToolError(f"refused: {reason}")
        pool.check_loads(state)
        if args.new_tab or not state.pages:
            if len(state.pages) >= ctx.settings.browser_max_tabs:
                raise ToolError(f"{len(state.pages)} tabs are open (BROWSER_MAX_TABS); close one with browser__tabs")
            page = await state.context.new_page()
            pool._adopt(state, page)
        page = state.page

        async def go() -> None:
            try:
                await page.goto(url, wait_until="commit")
            except Exception as exc:
                with contextlib.suppress(Exception):
                    if "Timeout" in str(exc):  # the navigation still hangs: cancel it by another one
                        await page.goto("about:blank", timeout=2000)
                    else:  # a refused load: let Chromium's error page land before the next action
                        await page.wait_for_url(lambda u: u.startswith("chrome-error:"), timeout=2000)
                        await page.wait_for_load_state("load", timeout=2000)
                refused = pool.notes(state)
                if not refused and "Timeout" in str(exc):
                    refused = f"{url} did not answer within {ctx.settings.browser_action_timeout_s:g} s (BROWSER_ACTION_TIMEOUT_S)"
                raise ToolError(f"cannot open {url}: {refused or short_error(exc)}") from None

        return await _load(ctx, state, go)

    return await _act(ctx, action)


class ReadArgs(Args):
    start_char: int = Field(default=0, ge=0, description="Offset in the page's text, to page through long pages.")


@tool(SERVER, "read_page", "The current tab's text (from start_char), links and interactive elements with references.",
      ReadArgs, missing=missing_browser)
async def read_page(ctx: ToolContext, args: ReadArgs) -> str:
    pool = ctx.services.browsers
    state = await pool.episode(ctx.workspace)
    async with state.lock:
        return await pool.snapshot(state, start_char=args.start_char)


_OPENS_TAB = """el => {
  const a = el.closest('a[href]');
  return !!(a && a.target && a.target !== '_self' && a.target !== '_parent' && a.target !== '_top');
}"""


class RefArgs(Args):
    ref: str = Field(description="An element reference from the page listing, e.g. 'e12'.")


@tool(SERVER, "click", "Click an element (link, button, tab) by its reference; returns the page after the click.",
      RefArgs, missing=missing_browser)
async def click(ctx: ToolContext, args: RefArgs) -> str:
    pool = ctx.services.browsers

    async def action(state: EpisodeBrowser) -> str | None:
        pool.check_loads(state)
        target = await pool.locator(state, args.ref)
        timeout_ms = ctx.settings.browser_action_timeout_s * 1000
        if await target.evaluate(_OPENS_TAB):
            async with state.context.expect_page(timeout=timeout_ms) as popup:
                await target.click()
            page = await popup.value
            pool._adopt(state, page)
            if page not in state.pages:  # over BROWSER_MAX_TABS: closed, and said so in the notes
                return None
            await pool.settle(page)
            return f"the click opened a new tab (now tab {state.pages.index(page) + 1})" if page in state.pages else None
        await target.click()
        await asyncio.sleep(0.05)  # let a navigation or a download start
        await pool.settle(state.page)
        return None

    return await _act(ctx, action)


class TypeArgs(Args):
    ref: str = Field(description="Reference of an input, textarea or editable element.")
    text: str = Field(description="Text to type (replaces what is in the field).")
    submit: bool = Field(default=False, description="Press Enter afterwards (submits a search form).")


@tool(SERVER, "type", "Type text into a field by its reference, optionally pressing Enter to submit.",
      TypeArgs, missing=missing_browser)
async def type_text(ctx: ToolContext, args: TypeArgs) -> str:
    pool = ctx.services.browsers

    async def action(state: EpisodeBrowser) -> str | None:
        field = await pool.locator(state, args.ref)
        await field.fill(args.text)
        if args.submit:
            pool.check_loads(state)
            await field.press("Enter")
            await asyncio.sleep(0.05)
            await pool.settle(state.page)
        return None

    return await _act(ctx, action)


class SelectArgs(Args):
    ref: str = Field(description="Reference of a <select> element.")
    value: str = Field(description="The option's value or its visible text.")


@tool(SERVER, "select", "Choose an option of a <select> by value or visible text.", SelectArgs, missing=missing_browser)
async def select_option(ctx: ToolContext, args: SelectArgs) -> str:
    pool = ctx.services.browsers

    async def action(state: EpisodeBrowser) -> str | None:
        field = await pool.locator(state, args.ref)
        try:
            chosen = await field.select_option(value=args.value, timeout=2000)
        except Exception:
            chosen = await field.select_option(label=args.value)
        return f"selected {chosen}"

    return await _act(ctx, action)


class ScrollArgs(Args):
    direction: Literal["down", "up", "top", "bottom"] = "down"
    screens: float = Field(default=1.0, gt=0, le=50, description="How many screen heights to scroll.")


@tool(SERVER, "scroll", "Scroll the current tab (loads lazily rendered content); returns the page.", ScrollArgs,
      missing=missing_browser)
async def scroll(ctx: ToolContext, args: ScrollArgs) -> str:
    async def action(state: EpisodeBrowser) -> str | None:
        page = state.page
        if args.direction in ("top", "bottom"):
            await page.evaluate("(b) => window.scrollTo(0, b ? document.documentElement.scrollHeight : 0)", args.direction == "bottom")
        else:
            sign = 1 if args.direction == "down" else -1
            await page.evaluate("(d) => window.scrollBy(0, d * window.innerHeight)", sign * args.screens)
        await asyncio.sleep(0.1)
        return None

    return await _act(ctx, action)


class NoArgs(Args):
    pass


@tool(SERVER, "back", "Go back one page in the current tab's history.", NoArgs, missing=missing_browser)
async def back(ctx: ToolContext, args: NoArgs) -> str:
    async def action(state: EpisodeBrowser) -> str | None:
        response = await state.page.go_back(wait_until="load")
        return None if response is not None or state.page.url else "there is no earlier page in this tab"

    return await _act(ctx, action)


class TabsArgs(Args):
    action: Literal["list", "switch", "close"] = "list"
    tab: int | None = Field(default=None, ge=1, description="Tab number (from the list) to switch to or close.")


@tool(SERVER, "tabs", "List the open tabs, switch to one, or close one.", TabsArgs, missing=missing_browser)
async def tabs(ctx: ToolContext, args: TabsArgs) -> str:
    async def action(state: EpisodeBrowser) -> str | None:
        if args.action != "list":
            if args.tab is None or args.tab > len(state.pages):
                raise ToolError(f"give tab= a number from 1 to {len(state.pages)}")
            if args.action == "switch":
                state.current = args.tab - 1
                await state.page.bring_to_front()
            else:
                await state.pages[args.tab - 1].close()
        lines = []
        for i, page in enumerate(state.pages, 1):
            marker = "*" if i - 1 == state.current else " "
            lines.append(f"{marker} tab {i}: {await page.title() or '(no title)'} - {page.url}")
        return "\n".join(lines) or "no tabs are open"

    return await _act(ctx, action, read=args.action == "switch")


class ScreenshotArgs(Args):
    full_page: bool = Field(default=False, description="The whole page instead of the visible screen.")


@tool(SERVER, "screenshot",
      "A screenshot of the current tab: an image for a model that takes images, and a PNG saved in the workspace "
      "(its path is in the answer) for the image tools.", ScreenshotArgs, missing=missing_browser)
async def screenshot(ctx: ToolContext, args: ScreenshotArgs) -> ToolOutput:
    pool = ctx.services.browsers
    state = await pool.episode(ctx.workspace)
    async with state.lock:
        try:
            data = await pool.screenshot(state, full_page=args.full_page)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"screenshot failed: {short_error(exc)}") from None
        saved = await pool.save_screenshot(state, data)
    page = state.page
    return ToolOutput(f"screenshot of {page.url} ({len(data)} bytes PNG), {saved}",
                      ((base64.b64encode(data).decode(), "image/png"),))


class WaitArgs(Args):
    text: str = Field(description="Text to wait for on the current tab.")
    timeout_s: float = Field(default=10.0, gt=0, le=120, description="How long to wait (at most BROWSER_ACTION_TIMEOUT_S).")


@tool(SERVER, "wait_for_text", "Wait until a text appears on the current tab (content rendered by JavaScript).",
      WaitArgs, missing=missing_browser)
async def wait_for_text(ctx: ToolContext, args: WaitArgs) -> str:
    async def action(state: EpisodeBrowser) -> str | None:
        timeout = min(args.timeout_s, ctx.settings.browser_action_timeout_s)
        try:
            await state.page.get_by_text(args.text).first.wait_for(state="visible", timeout=timeout * 1000)
        except Exception:
            raise ToolError(f"{args.text!r} did not appear on {state.page.url} within {timeout:g} s") from None
        return f"{args.text!r} is on the page"

    return await _act(ctx, action)


TOOLS = [open_url, read_page, click, type_text, select_option, scroll, back, tabs, screenshot, wait_for_text]
