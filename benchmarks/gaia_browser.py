"""The GAIA environment's browser: latency per action, concurrent episodes per core, memory per episode.

Serves a small site on 127.0.0.1 (a page rendered by JavaScript with links and a form), starts the
GAIA environment in this process (uvicorn in a thread, Debian's Chromium through Playwright, the
site allowed with GAIA_ENV_ALLOWED_HOSTS) and drives it with the official MCP client:

  * per action p50/p90 (open, read_page, click, type+submit, screenshot), next to the baseline
    readweb__read_webpage (an HTTP fetch + text, no browser) of the same page in the same run;
  * 1, 2, 4, 8 concurrent episodes each looping open -> click for --seconds: actions/s in all and
    per core, and the resident memory of Chromium's processes per open episode.

    .venv/bin/python benchmarks/gaia_browser.py [--runs 20] [--seconds 10]

Figures only; nothing here is asserted (benchmarks are not tests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

PAGE = """<!doctype html><html><head><title>Bench {n}</title></head><body><div id="app"></div>
<form action="/page/{next}"><input name="q" placeholder="query"><button>Go</button></form>
<script>document.getElementById('app').innerHTML = '<h1>Page {n}</h1>' +
  Array.from({{length: 40}}, (_, i) => '<p>paragraph ' + i + ' of page {n}</p>').join('') +
  '<a href="/page/{next}">next page</a>';</script></body></html>"""


def start_site() -> int:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    async def page(request: Request) -> HTMLResponse:
        n = int(request.path_params["n"])
        return HTMLResponse(PAGE.format(n=n, next=n + 1))

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/page/{n}", page)]), log_level="warning", access_log=False))
    threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return sock.getsockname()[1]


def chromium_pss_mb() -> float:
    """Proportional set size (shared pages split between sharers) of every Chromium process on the host."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            if "chromium" not in exe:
                continue
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:")) * 1024
        except OSError:
            continue
    return total / 2**20


def ref(text: str, label: str) -> str:
    import re

    for line in text.splitlines():
        match = re.match(r"\s+\[(e\d+)\] (.*)", line)
        if match and label in match.group(2):
            return match.group(1)
    raise RuntimeError(f"{label!r} not on the page:\n{text[:500]}")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def per_action(env: Any, base: str, runs: int) -> dict[str, list[float]]:
    from gaia_env.conftest import connect, text_of

    times: dict[str, list[float]] = {k: [] for k in ("readweb (baseline)", "open", "read_page", "click", "type+submit", "screenshot")}
    async with connect(env, episode="bench-actions") as client:
        await client.call_tool("browser__open", {"url": f"{base}/page/0"})  # Chromium's start is not an action

        async def timed(name: str, tool: str, args: dict[str, Any]) -> str:
            started = time.perf_counter()
            result = await client.call_tool(tool, args)
            times[name].append((time.perf_counter() - started) * 1e3)
            if result.is_error:
                raise RuntimeError(text_of(result))
            return text_of(result)

        for i in range(runs):
            await timed("readweb (baseline)", "readweb__read_webpage", {"url": f"{base}/page/{i}"})
            page = await timed("open", "browser__open", {"url": f"{base}/page/{i}"})
            await timed("read_page", "browser__read_page", {})
            await timed("click", "browser__click", {"ref": ref(page, "next page")})
            page = text_of(await client.call_tool("browser__read_page", {}))
            await timed("type+submit", "browser__type", {"ref": ref(page, "query"), "text": "x", "submit": True})
            await timed("screenshot", "browser__screenshot", {})
    return times


async def concurrent(env: Any, base: str, episodes: int, seconds: float) -> tuple[int, float]:
    from gaia_env.conftest import connect, text_of

    done = 0
    peak = 0.0
    stop = time.monotonic() + seconds

    async def worker(k: int) -> None:
        nonlocal done
        async with connect(env, episode=f"bench-c{episodes}-{k}") as client:
            i = 0
            while time.monotonic() < stop:
                page = text_of(await client.call_tool("browser__open", {"url": f"{base}/page/{i}"}))
                await client.call_tool("browser__click", {"ref": ref(page, "next page")})
                done += 2
                i += 1

    async def sample() -> None:
        nonlocal peak
        while time.monotonic() < stop:
            peak = max(peak, chromium_pss_mb())
            await asyncio.sleep(0.5)

    await asyncio.gather(sample(), *(worker(k) for k in range(episodes)))
    for k in range(episodes):
        await end_episode(env, f"bench-c{episodes}-{k}")
    return done, peak


async def end_episode(env: Any, episode: str) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.delete(f"{env.base}/workspaces/{episode}", headers={"Authorization": f"Bearer {env.token}"}):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--episodes", default="1,2,4,8")
    args = parser.parse_args()
    from gaia_env.conftest import in_process_env

    port = start_site()
    base = f"http://127.0.0.1:{port}"
    cores = len(os.sched_getaffinity(0))
    with in_process_env(servers="browser,readweb", allowed_hosts=f"127.0.0.1:{port}", browser_max_pages=100_000,
                        browser_max_episodes=64) as env:
        times = asyncio.run(per_action(env, base, args.runs))
        one = chromium_pss_mb()
        asyncio.run(end_episode(env, "bench-actions"))
        time.sleep(1)
        idle = chromium_pss_mb()
        print(f"per action through the MCP endpoint, {args.runs} runs (ms):")
        print(f"  {'action':<20} {'p50':>8} {'p90':>8}")
        for name, values in times.items():
            print(f"  {name:<20} {statistics.median(values):8.1f} {pct(values, 0.9):8.1f}")
        print(f"\nconcurrent episodes, {args.seconds:g} s each, open+click loop; {cores} cores; Chromium PSS: "
              f"{one:.0f} MB with one episode open, {idle:.0f} MB with none")
        print(f"  {'episodes':>8} {'actions/s':>10} {'per core':>9} {'Chromium PSS peak':>18} {'per episode':>12}")
        for n in (int(x) for x in args.episodes.split(",")):
            done, peak = asyncio.run(concurrent(env, base, n, args.seconds))
            rate = done / args.seconds
            print(f"  {n:>8} {rate:10.1f} {rate / cores:9.1f} {peak:15.0f} MB {(peak - idle) / n:9.0f} MB")


if __name__ == "__main__":
    main()
