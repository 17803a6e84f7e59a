"""Attacks on the GAIA environment as model-written code would make them, against the real server.

The server is started with its CLI as a deployment might be (run as root, ``--token`` on its command
line, an API key in its environment, a world-readable ``.env`` and its log file beside it) and is
driven through the official MCP client. Each class of attack from issue 17 has a test here: host
unix sockets, the symlink-swap race on every root-side file tool, cross-episode reads, the server's
secrets, the workspace quota, the seccomp filter, the network and kill attempts. Fork and memory
bombs, infinite loops and output floods are in ``test_sandbox.py``.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import io
import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from gaia_env.conftest import RunningEnv, _read_lines, _wait_healthy, call, connect, text_of, upload

PY = "intelligence-code__run_python"
SH = "terminal__run_command"
TOKEN = "attack-token-" + "q" * 32
ENV_KEY = "tavily-key-from-the-environment-7f3a"
FILE_KEY = "jina-key-from-the-env-file-91c2"
MARKER = "HOST-ONLY-SECRET-5d1e"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the deployment under attack runs as root")


@pytest.fixture(scope="module")
def attacked(fakes) -> Iterator[RunningEnv]:
    """The environment as deployed: root, token in argv, key in env, readable .env and log beside it."""
    home = Path(tempfile.mkdtemp(prefix="gaia-attack-"))
    os.chmod(home, 0o755)
    env_file = home / ".env"
    env_file.write_text(f"JINA_API_KEY={FILE_KEY}\n")
    os.chmod(env_file, 0o644)  # as the documented setup used to leave it
    log = open(home / "server.log", "w")
    os.chmod(home / "server.log", 0o644)
    env = {k: v for k, v in os.environ.items() if k not in ("MCP_SERVER_TOKEN", "GAIA_ENV_SERVERS")}
    env.update(fakes.env())
    env.update(
        {
            "TAVILY_API_KEY": ENV_KEY,
            "GAIA_ENV_ALLOW_PRIVATE_URLS": "true",
            "GAIA_ENV_WORKSPACE_QUOTA_MB": "32",
            "SANDBOX_TIMEOUT_S": "40",
            "SANDBOX_CPU_S": "40",
            "SANDBOX_MEMORY_MB": "768",
            "SANDBOX_MAX_PROCESSES": "24",
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "aworld_gaia_env", "serve", "--port", "0", "--workspace", str(home / "ws"),
         "--token", TOKEN, "--env-file", str(env_file), "--log-level", "INFO"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
        cwd=home,
    )
    try:
        info = json.loads(_read_lines(proc, 3, timeout=60)[0])
        running = RunningEnv(
            url=f"http://{info['ip']}:{info['port']}/mcp", token=info["token"], ip=info["ip"], port=info["port"],
            workspace_root=home / "ws", proc=proc,
        )
        running.home = home  # type: ignore[attr-defined]
        _wait_healthy(running.base)
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


async def _py(env: RunningEnv, code: str, episode: str, **kw) -> str:
    text, err = await call(env, PY, {"code": code, **kw}, episode=episode)
    assert not err, text
    return text


async def _sh(env: RunningEnv, command: str, episode: str, **kw) -> str:
    text, err = await call(env, SH, {"command": command, **kw}, episode=episode)
    assert not err, text
    return text


async def _alive(env: RunningEnv) -> None:
    assert "42" in await _py(env, "print(6 * 7)", "ep-alive")


# ---------------------------------------------------------------------------------------------
# 1. host unix sockets (the PostgreSQL COPY ... TO PROGRAM escape)
# ---------------------------------------------------------------------------------------------


class _UnixServer:
    """A world-connectable unix socket on the host (file system and abstract) that counts connections."""

    def __init__(self, directory: Path):
        directory.mkdir(mode=0o777, exist_ok=True)
        os.chmod(directory, 0o777)
        self.path = str(directory / "host.sock")
        self.abstract = f"\0aworld-attack-{os.getpid()}"
        self.accepted = 0
        self.sockets = []
        for address in (self.path, self.abstract):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(address)
            server.listen(8)
            server.settimeout(0.2)
            self.sockets.append(server)
        os.chmod(self.path, 0o777)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            for server in self.sockets:
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                self.accepted += 1
                conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        for server in self.sockets:
            server.close()


async def test_host_unix_sockets_are_unreachable(attacked):
    host = _UnixServer(Path(tempfile.mkdtemp(prefix="aworld-sock-")))
    try:
        connect_code = (
            "import socket\n"
            f"for address in ({host.path!r}, {host.abstract!r}):\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n"
            "        s.connect(address)\n"
            "        print('CONNECTED', repr(address))\n"
            "    except OSError as exc:\n"
            "        print('refused', type(exc).__name__, exc)\n"
        )
        # the sandboxed interpreter, a child interpreter (no audit hook there) and the shell
        text = await _py(attacked, connect_code, "ep-sock")
        child = f"import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {connect_code!r}], capture_output=True, text=True).stdout)"
        text += await _py(attacked, child, "ep-sock")
        text += await _sh(attacked, f"python3 -c {shlex.quote(connect_code)}; ls -la {host.path} /run /var/run 2>&1", "ep-sock")
        pg = "/var/run/postgresql"
        text += await _sh(attacked, f"ls {pg} 2>&1; psql -h {pg} -c 'select 1' 2>&1 | head -2", "ep-sock")
        assert "CONNECTED" not in text and text.count("refused") >= 6
        assert host.accepted == 0
        assert "No such file or directory" in text
    finally:
        host.close()
        shutil.rmtree(Path(host.path).parent, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# 2. the symlink-swap race on every root-side file tool
# ---------------------------------------------------------------------------------------------


def _documents(text: str) -> dict[str, bytes]:
    """One file per document reader, each holding ``text``."""
    import docx
    import openpyxl
    from fpdf import FPDF
    from pptx import Presentation

    out: dict[str, bytes] = {"secret.txt": text.encode(), "secret.csv": f"col\n{text}\n".encode()}
    book = openpyxl.Workbook()
    book.active["A1"] = text
    buffer = io.BytesIO()
    book.save(buffer)
    out["secret.xlsx"] = buffer.getvalue()
    document = docx.Document()
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    out["secret.docx"] = buffer.getvalue()
    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = text
    buffer = io.BytesIO()
    deck.save(buffer)
    out["secret.pptx"] = buffer.getvalue()
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.multi_cell(0, 10, text)
    out["secret.pdf"] = bytes(pdf.output())
    out["secret.png"] = b"\x89PNG\r\n\x1a\n" + text.encode() * (1 if text != MARKER else 4000)  # host: ~84 kB
    out["secret.wav"] = b"RIFF" + text.encode() * (1 if text != MARKER else 3000)
    return out


RACER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.symlink({target!r}, 'link')
swaps = 0
while not os.path.exists('stop'):
    # RENAME_EXCHANGE: 'rd' is the real directory, then the link to the host directory, never absent
    if libc.renameat2(-100, b'rd', -100, b'link', 2) != 0:
        raise OSError(ctypes.get_errno(), 'renameat2')
    swaps += 1
print('swaps', swaps)
"""

