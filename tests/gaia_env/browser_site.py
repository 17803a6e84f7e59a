"""A small web site on 127.0.0.1 for the browser tools: content rendered by JavaScript, a search
form, links across pages, a table behind a tab, a select, a popup, a file download, a page that
never finishes loading (an image that never arrives), a document that never arrives, a redirect, a huge page, cookies, and a page that tries WebRTC. The museum's pages hold a multi-hop question:
the height of the species whose exhibit Dr. Ada Frost donated (search -> item -> Measurements tab)."""

from __future__ import annotations

import asyncio
import html
import json
import socket
import threading
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

ITEMS = {
    "emperor": {"title": "Emperor penguin exhibit", "donor": "Dr. Ada Frost", "species": "Emperor penguin", "height": 122},
    "king": {"title": "King penguin exhibit", "donor": "Prof. Li Wei", "species": "King penguin", "height": 95},
    "adelie": {"title": "Adelie penguin exhibit", "donor": "M. Dupont", "species": "Adelie penguin", "height": 70},
}


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>")


async def home(request: Request) -> Response:
    return _page(
        "Polar Museum",
        """<div id="app">Loading...</div>
<script>setTimeout(() => { document.getElementById('app').innerHTML =
 '<h1>Polar Museum</h1><p>Rendered by script: welcome to the collection.</p>' +
 '<a href="/search">Search the catalogue</a> <a href="/options">Exhibit options</a> ' +
 '<a href="/popup">Open a leaflet</a>'; }, 300);</script>""",
    )


async def search(request: Request) -> Response:
    return _page(
        "Catalogue search",
        """<h1>Catalogue search</h1><form action="/results" method="get">
<label for="q">Donor or species</label><input id="q" name="q" placeholder="search"><button type="submit">Search</button></form>""",
    )


async def results(request: Request) -> Response:
    q = request.query_params.get("q", "").lower()
    hits = [{"id": k, "title": v["title"], "donor": v["donor"]} for k, v in ITEMS.items()
            if q and (q in v["donor"].lower() or q in v["species"].lower())]
    return _page(
        "Results",
        f"""<h1>Results</h1><ul id="hits"></ul><script>
const hits = {json.dumps(hits)};
document.getElementById('hits').innerHTML = hits.length ? hits.map(h =>
  '<li><a href="/item/' + h.id + '">' + h.title + '</a> (donated by ' + h.donor + ')</li>').join('') : '<li>No results</li>';
</script>""",
    )


async def item(request: Request) -> Response:
    data = ITEMS.get(request.path_params["id"])
    if data is None:
        return _page("Not found", "<p>No such item</p>")
    return _page(
        data["title"],
        f"""<h1>{html.escape(data['title'])}</h1>
<div role="tablist"><button role="tab" id="t1" onclick="show('overview')">Overview</button>
<button role="tab" id="t2" onclick="show('measurements')">Measurements</button></div>
<div id="overview"><p>Donated by {html.escape(data['donor'])}.</p></div>
<div id="measurements" style="display:none"><table><tr><th>Species</th><th>Height (cm)</th></tr>
<tr><td>{data['species']}</td><td>{data['height']}</td></tr></table></div>
<p><a href="/files/{request.path_params['id']}.csv">Download the measurements (CSV)</a></p>
<script>function show(id) {{ for (const p of ['overview', 'measurements'])
  document.getElementById(p).style.display = p === id ? 'block' : 'none'; }}</script>""",
    )


