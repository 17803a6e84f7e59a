"""The live view: a page listing running episodes, each with its browser as the agent sees it
(a screenshot refreshed about once a second) beside its tool-call timeline.

It replaces the upstream environment's VNC (which needed an X server and a VNC port) with plain
HTTP on the environment's own port. ``GET /live`` is a static page with no data in it; the page
takes the bearer token from its URL fragment (``/live#token=...``; a fragment never reaches the
server or its logs) and sends it as ``Authorization: Bearer`` to ``/live/episodes`` and
``/live/episodes/{episode}/screenshot``, which the same bearer check guards as ``/mcp``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from aworld_gaia_env.services import Services

TIMELINE_LIMIT = 200
EPISODE_LIMIT = 256
SCREENSHOT_MAX_AGE_S = 1.0


@dataclass
class Call:
    at: float
    tool: str
    arguments: str
    ok: bool
    ms: float
    result: str


class LiveView:
    """Tool-call timelines per episode (bounded) and the routes that show them."""

    def __init__(self, services: Services):
        self.services = services
        self.started_at: dict[str, float] = {}
        self.timelines: OrderedDict[str, deque[Call]] = OrderedDict()

    def record(self, episode: str, tool: str, arguments: dict[str, Any] | None, ok: bool, ms: float, result: str) -> None:
        timeline = self.timelines.get(episode)
        if timeline is None:
            timeline = self.timelines[episode] = deque(maxlen=TIMELINE_LIMIT)
            self.started_at[episode] = time.time()
            while len(self.timelines) > EPISODE_LIMIT:
                old, _ = self.timelines.popitem(last=False)
                self.started_at.pop(old, None)
        self.timelines.move_to_end(episode)
        shown = ", ".join(f"{k}={str(v)[:80]!r}" for k, v in (arguments or {}).items())[:300]
        timeline.append(Call(time.time(), tool, shown, ok, round(ms, 1), result[:300]))

    def forget(self, episode: str) -> None:
        self.timelines.pop(episode, None)
        self.started_at.pop(episode, None)

    # --- routes ---------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            Route("/live", self._page, methods=["GET"]),
            Route("/live/episodes", self._episodes, methods=["GET"]),
            Route("/live/episodes/{episode}/screenshot", self._screenshot, methods=["GET"]),
        ]

    async def _page(self, request: Request) -> Response:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})

    def _browser_state(self, episode: str) -> Any:
        pool = self.services._browsers
        return None if pool is None else pool.episodes.get(episode)

    async def _episodes(self, request: Request) -> Response:
        pool = self.services._browsers
        keys = list(self.timelines)
        if pool is not None:
            keys += [k for k in pool.episodes if k not in self.timelines]
        episodes = []
        for key in reversed(keys):
            state = self._browser_state(key)
            tabs = []
            if state is not None:
                for i, page in enumerate(list(state.pages)):
                    tabs.append({"url": page.url, "current": i == state.current})
            episodes.append(
                {
                    "episode": key,
                    "started": self.started_at.get(key),
                    "browser": state is not None,
                    "tabs": tabs,
                    "timeline": [asdict(c) for c in self.timelines.get(key, ())],
                }
            )
        return JSONResponse({"episodes": episodes, "now": time.time()}, headers={"Cache-Control": "no-store"})

    async def _screenshot(self, request: Request) -> Response:
        state = self._browser_state(request.path_params["episode"])
        if state is None or not state.pages:
            return JSONResponse({"error": "this episode has no open browser page"}, status_code=404)
        data = state.last_screenshot
        if data is None or time.monotonic() - state.last_screenshot_at > SCREENSHOT_MAX_AGE_S:
            try:  # no episode lock: the agent's actions are not held up by viewers
                data = await asyncio.wait_for(self.services.browsers.screenshot(state, kind="jpeg"), timeout=5)
            except Exception:
                if data is None:
                    return JSONResponse({"error": "the page could not be captured right now"}, status_code=503)
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-store"})


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>aworld GAIA environment: live view</title>
<style>
body { font-family: sans-serif; margin: 1em; background: #f4f4f4; }
.episode { display: flex; gap: 1em; background: white; margin-bottom: 1em; padding: 0.8em; border-radius: 6px; }
.frame { flex: 0 0 640px; }
.frame img { width: 640px; border: 1px solid #888; background: #ddd; min-height: 100px; }
.frame .url { font-size: 12px; color: #333; word-break: break-all; }
.timeline { flex: 1; max-height: 480px; overflow-y: auto; font-size: 13px; }
.timeline li.error { color: #b00; }
#status { color: #555; }
</style></head>
<body><h1>GAIA environment: live view</h1><p id="status">connecting...</p><div id="episodes"></div>
<script>
// the token is read from the fragment on every request: correcting it in the address bar (a
// fragment change does not reload the page) takes effect at the next refresh
const auth = () => ({headers: {'Authorization': 'Bearer ' + (new URLSearchParams(location.hash.slice(1)).get('token') || '')}});
let timer = null;
const cards = {};
function card(ep) {
  if (cards[ep]) return cards[ep];
  const div = document.createElement('div');
  div.className = 'episode'; div.dataset.episode = ep;
  div.innerHTML = '<div class="frame"><h3></h3><div class="url"></div><img alt="browser"></div>' +
                  '<div class="timeline"><h4>Tool calls</h4><ol></ol></div>';
  div.querySelector('h3').textContent = 'episode ' + ep;
  document.getElementById('episodes').appendChild(div);
  return cards[ep] = div;
}
async function shot(ep, div) {
  const r = await fetch('/live/episodes/' + encodeURIComponent(ep) + '/screenshot', auth());
  if (!r.ok) return;
  const img = div.querySelector('img');
  const old = img.src;
  img.src = URL.createObjectURL(await r.blob());
  if (old.startsWith('blob:')) URL.revokeObjectURL(old);
}
async function tick() {
  clearTimeout(timer);
  try {
    const r = await fetch('/live/episodes', auth());
    if (r.status === 401) {
      document.getElementById('status').textContent = 'unauthorized: open /live#token=<MCP_SERVER_TOKEN>';
      timer = setTimeout(tick, 1000);
      return;
    }
    const data = await r.json();
    document.getElementById('status').textContent = data.episodes.length + ' episode(s), updated ' + new Date().toLocaleTimeString();
    for (const ep of data.episodes) {
      const div = card(ep.episode);
      const tab = ep.tabs.find(t => t.current);
      div.querySelector('.url').textContent = tab ? tab.url : (ep.browser ? '(no page)' : '(no browser in this episode)');
      const ol = div.querySelector('ol');
      ol.innerHTML = '';
      for (const c of ep.timeline) {
        const li = document.createElement('li');
        li.className = c.ok ? 'ok' : 'error';
        li.textContent = new Date(c.at * 1000).toLocaleTimeString() + ' ' + c.tool + '(' + c.arguments + ') ' +
                         c.ms + ' ms' + (c.ok ? '' : ' error: ' + c.result);
        ol.appendChild(li);
      }
      if (ep.browser && ep.tabs.length) await shot(ep.episode, div);
    }
  } catch (e) { document.getElementById('status').textContent = 'error: ' + e; }
  timer = setTimeout(tick, 1000);
}
window.addEventListener('hashchange', tick);
tick();
</script></body></html>
"""