TOOLS = [
    ("documents-txt__read_text", {"path": "rd/secret.txt"}),
    ("documents-csv__read_csv", {"path": "rd/secret.csv"}),
    ("documents-xlsx__read_excel", {"path": "rd/secret.xlsx"}),
    ("documents-docx__read_docx", {"path": "rd/secret.docx"}),
    ("documents-pptx__read_pptx", {"path": "rd/secret.pptx"}),
    ("documents-pdf__read_pdf", {"path": "rd/secret.pdf"}),
    ("documents-txt__list_files", {"directory": "rd"}),
    ("documents-txt__list_files", {"directory": "."}),
    ("media-image__ask_image", {"path": "rd/secret.png", "question": "what is it?"}),
    ("media-audio__transcribe", {"path": "rd/secret.wav"}),
]


@pytest.mark.slow
async def test_symlink_swap_race_on_every_root_side_file_tool(attacked, fakes):
    episode = "ep-race"
    # the host side: a root-only directory with the same file names, holding the marker
    secret_dir = attacked.home / "rootonly"  # type: ignore[attr-defined]
    secret_dir.mkdir(mode=0o700)
    for name, data in _documents(MARKER).items():
        (secret_dir / name).write_bytes(data)
        os.chmod(secret_dir / name, 0o600)
    (secret_dir / "host-only-name.bin").write_bytes(b"x" * 123457)
    before = sorted(os.listdir(secret_dir))
    host_wav = len(_documents(MARKER)["secret.wav"])
    for name, data in _documents("decoy").items():
        await upload(attacked, episode, f"rd/{name}", data)
    racer = asyncio.ensure_future(call(attacked, PY, {"code": RACER.format(target=str(secret_dir)), "timeout_s": 40}, episode=episode))
    outcomes = {"read": 0, "link refused": 0}
    try:
        await asyncio.sleep(1.0)  # the racer is swapping
        async with connect(attacked, episode=episode) as client, aiohttp.ClientSession() as http:
            for round_ in range(20):
                for tool, arguments in TOOLS:
                    result = await client.call_tool(tool, arguments)
                    text = text_of(result)
                    assert MARKER not in text and "host-only-name" not in text and "123457" not in text, (tool, text)
                    assert f"({host_wav} bytes)" not in text  # the transcript of the host's file
                    outcomes["link refused" if "symbolic link" in text else "read"] += 1
                # root-side writes through the swapped directory: upload and download
                async with http.put(
                    f"{attacked.base}/workspaces/{episode}/files/rd/up-{round_}.bin", data=b"u",
                    headers={"Authorization": f"Bearer {attacked.token}"},
                ) as response:
                    assert response.status in (201, 400)
                result = await client.call_tool(
                    "download__download_file", {"url": f"{fakes.base}/web/article.html", "filename": f"rd/dl-{round_}.html"}
                )
    finally:
        await upload(attacked, episode, "stop", b"")
        swapped, _ = await racer
    assert "swaps" in swapped and int(swapped.split("swaps")[1].split()[0]) > 1000, swapped
    print(f"symlink race: {outcomes}, {swapped.split('swaps')[1].split()[0]} swaps")
    assert outcomes["link refused"] > 0 and outcomes["read"] > 0, outcomes  # both states were hit
    assert sorted(os.listdir(secret_dir)) == before  # nothing was written into the host directory
    for request in fakes.seen("/llm/v1/chat"):
        body = request["body"].decode("utf-8", "replace")
        if "data:image" in body:
            data = json.loads(body)["messages"][-1]["content"][1]["image_url"]["url"].split(",", 1)[1]
            assert MARKER.encode() not in base64.b64decode(data)


