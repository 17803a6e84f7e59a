"""One browser session of the GAIA environment against a page that tries every way to make
Chromium resolve or connect on its own, run by ``test_browser_network.py`` as a separate process
under ``scripts/offline-run.sh --trace`` (a namespace with only lo, every network system call of
every process traced). Writes what the agent saw and where each Chromium process's network is.

    python tests/gaia_env/browser_network_probe.py OUT.json
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from gaia_env.browser_site import BrowserSite  # noqa: E402
from gaia_env.conftest import connect, in_process_env, text_of  # noqa: E402


def chromium_processes() -> dict[int, dict[str, object]]:
    """Each Chromium process below this one: its network namespace and the interfaces in it."""
    found: dict[int, dict[str, object]] = {}
    ours = os.readlink("/proc/self/ns/net")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if "chromium" not in os.readlink(f"/proc/{entry}/exe"):
                continue
            netns = os.readlink(f"/proc/{entry}/ns/net")
            lines = Path(f"/proc/{entry}/net/dev").read_text().splitlines()[2:]
        except OSError:
            continue
        argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        found[int(entry)] = {
            "own_netns": netns != ours,
            "interfaces": sorted(line.split(":")[0].strip() for line in lines),
            # the browser process keeps its argv (its children rewrite theirs as one string)
            "switches": [a.decode() for a in argv if a.startswith(b"--")] if b"--type=" not in b" ".join(argv) else None,
        }
    return found


class ThreadWatch:
    """Every thread of every process seen while the session runs -> its program, from /proc every
    50 ms: the trace's files are named by thread id, and a thread that never exec'd (Chromium's
    zygote children, threads in a pid namespace strace could not translate) is named here."""

    def __init__(self) -> None:
        self.programs: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _scan(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or entry in self.programs:
                continue
            try:
                exe = os.readlink(f"/proc/{entry}/exe")
                tids = os.listdir(f"/proc/{entry}/task")
            except OSError:
                continue
            for tid in tids:
                self.programs.setdefault(tid, exe)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._scan()
            self._stop.wait(0.05)

    def __enter__(self) -> ThreadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._scan()


async def session(site: BrowserSite, out: dict[str, object]) -> None:
    with in_process_env(servers="browser", allowed_hosts=f"127.0.0.1:{site.port}", browser_action_timeout_s=30) as env:
        async with connect(env, episode="ep-leak") as client:
            opened = await client.call_tool("browser__open", {"url": site.base + "/leaky"})
            out["open"] = [text_of(opened), opened.is_error]
            done = await client.call_tool("browser__wait_for_text", {"text": "leaky done", "timeout_s": 30})
            out["leaky"] = [text_of(done), done.is_error]
            out["chromium"] = {str(pid): info for pid, info in chromium_processes().items()}
            for name, target in (("private_name", "http://intranet.leak-test.internal/"),
                                 ("private_ip", "http://10.1.2.3/"),
                                 ("public_name", "http://public.leak-test.example/")):
                result = await client.call_tool("browser__open", {"url": f"{site.base}/redirect?to={target}"})
                out[name] = [text_of(result), result.is_error]
            await asyncio.sleep(1.0)  # anything Chromium queued in the background has gone by now


def main(path: str) -> None:
    out: dict[str, object] = {}
    site = BrowserSite().start()
    try:
        with ThreadWatch() as watch:
            asyncio.run(session(site, out))
        out["programs"] = watch.programs
    finally:
        site.stop()
    Path(path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