async def csv_file(request: Request) -> Response:
    key = request.path_params["id"]
    data = ITEMS[key]
    body = f"species,height_cm\n{data['species']},{data['height']}\n"
    return Response(body, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{key}.csv"'})


async def options(request: Request) -> Response:
    return _page(
        "Exhibit options",
        """<select id="hall" onchange="document.getElementById('out').textContent = 'Hall chosen: ' + this.value">
<option value="">pick</option><option value="north">North hall</option><option value="south">South hall</option></select>
<p id="out">Hall chosen: none</p><div style="height: 5000px">tall spacer</div><p id="bottom">Bottom of the options page</p>""",
    )


async def popup(request: Request) -> Response:
    return _page("Leaflet", '<a href="/item/king" target="_blank">King penguin leaflet in a new tab</a>')


async def slow(request: Request) -> Response:
    # the document arrives; an image on it never does, so the page never finishes loading
    return _page("Slow page", '<p>partial content arrived</p><img src="/hang.png">')


async def hang(request: Request) -> Response:
    async def body():  # headers, then nothing, forever
        while True:
            await asyncio.sleep(3600)
            yield b""

    return StreamingResponse(body(), media_type="image/png")


async def huge(request: Request) -> Response:
    rows = "".join(f"<p>line {i} of the huge page with filler text</p>" for i in range(120_000))
    return _page("Huge page", rows + "<a href='/'>home</a>" * 2000)


async def many(request: Request) -> Response:
    n = int(request.path_params["n"])
    return _page(f"Page {n}", f'<p>page number {n}</p><a href="/many/{n + 1}">next</a>')


async def cookie_set(request: Request) -> Response:
    value = request.query_params.get("v", "x")
    return _page("Set cookie", f"<p>set</p><script>document.cookie = 'secret={value}; path=/';</script>")


async def cookie_show(request: Request) -> Response:
    return _page("Cookies", "<p id='c'></p><script>document.getElementById('c').textContent = 'cookies: [' + document.cookie + ']';</script>")


async def probe(request: Request) -> Response:
    target = request.query_params["target"]
    return _page(
        "Probe",
        f"""<p id="r">probing</p><script>
fetch({json.dumps(target)}).then(() => {{ document.getElementById('r').textContent = 'probe reached'; }})
  .catch(() => {{ document.getElementById('r').textContent = 'probe blocked'; }});</script>""",
    )


async def webrtc(request: Request) -> Response:
    """Tries WebRTC to the STUN (UDP) and TURN (TCP) ports given, from the page and from a new iframe."""
    stun, turn = int(request.query_params["stun"]), int(request.query_params["turn"])
    config = {"iceServers": [{"urls": f"stun:127.0.0.1:{stun}"},
                             {"urls": f"turn:127.0.0.1:{stun}?transport=udp", "username": "u", "credential": "p"},
                             {"urls": f"turn:127.0.0.1:{turn}?transport=tcp", "username": "u", "credential": "p"}]}
    return _page(
        "WebRTC",
        f"""<p id="r">trying</p><script>
const out = [];
function attempt(where, win) {{
  try {{
    const pc = new win.RTCPeerConnection({json.dumps(config)});
    pc.createDataChannel('x');
    pc.createOffer().then(o => pc.setLocalDescription(o));
    out.push(where + ' made a peer connection');
  }} catch (e) {{ out.push(where + ' has no WebRTC'); }}
}}
attempt('page', window);
const f = document.createElement('iframe');
document.body.appendChild(f);
attempt('iframe', f.contentWindow);
setTimeout(() => {{ document.getElementById('r').textContent = 'webrtc done: ' + out.join(', '); }}, 2500);
</script>""",
    )


async def vanish(request: Request) -> Response:
    """A button that removes itself when clicked (its reference goes stale), and one that stays."""
    return _page(
        "Vanishing",
        """<p id="state">both here</p>
<button onclick="this.remove(); document.getElementById('state').textContent = 'one left'">Hide me</button>
<button onclick="document.getElementById('state').textContent = 'still here'">Stay</button>""",
    )


async def redirect(request: Request) -> Response:
    return Response(status_code=302, headers={"Location": request.query_params["to"]})


LEAK_NAMES = ("dns-prefetch.leak-test.example", "preconnect.leak-test.example", "prefetch.leak-test.example",
              "img.leak-test.example", "fetch.leak-test.example", "ws.leak-test.example", "stun.leak-test.example")
"""Names the leaky page asks Chromium to resolve or reach, each by another channel."""


async def leaky(request: Request) -> Response:
    """Everything a page can do to make the browser resolve or connect on its own: DNS prefetch,
    preconnect, prefetch, an image, a fetch, WebRTC to a STUN server, WebSockets to this site
    (allowed: it must echo), to a public name and to a private address."""
    ws_site = f"ws://127.0.0.1:{request.url.port}/ws"
    return HTMLResponse(f"""<!doctype html><html><head><title>Leaky</title>
<link rel="dns-prefetch" href="//dns-prefetch.leak-test.example">
<link rel="preconnect" href="http://preconnect.leak-test.example">
<link rel="prefetch" href="http://prefetch.leak-test.example/next.html">
</head><body><p id="r">trying</p>
<a href="http://anchor.leak-test.example/">a link elsewhere</a>
<img src="http://img.leak-test.example/x.png">
<script>
const out = {{}};
try {{
  const pc = new RTCPeerConnection({{iceServers: [{{urls: 'stun:stun.leak-test.example:3478'}}]}});
  pc.createDataChannel('x');
  pc.createOffer().then(o => pc.setLocalDescription(o));
  out.rtc = 'WebRTC ran';
}} catch (e) {{ out.rtc = 'no WebRTC'; }}
out.fetch = 'pending';
fetch('http://fetch.leak-test.example/').then(() => {{ out.fetch = 'reached'; }}, () => {{ out.fetch = 'blocked'; }});
function socket(name, url) {{
  out[name] = 'pending';
  let ws;
  try {{ ws = new WebSocket(url); }} catch (e) {{ out[name] = 'refused at once'; return; }}
  ws.onopen = () => ws.send('ping');
  ws.onmessage = (m) => {{ out[name] = 'got ' + m.data; ws.close(); }};
  ws.onerror = () => {{ if (out[name] === 'pending') out[name] = 'failed'; }};
  ws.onclose = () => {{ if (out[name] === 'pending') out[name] = 'closed'; }};
}}
socket('wsSite', {json.dumps(ws_site)});
socket('wsPublic', 'ws://ws.leak-test.example/chat');
socket('wsPrivate', 'ws://10.20.30.40:8080/');
const started = Date.now();
const finish = setInterval(() => {{  // when every attempt has settled (or after 20 s)
  if (Object.values(out).includes('pending') && Date.now() - started < 20000) return;
  clearInterval(finish);
  document.getElementById('r').textContent = 'leaky done ' + JSON.stringify(out, Object.keys(out).sort());
}}, 100);
</script></body></html>""")


async def ws_echo(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            await websocket.send_text("echo:" + await websocket.receive_text())
    except WebSocketDisconnect:
        pass


class BrowserSite:
    """The site, served by uvicorn from a thread on a free loopback port."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[
            Route("/", home), Route("/search", search), Route("/results", results), Route("/item/{id}", item),
            Route("/files/{id}.csv", csv_file), Route("/options", options), Route("/popup", popup),
            Route("/slow", slow), Route("/hang.png", hang), Route("/huge", huge), Route("/many/{n}", many),
            Route("/cookie/set", cookie_set), Route("/cookie/show", cookie_show), Route("/probe", probe), Route("/redirect", redirect),
            Route("/webrtc", webrtc), Route("/leaky", leaky), WebSocketRoute("/ws", ws_echo),
            Route("/vanish", vanish),
        ])
        self.port = 0
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BrowserSite:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False,
                                                     timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[sock])), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the browser test site did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