# ---------------------------------------------------------------------------------------------
# 3. cross-episode reads
# ---------------------------------------------------------------------------------------------


async def test_one_episode_cannot_read_another(attacked):
    await _py(attacked, f"open('diary.txt', 'w').write({MARKER!r})", "ep-victim")
    victim = attacked.workspace_root / "ep-victim"
    assert (victim / "diary.txt").read_text() == MARKER
    text = await _py(
        attacked,
        f"import os\nfor p in ({str(victim / 'diary.txt')!r}, '../ep-victim/diary.txt'):\n"
        "    try:\n        print(open(p).read())\n    except OSError as exc:\n        print('denied', exc)\n"
        f"print(os.listdir('..'))\nprint(os.getuid())",
        "ep-thief",
    )
    text += await _sh(attacked, f"cat ../ep-victim/diary.txt {victim}/diary.txt; ls -la .. {attacked.workspace_root}; "
                                "find / -name diary.txt 2>/dev/null", "ep-thief")
    assert MARKER not in text and text.count("No such file or directory") >= 4
    for path in ("../ep-victim/diary.txt", str(victim / "diary.txt")):
        result, err = await call(attacked, "documents-txt__read_text", {"path": path}, episode="ep-thief")
        assert err and "outside the workspace" in result and MARKER not in result
    # on the host too: each workspace is 0700 and owned by its own episode's uid
    thief = attacked.workspace_root / "ep-thief"
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o700 and stat.S_IMODE(os.stat(thief).st_mode) == 0o700
    assert os.stat(victim).st_uid != os.stat(thief).st_uid
    assert stat.S_IMODE(os.stat(attacked.workspace_root).st_mode) == 0o700 and os.stat(attacked.workspace_root).st_uid == 0


