"""The live view in a real headless Chromium: the page opened with the token shows a running
episode with its browser frame (the agent's screenshot) beside its tool-call timeline."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from gaia_env.browser_site import BrowserSite
from gaia_env.conftest import connect, in_process_env

from aworld_gaia_env.browser import find_executable, missing_browser
from aworld_gaia_env.settings import GaiaEnvSettings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(missing_browser(GaiaEnvSettings()) is not None, reason="needs Debian's chromium (make sysdeps)"),
]


async def test_live_view_shows_the_episode_frame_and_timeline(tmp_path):
    from playwright.async_api import async_playwright

    site = BrowserSite().start()
    try:
        with in_process_env(servers="browser,documents-txt", allowed_hosts=f"127.0.0.1:{site.port}") as env:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{env.base}/live/episodes") as response:
                    assert response.status == 401  # the data needs the token; the page itself holds none
            async with async_playwright() as pw:
                viewer = await pw.chromium.launch(executable_path=find_executable(None), headless=True)
                try:
                    page = await viewer.new_page(viewport={"width": 1400, "height": 900})
                    await page.goto(f"{env.base}/live#token=wrong")
                    await page.get_by_text("unauthorized").wait_for(timeout=10_000)
                    # corrected in the address bar: a fragment change does not reload the page,
                    # the page reads the token again
                    await page.evaluate("token => { location.hash = 'token=' + token; }", env.token)
                    await page.get_by_text("0 episode(s)").wait_for(timeout=10_000)
                    async with connect(env, episode="ep-live") as client:
                        opened = await client.call_tool("browser__open", {"url": site.base + "/item/emperor"})
                        assert not opened.is_error
                        await client.call_tool("documents-txt__list_files", {})
                        card = page.locator('[data-episode="ep-live"]')
                        await card.wait_for(timeout=10_000)
                        await card.get_by_text("browser__open").wait_for(timeout=10_000)
                        await card.get_by_text("documents-txt__list_files").wait_for(timeout=10_000)
                        await card.locator(".url").get_by_text(site.base + "/item/emperor").wait_for(timeout=10_000)
                        for _ in range(100):  # the frame arrives with the next refresh
                            width = await card.locator("img").evaluate("img => img.complete ? img.naturalWidth : 0")
                            if width:
                                break
                            await asyncio.sleep(0.1)
                        assert width == 1280  # the agent's viewport, as the agent sees it
                        shot = await page.screenshot(path=str(tmp_path / "live.png"))
                        assert shot[:8] == b"\x89PNG\r\n\x1a\n"
                        frame = await card.locator("img").screenshot()
                        timeline = await card.locator(".timeline").screenshot()
                        assert len(frame) > 2000 and len(timeline) > 1000
                        timeline_text = await card.locator(".timeline").inner_text()
                        assert timeline_text.index("browser__open") < timeline_text.index("documents-txt__list_files")
                finally:
                    await viewer.close()
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {env.token}"}
                async with session.get(f"{env.base}/live/episodes/ep-live/screenshot", headers=headers) as response:
                    assert response.status == 200 and response.headers["content-type"] == "image/jpeg"
                async with session.delete(f"{env.base}/workspaces/ep-live", headers=headers) as response:
                    assert response.status == 204
                async with session.get(f"{env.base}/live/episodes", headers=headers) as response:
                    assert (await response.json())["episodes"] == []
    finally:
        site.stop()
