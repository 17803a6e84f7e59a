"""Chromium as an unprivileged uid inside bubblewrap, with its own sandbox on.

The browser runs under the same rules as the code sandbox (:mod:`aworld_gaia_env.sandbox`): as root
the server gives it a uid of its own (``SANDBOX_UID_BASE - 1``, below every episode's uid), and
bubblewrap gives it fresh user, mount, pid, ipc, uts and cgroup namespaces whose root holds ``/usr``
and the few ``/etc`` files Chromium reads, read-only; a private HOME, the downloads directory and
Playwright's profile directory, read-write; a tmpfs ``/tmp`` and ``/dev/shm``; a new ``/proc``. No
workspace, no ``/work``, ``/root``, ``/var/run`` or host unix socket is in it.

Its network namespace is its own, with only a loopback of its own: Chromium can resolve and
connect to nothing. Every request a page makes is intercepted by Playwright's route handler
(:mod:`aworld_gaia_env.browser`), checked by the address policy and fetched by Playwright's driver
in the server's namespace; a WebSocket is relayed by the server after the same check. What
Chromium would do on its own -- background services, DNS prefetch and preconnect, DNS-over-HTTPS
probes, WebRTC -- has no way out, and is switched off besides (:func:`chromium_switches`, and the
profile preferences the launcher writes), so it is not even tried. There is no resolver
configuration in the box either.

Because Chromium is not root, its own sandbox is on: its renderers get a further user namespace (the
namespace sandbox; bubblewrap is not told ``--disable-userns``) and its seccomp-bpf filter.

Playwright still launches the browser (``--remote-debugging-pipe``: no debugging port anyone on the
host could connect to, and Playwright's routing, downloads and events behave exactly as before):
its ``executable_path`` is ``chromium_bwrap.sh``, which changes uid and execs bubblewrap with the
arguments written here (a root-only file), Playwright's profile directory and Chromium's command.
``SANDBOX_ISOLATION=audit``, the code sandbox's explicit opt-out, runs Chromium the old way, with a
warning in the log.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.sandbox import find_bwrap

LAUNCHER = Path(__file__).with_name("chromium_bwrap.sh")

ETC_READ = (
    "fonts", "ssl", "ca-certificates", "chromium", "chromium.d", "alternatives", "localtime",
    "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "mime.types", "os-release", "xdg",
)
"""What Chromium reads of ``/etc``: fonts, certificates, its own defaults, the loader. No
``resolv.conf`` or ``hosts``: it resolves nothing (its network namespace has no way out)."""

# Features off, beside Playwright's own list (the launcher merges the two --disable-features
# switches: Chromium honours only the last): translation and its language-model download, the
# browser's DNS-over-HTTPS and its probes, network time, optimization hints, media routing
DISABLED_FEATURES = (
    "Translate", "TranslateUI", "MediaRouter", "OptimizationHints", "DnsOverHttps", "NetworkTimeServiceQuerying",
    "AutofillServerCommunication", "CertificateTransparencyComponentUpdater", "InterestFeedContentSuggestions",
)


def chromium_switches(js_heap_mb: int) -> list[str]:
    """Chromium's switches on top of Playwright's: no background networking, no component or
    sync traffic, every host name resolved to nothing (a page's requests never need Chromium's
    resolver: the route handler fetches them), WebRTC without non-proxied UDP, the V8 heap cap."""
    return [
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-domain-reliability",
        "--no-pings",
        "--no-first-run",
        "--no-default-browser-check",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--disable-features=" + ",".join(DISABLED_FEATURES),
        f"--js-flags=--max-old-space-size={js_heap_mb}",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    ]

OTHER_READ = ("/var/cache/fontconfig",)
"""Read outside ``/usr`` and ``/etc`` (fontconfig's cache: without it every start rescans the fonts)."""


def browser_uid(uid_base: int) -> int | None:
    """The browser's uid: one below the episodes' uids when the server is root (None: keep ours)."""
    return uid_base - 1 if os.geteuid() == 0 else None


def missing_isolation() -> ToolError | None:
    """Why Chromium cannot be isolated here (None: it can)."""
    if find_bwrap() is None:
        return ToolError(
            "the browser runs inside bubblewrap: install the 'bubblewrap' package (apt-get install bubblewrap), "
            "or set SANDBOX_ISOLATION=audit to run it unisolated (trusted local use only)"
        )
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return ToolError("the browser drops to its own uid with setpriv: install util-linux (apt-get install util-linux)")
    return None


@dataclass
class IsolatedChromium:
    """The host side of one isolated Chromium: its directories, its bubblewrap arguments, its launcher."""

    base: Path  # root-owned 0711: holds the rest
    home: Path
    downloads: Path
    uid: int | None

    @classmethod
    def prepare(cls, uid: int | None) -> IsolatedChromium:
        base = Path(tempfile.mkdtemp(prefix="gaia-chromium-"))
        base.chmod(0o711)  # the browser's uid passes through to its own directories, lists nothing
        home = base / "home"
        downloads = base / "downloads"
        for path in (home, downloads):
            path.mkdir(mode=0o700)
            if uid is not None:
                os.chown(path, uid, uid)
        self = cls(base, home, downloads, uid)
        args = self.bwrap_args()
        fd = os.open(base / "bwrap.args", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"".join(arg.encode() + b"\0" for arg in args))
        shutil.copyfile(LAUNCHER, base / LAUNCHER.name)  # executable whatever the install kept of its mode
        (base / LAUNCHER.name).chmod(0o700)
        return self

    @property
    def launcher(self) -> str:
        return str(self.base / LAUNCHER.name)

    @staticmethod
    def unisolated_launcher(directory: Path) -> str:
        """The launcher for ``SANDBOX_ISOLATION=audit`` (it merges the switches, no bubblewrap),
        copied into ``directory`` so it is executable whatever the install kept of its mode."""
        target = directory / LAUNCHER.name
        shutil.copyfile(LAUNCHER, target)
        target.chmod(0o700)
        return str(target)

    def env(self, executable: str) -> dict[str, str]:
        """What the launcher reads (it removes these before Chromium starts)."""
        return {
            "AWORLD_BROWSER_EXECUTABLE": executable,
            "AWORLD_BROWSER_BWRAP_ARGS": str(self.base / "bwrap.args"),
            "AWORLD_BROWSER_UID": "" if self.uid is None else str(self.uid),
        }

    def bwrap_args(self) -> list[str]:
        """Everything but Playwright's profile and Chromium's command line (the launcher adds them)."""
        uid = os.getuid() if self.uid is None else self.uid
        argv = [
            "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net",
            "--hostname", "browser", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(uid), "--gid", str(uid),
            "--ro-bind", "/usr", "/usr",
        ]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/") / top
            if path.is_symlink():  # Debian's merged /usr
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                argv += ["--ro-bind", str(path), str(path)]
        for name in ETC_READ:
            if os.path.lexists(f"/etc/{name}"):
                argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for path in OTHER_READ:
            if os.path.isdir(path):
                argv += ["--ro-bind-try", path, path]
        argv += [
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp",
            "--bind", str(self.home), str(self.home),
            "--bind", str(self.downloads), str(self.downloads),
            "--chdir", str(self.home),
        ]
        return argv

    def cleanup(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
