"""Shared test setup: ``tests/support`` is importable as ``support`` from every test folder, and
nothing in the test process reaches beyond loopback.

The guard: ``make test`` runs every suite in a network namespace with only ``lo``
(``scripts/offline-run.sh``), where a connect or DNS query to any other address fails with
ENETUNREACH. That protects every process, but the error names nothing. In the test process itself,
this module also wraps ``socket`` so that a connect/sendto to an address beyond loopback, or the
resolution of a name that only DNS could answer, fails at once with a message naming the address
and the rule -- the same error class (``OSError`` / ``socket.gaierror``) a library already handles
for an unreachable network, so code that copes with no network behaves as it would offline. It also
applies to a developer running ``pytest`` directly, outside the namespace.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import sys
from functools import lru_cache
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

RULE = ("nothing may leave loopback at test time (no packet beyond 127.0.0.1, DNS included): "
        "serve what the test needs on 127.0.0.1 instead")


def _is_local_ip(host: str) -> bool | None:
    """True for loopback or unspecified addresses, False for other IP literals, None for names."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


@lru_cache(maxsize=1)
def _local_names() -> frozenset[str]:
    """Names answered without DNS: localhost, /etc/hosts, this machine's own hostname."""
    names = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", socket.gethostname().lower()}
    try:
        for line in Path("/etc/hosts").read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            names.update(name.lower() for name in fields[1:])
    except OSError:
        pass
    return frozenset(names)


def _name_needs_dns(host: object) -> bool:
    if host is None:
        return False
    if isinstance(host, bytes):
        host = host.decode("idna", "replace")
    name = str(host).strip().rstrip(".").lower()
    if not name or _is_local_ip(name) is not None:
        return False
    return not (name in _local_names() or name.endswith(".localhost"))


def _refuse_address(address: object) -> str | None:
    """The ``host:port`` to refuse when ``address`` is an inet address beyond loopback."""
    if not isinstance(address, tuple) or len(address) < 2 or not isinstance(address[0], (str, bytes)):
        return None  # unix socket paths, netlink, ...
    host = address[0].decode() if isinstance(address[0], bytes) else address[0]
    local = _is_local_ip(host)
    if local is None:  # a name: Python resolves it through getaddrinfo, guarded below
        return f"{host}:{address[1]}" if _name_needs_dns(host) else None
    return None if local else f"{host}:{address[1]}"


def _unreachable(what: str, target: str) -> OSError:
    return OSError(errno.ENETUNREACH, f"aworld tests: {what} {target} refused -- {RULE}")


def _install_guard() -> None:
    real = socket.socket
    if getattr(real, "_aworld_loopback_guard", False):
        return
    real_connect, real_connect_ex, real_sendto = real.connect, real.connect_ex, real.sendto
    real_getaddrinfo, real_gethostbyname = socket.getaddrinfo, socket.gethostbyname
    real_gethostbyname_ex = socket.gethostbyname_ex

    def connect(self, address):  # type: ignore[no-untyped-def]
        if (target := _refuse_address(address)) is not None:
            raise _unreachable("connect to", target)
        return real_connect(self, address)

    def connect_ex(self, address):  # type: ignore[no-untyped-def]
        if (target := _refuse_address(address)) is not None:
            raise _unreachable("connect to", target)
        return real_connect_ex(self, address)

    def sendto(self, data, *args):  # type: ignore[no-untyped-def]
        if args and (target := _refuse_address(args[-1])) is not None:
            raise _unreachable("sendto", target)
        return real_sendto(self, data, *args)

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if _name_needs_dns(host):
            raise socket.gaierror(socket.EAI_NONAME, f"aworld tests: resolving {host!r} refused -- {RULE}")
        return real_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host):  # type: ignore[no-untyped-def]
        if _name_needs_dns(host):
            raise socket.gaierror(socket.EAI_NONAME, f"aworld tests: resolving {host!r} refused -- {RULE}")
        return real_gethostbyname(host)

    def gethostbyname_ex(host):  # type: ignore[no-untyped-def]
        if _name_needs_dns(host):
            raise socket.gaierror(socket.EAI_NONAME, f"aworld tests: resolving {host!r} refused -- {RULE}")
        return real_gethostbyname_ex(host)

    real.connect, real.connect_ex, real.sendto = connect, connect_ex, sendto  # type: ignore[method-assign]
    socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = getaddrinfo, gethostbyname, gethostbyname_ex
    real._aworld_loopback_guard = True  # type: ignore[attr-defined]


_install_guard()