# ---------------------------------------------------------------------------------------------
# 4. the server's token, argv, environment, log and the files beside it
# ---------------------------------------------------------------------------------------------


async def test_server_secrets_are_out_of_reach(attacked):
    home = attacked.home  # type: ignore[attr-defined]
    assert attacked.token == TOKEN
    code = (
        "import os\n"
        "found = []\n"
        "for pid in os.listdir('/proc'):\n"
        "    for part in ('cmdline', 'environ'):\n"
        "        try:\n"
        "            found.append(open(f'/proc/{pid}/{part}', 'rb').read().decode('utf-8', 'replace'))\n"
        "        except OSError:\n"
        "            pass\n"
        f"for path in ({str(home / '.env')!r}, {str(home / 'server.log')!r}, '/etc/shadow'):\n"
        "    try:\n"
        "        found.append(open(path).read())\n"
        "    except OSError as exc:\n"
        "        print('denied', path, exc)\n"
        "print('\\n'.join(found))\n"
        "print(dict(os.environ))\n"
        "print(len([p for p in os.listdir('/proc') if p.isdigit()]), 'processes visible')\n"
    )
    text = await _py(attacked, code, "ep-snoop")
    text += await _sh(attacked, f"cat /proc/*/cmdline /proc/*/environ | tr '\\0' ' '; env; ls -la {home} 2>&1; "
                                f"cat {home}/.env {home}/server.log 2>&1; grep -rs {TOKEN[:12]} /etc /tmp /run /proc/[0-9]*/environ 2>/dev/null | head", "ep-snoop")
    for secret in (TOKEN, ENV_KEY, FILE_KEY):
        assert secret not in text
    assert text.count("denied") == 3 and "No such file or directory" in text
    visible = int(text.split(" processes visible")[0].rsplit("\n", 1)[-1])
    assert visible <= 4  # bwrap's init, the interpreter: its own pid namespace
    # the log beside the server masks the token; the setup problems are named in it
    await call(attacked, "documents-txt__read_text", {"path": f"{TOKEN}/{ENV_KEY}.txt"}, episode="ep-snoop")
    log = (home / "server.log").read_text()
    assert TOKEN not in log and ENV_KEY not in log and "***" in log
    assert "/proc/<pid>/cmdline" in log  # --token warns
    assert "readable by other users" in log and ".env" in log  # the world-readable --env-file warns


# ---------------------------------------------------------------------------------------------
# 5. the workspace quota
# ---------------------------------------------------------------------------------------------


async def test_workspace_quota_holds(attacked):
    code = (
        "import os\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(12):\n"
        "        with open(f'blob{i}', 'wb') as f:\n"
        "            f.write(os.urandom(16 * 2**20))\n"
        "        written += 16\n"
        "except OSError as exc:\n"
        "    print('stopped after', written, 'MB:', exc)\n"
        "    raise\n"
    )
    text = await _py(attacked, code, "ep-fill")
    assert "No space left on device" in text and "GAIA_ENV_WORKSPACE_QUOTA_MB" in text
    assert int(text.split("stopped after ")[1].split()[0]) <= 32
    usage = shutil.disk_usage(attacked.workspace_root / "ep-fill")
    assert usage.total == 32 * 2**20
    text = await _sh(attacked, "head -c 64M /dev/zero > more.bin; df -m . | tail -1", "ep-fill")
    assert "No space left on device" in text
    # root-side writes are capped too, and the neighbour is unaffected
    async with aiohttp.ClientSession() as http:
        async with http.put(f"{attacked.base}/workspaces/ep-fill/files/up.bin", data=b"x" * 2**20,
                            headers={"Authorization": f"Bearer {attacked.token}"}) as response:
            assert response.status == 400 and "workspace is full" in await response.text()
    assert "ok" in await _py(attacked, "open('x', 'wb').write(b'y' * 2**20); print('ok')", "ep-neighbour")
    # DELETE ends the episode: its tmpfs is unmounted and the directory removed
    async with aiohttp.ClientSession() as http:
        async with http.delete(f"{attacked.base}/workspaces/ep-fill", headers={"Authorization": f"Bearer {attacked.token}"}) as response:
            assert response.status == 204
    assert not (attacked.workspace_root / "ep-fill").exists()


