"""Nothing leaves loopback at test time: the namespace make test runs every suite in
(scripts/offline-run.sh), the socket guard of tests/conftest.py, and the strace summary that lists
who tried to reach beyond loopback (scripts/offline_trace.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "scripts" / "offline-run.sh"

# a child process without the test guard: what any library would meet in the namespace
PROBE = textwrap.dedent("""
    import socket, sys
    print("interfaces", sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]))
    for target in [("192.0.2.1", 80), ("2001:db8::1", 443)]:
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        try:
            socket.socket(family).connect(target)
            print("connected", target)
        except OSError as exc:
            print("refused", target[0], exc.errno)
    try:
        socket.getaddrinfo("pypi.org", 443)
        print("resolved")
    except OSError as exc:
        print("unresolved", type(exc).__name__)
    if len(sys.argv) > 1:  # a port forwarded to a unix socket
        with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as conn:
            conn.sendall(b"ping")
            print("bridge", conn.recv(16).decode())
""")


def _namespace_possible() -> str | None:
    if os.environ.get("AWORLD_OFFLINE_NETNS") == "1":
        return None
    if shutil.which("unshare") is None:
        return "no unshare binary"
    probe = ["unshare", "--net", "true"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--net", "true"]
    done = subprocess.run(probe, capture_output=True)
    return None if done.returncode == 0 else f"{' '.join(probe)} failed: {done.stderr.decode().strip()}"


def _load_trace_module():
    spec = importlib.util.spec_from_file_location("offline_trace", REPO / "scripts" / "offline_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["offline_trace"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_make_test_runs_this_suite_with_only_loopback():
    if os.environ.get("AWORLD_OFFLINE_NETNS") != "1":
        pytest.skip("not run through scripts/offline-run.sh (make test does)")
    interfaces = [line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]]
    assert interfaces == ["lo"]


def test_the_guard_names_the_address_a_test_tried_to_reach():
    with pytest.raises(OSError, match=r"connect to 192\.0\.2\.1:80 refused -- nothing may leave loopback"):
        socket.create_connection(("192.0.2.1", 80), timeout=5)
    with pytest.raises(socket.gaierror, match="resolving 'pypi.org' refused"):
        socket.getaddrinfo("pypi.org", 443)
    with pytest.raises(OSError, match=r"sendto 8\.8\.8\.8:53 refused"):
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
    with pytest.raises(OSError, match=r"connect to 2001:db8::1:443 refused"):
        socket.socket(socket.AF_INET6).connect(("2001:db8::1", 443))


def test_the_guard_lets_loopback_and_local_names_through():
    assert socket.getaddrinfo("localhost", 80)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        with socket.create_connection(("localhost", server.getsockname()[1]), timeout=5):
            pass


def _unix_echo(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"pong:" + conn.recv(16))

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_the_wrapper_gives_a_namespace_with_only_lo_and_forwards_unix_sockets(tmp_path):
    if (reason := _namespace_possible()) is not None:
        pytest.skip(f"no network namespace can be made here: {reason}")
    sock_path = tmp_path / "echo.sock"
    server = _unix_echo(sock_path)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    try:
        done = subprocess.run(
            [str(WRAPPER), "--forward", f"{port}={sock_path}", "--", sys.executable, "-c", PROBE, str(port)],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "interfaces ['lo']" in out
    assert "refused 192.0.2.1 101" in out and "refused 2001:db8::1 101" in out  # ENETUNREACH, at once
    assert "unresolved gaierror" in out and "connected" not in out and "resolved\n" not in out
    assert "bridge pong:ping" in out
    assert "only interface is lo" in done.stderr


def test_the_trace_lists_who_tried_to_reach_beyond_loopback(tmp_path):
    if (reason := _namespace_possible()) is not None:
        pytest.skip(f"no network namespace can be made here: {reason}")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (only the optional --trace check needs it)")
    trace = tmp_path / "trace"
    done = subprocess.run([str(WRAPPER), "--trace", str(trace), "--", sys.executable, "-c", PROBE],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "attempt refused: 1x connect to 192.0.2.1:80 by python" in done.stderr
    assert "ENETUNREACH" in done.stderr and "LEAK" not in done.stderr


def test_the_trace_summary_fails_on_a_call_that_got_out():
    trace = _load_trace_module()
    lines = [
        'execve("/usr/bin/curl", ["curl"], 0x0 /* 3 vars */) = 0',
        'connect(3, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("151.101.0.223")}, 16) = 0',
        'connect(4, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.0.0.53")}, 16) = -1 ENETUNREACH (x)',
        'connect(5, {sa_family=AF_INET6, sin6_port=htons(80), sin6_flowinfo=htonl(0), '
        'inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0',
        'sendto(6, "x", 1, 0, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.0.0.1")}, 16) = 1',
        'connect(7, {sa_family=AF_UNIX, sun_path="/tmp/s"}, 110) = 0',
    ]
    local, failed, succeeded = trace.summarize({"41": lines})
    assert sum(local.values()) == 3
    assert list(failed) == [("10.0.0.53", 53, "connect", "curl (pid 41)", "ENETUNREACH")]
    assert list(succeeded) == [("151.101.0.223", 443, "connect", "curl (pid 41)", "0")]