# ---------------------------------------------------------------------------------------------
# 6. what namespaces do not cover: the seccomp filter
# ---------------------------------------------------------------------------------------------


async def test_seccomp_refuses_kernel_interfaces(attacked):
    code = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    'ptrace': (101, 0, 0, 0, 0), 'mount': (165, 0, 0, 0, 0), 'unshare-user': (272, 0x10000000, 0, 0, 0),
    'setns': (308, 0, 0, 0, 0), 'keyctl': (250, 0, 0, 0, 0), 'bpf': (321, 0, 0, 0, 0),
    'perf_event_open': (298, 0, 0, -1, -1), 'io_uring_setup': (425, 8, 0, 0, 0), 'userfaultfd': (323, 0, 0, 0, 0),
    'open_by_handle_at': (304, 0, 0, 0, 0), 'clone-newuser': (56, 0x10000000 | 17, 0, 0, 0),
    'ioctl-TIOCSTI': (16, 0, 0x5412, 0, 0), 'kexec_load': (246, 0, 0, 0, 0), 'init_module': (175, 0, 0, 0, 0),
}
for name, (nr, *args) in calls.items():
    result = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, result, errno.errorcode.get(ctypes.get_errno()))
"""
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers in this test are x86_64's")
    text = await _py(attacked, code, "ep-seccomp")
    lines = [line for line in text.splitlines() if line and line.split()[0] in (
        "ptrace", "mount", "unshare-user", "setns", "keyctl", "bpf", "perf_event_open", "io_uring_setup", "userfaultfd",
        "open_by_handle_at", "clone-newuser", "ioctl-TIOCSTI", "kexec_load", "init_module")]
    assert len(lines) == 14 and all(line.endswith("-1 EPERM") for line in lines), text
    text = await _sh(attacked, "unshare -U id 2>&1; unshare -n id 2>&1", "ep-seccomp")
    assert "uid=" not in text


# families refused by the allowlist: name -> (family, type, protocol); natively several are created
# in the sandbox (vsock, netlink) or refused with another errno (packet, xdp: EPERM)
_REFUSED_FAMILIES = {
    "VSOCK": (40, 1, 0), "NETLINK": (16, 3, 0), "PACKET": (17, 3, 0), "ALG": (38, 5, 0), "KEY": (15, 3, 2),
    "BLUETOOTH": (31, 3, 0), "CAN": (29, 3, 1), "TIPC": (30, 5, 0), "RDS": (21, 5, 0), "XDP": (44, 3, 0),
    "PPPOX": (24, 1, 0), "IEEE802154": (36, 2, 0), "QIPCRTR": (42, 2, 0), "MCTP": (45, 2, 0),
}
_FAMILY_PROBE = f"""
import ctypes, errno, multiprocessing, os, socket
libc = ctypes.CDLL(None, use_errno=True)
for name, (family, kind, proto) in {_REFUSED_FAMILIES!r}.items():
    fd = libc.socket(family, kind, proto)
    print('socket', name, 'CREATED' if fd >= 0 else errno.errorcode[ctypes.get_errno()])
    pair = (ctypes.c_int * 2)()
    fd = libc.socketpair(family, kind, proto, pair)
    print('socketpair', name, 'CREATED' if fd >= 0 else errno.errorcode[ctypes.get_errno()])
a, b = socket.socketpair()
a.sendall(b'pair'); print('unix socketpair', b.recv(4).decode())
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close(); print('unix socket ok')
for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    server = socket.socket(family); server.bind((host, 0)); server.listen()
    client = socket.create_connection(server.getsockname()[:2], timeout=3); peer, _ = server.accept()
    client.sendall(b'lo'); print('loopback', family.name, peer.recv(2).decode())  # the sandbox's own lo
def child(queue):
    queue.put(os.getpid())
queue = multiprocessing.get_context('fork').Queue()
worker = multiprocessing.get_context('fork').Process(target=child, args=(queue,)); worker.start()
print('multiprocessing', queue.get(timeout=10) == worker.pid); worker.join()
"""


async def test_seccomp_allows_only_unix_and_inet_socket_families(attacked):
    # a child interpreter: the audit hook of the tool's own would stop bind() before the kernel sees it
    run = f"import subprocess, sys\nr = subprocess.run([sys.executable, '-c', {_FAMILY_PROBE!r}], capture_output=True, text=True)\nprint(r.stdout, r.stderr)"
    text = await _py(attacked, run, "ep-families")
    refused = [line for line in text.splitlines() if line.startswith(("socket ", "socketpair "))]
    # EAFNOSUPPORT from the filter: natively vsock and netlink are created, packet and xdp get
    # EPERM, and socketpair of these families EOPNOTSUPP
    assert len(refused) == 2 * len(_REFUSED_FAMILIES) and all(line.endswith(" EAFNOSUPPORT") for line in refused), text
    for line in ("unix socketpair pair", "unix socket ok", "loopback AF_INET lo", "loopback AF_INET6 lo", "multiprocessing True"):
        assert line in text, text


def _run_bpf(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """The return value of a classic-BPF seccomp program for one call (the few opcodes it uses)."""
    import struct

    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = struct.unpack_from("=HBBI", program, 8 * pc)
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            hit = {0x15: acc == k, 0x45: bool(acc & k), 0x35: acc >= k}[code]
            pc += jt if hit else jf


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_seccomp_socket_families_on_both_tables(arch):
    from aworld_gaia_env.sandbox_seccomp import _AUDIT_ARCH, _SYSCALLS, build_filter

    audit, numbers = _AUDIT_ARCH[arch], _SYSCALLS[arch]
    allow, eperm, no_family = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.EAFNOSUPPORT
    for shared in (False, True):
        program = build_filter(shared_network=shared, arch=arch)
        assert _run_bpf(program, audit, numbers["socket"], (1,)) == (eperm if shared else allow)
        for family in (2, 10):
            assert _run_bpf(program, audit, numbers["socket"], (family,)) == allow
        assert _run_bpf(program, audit, numbers["socketpair"], (1,)) == allow
        for family in (*(f for f, _, _ in _REFUSED_FAMILIES.values()), 0, 3, 46, 0xFFFFFFFF):
            assert _run_bpf(program, audit, numbers["socket"], (family,)) == no_family
            assert _run_bpf(program, audit, numbers["socketpair"], (family,)) == no_family
        assert _run_bpf(program, audit, numbers["socketpair"], (2,)) == no_family
        assert _run_bpf(program, audit, numbers["ptrace"]) == eperm  # the rest of the filter still holds
        assert _run_bpf(program, audit, numbers["ioctl"], (0, 0x5412)) == eperm
        assert _run_bpf(program, audit, numbers["clone"], (0x10000000,)) == eperm
        assert _run_bpf(program, audit, 0) == allow
        assert _run_bpf(program, 0x40000003, 0) == 0x80000000  # i386: killed


# ---------------------------------------------------------------------------------------------
# 7. network and kill attempts (child interpreters have no audit hook: the namespace holds)
# ---------------------------------------------------------------------------------------------


async def test_network_is_off_even_for_child_interpreters(attacked, fakes):
    probe = (
        "import socket\n"
        f"for host in ('127.0.0.1', {socket.gethostbyname(socket.gethostname())!r}, '1.1.1.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {fakes.port}), timeout=2)\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as exc:\n"
        "        print('blocked', host, exc)\n"
        "try:\n"
        "    print(socket.getaddrinfo('example.com', 80))\n"
        "except OSError as exc:\n"
        "    print('no dns', exc)\n"
    )
    before = len(fakes.requests)
    text = await _py(attacked, f"import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {probe!r}], capture_output=True, text=True).stdout)", "ep-net2")
    text += await _sh(attacked, f"python3 -c {shlex.quote(probe)}; (echo > /dev/udp/8.8.8.8/53) 2>&1", "ep-net2")
    assert "CONNECTED" not in text and text.count("blocked") == 6 and text.count("no dns") == 2
    assert len(fakes.requests) == before


async def test_kill_attempts_do_not_reach_the_server(attacked):
    pid = attacked.proc.pid  # type: ignore[union-attr]
    text = await _sh(attacked, f"kill -9 {pid} 2>&1; kill -9 -1 2>&1; kill -9 1 2>&1; pkill -9 python 2>&1; echo survived", "ep-kill")
    assert attacked.proc.poll() is None  # type: ignore[union-attr]
    assert "No such process" in text
    text = await _py(attacked, f"import os, signal\ntry:\n    os.kill({pid}, signal.SIGKILL)\nexcept OSError as exc:\n    print('denied', exc)", "ep-kill")
    assert "denied" in text and attacked.proc.poll() is None  # type: ignore[union-attr]
    await _alive(attacked)


# ---------------------------------------------------------------------------------------------
# 8. memory across processes (the cgroup), and the network only when the job allows it
# ---------------------------------------------------------------------------------------------


async def test_memory_across_processes_hits_the_cgroup(attacked):
    async with aiohttp.ClientSession() as http:
        async with http.get(attacked.base + "/health") as response:
            cgroup = (await response.json())["cgroup"]
    if cgroup == "unavailable":
        pytest.skip("no writable cgroup on this host: the rlimits alone hold each process")
    code = (
        "import os, time\n"
        "kids = []\n"
        "for i in range(5):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(300 * 2**20)\n"
        "        for j in range(0, len(block), 4096):\n"
        "            block[j] = 1\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print([os.waitpid(k, 0)[1] for k in kids])\n"
    )
    text = await _py(attacked, code, "ep-membomb")  # 5 x 300 MB, each under RLIMIT_AS (768 MB)
    assert "more than the memory limit" in text and "SANDBOX_MEMORY_MB" in text
    await _alive(attacked)


async def test_network_only_when_allowed_and_never_host_unix_sockets(tmp_path, fakes):
    from aworld_gaia_env.sandbox import Sandbox
    from aworld_gaia_env.settings import GaiaEnvSettings
    from aworld_gaia_env.workspace import WorkspaceManager

    host = _UnixServer(tmp_path / "sock")
    try:
        sandbox = Sandbox(GaiaEnvSettings(workspace_root=tmp_path / "ws", sandbox_allow_network=True))
        workspace, _ = WorkspaceManager(tmp_path / "ws").get("ep-net-allowed")
        code = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {fakes.port}), timeout=3).close()\n"
            "print('TCP ok')\n"
            f"for address in ({host.path!r}, {host.abstract!r}):\n"
            "    try:\n"
            "        socket.socket(socket.AF_UNIX).connect(address)\n"
            "        print('CONNECTED')\n"
            "    except OSError as exc:\n"
            "        print('unix refused', exc)\n"
            "a, b = socket.socketpair()\n"
            "a.sendall(b'x'); print('socketpair', b.recv(1).decode())\n"
            "for family in (socket.AF_VSOCK, socket.AF_NETLINK):\n"
            "    try:\n"
            "        socket.socket(family, socket.SOCK_DGRAM)\n"
            "        print('CREATED', family)\n"
            "    except OSError as exc:\n"
            "        print('family refused', exc.errno)\n"
        )
        result = await sandbox.run_python(code, workspace)
        assert sandbox.mode == "bwrap" and "TCP ok" in result.stdout, result.render()
        assert "CONNECTED" not in result.stdout and result.stdout.count("Operation not permitted") == 2
        assert "socketpair x" in result.stdout and "CREATED" not in result.stdout
        assert result.stdout.count(f"family refused {errno.EAFNOSUPPORT}") == 2, result.render()
        assert host.accepted == 0
    finally:
        host.close()
