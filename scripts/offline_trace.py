#!/usr/bin/env python3
"""Summarize an strace log of network system calls: which destinations beyond loopback were tried.

``scripts/offline-run.sh --trace LOG -- CMD`` runs CMD under
``strace -ff -e trace=connect,sendto,sendmsg,sendmmsg,execve -o LOG/trace`` (one file per process,
so no call is split across lines) and then this script, so a person can see
not only that no packet left (the namespace has no interface but ``lo``) but also *who tried*:
every connect/sendto to an address outside 127.0.0.0/8 and ::1, with its port and result.

    offline_trace.py LOG_DIR

Exit status 1 when a call to an address beyond loopback *succeeded* (a packet could have left),
0 otherwise (attempts that failed -- ENETUNREACH in the namespace -- are listed, not fatal).
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections import Counter
from pathlib import Path

CALL = re.compile(r"^(connect|sendto|sendmsg|sendmmsg)\((.*)$")
INET = re.compile(r'sa_family=AF_INET, sin_port=htons\((\d+)\), sin_addr=inet_addr\("([^"]+)"\)')
INET6 = re.compile(r'sa_family=AF_INET6, sin6_port=htons\((\d+)\).*?inet_pton\(AF_INET6, "([^"]+)"')
RESULT = re.compile(r"\)\s+=\s+(-?\d+|\?)(?:\s+(E[A-Z0-9]+))?")
EXECVE = re.compile(r'^execve\("([^"]+)".*= 0$')


def is_local(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def summarize(files: dict[str, list[str]]) -> tuple[Counter, Counter, Counter]:
    """(local calls by kind, beyond-loopback failed attempts, beyond-loopback successes) over the
    trace files of one run (pid -> lines)."""
    local: Counter = Counter()
    failed: Counter = Counter()
    succeeded: Counter = Counter()
    for pid, lines in files.items():
        program = f"pid {pid}"
        for line in lines:
            line = line.rstrip("\n")
            if (exe := EXECVE.match(line)) is not None:
                program = f"{exe.group(1).rsplit('/', 1)[-1]} (pid {pid})"
            call = CALL.match(line)
            if call is None:
                continue
            name, rest = call.groups()
            found = INET.search(rest) or INET6.search(rest)
            if found is None:  # unix sockets, netlink, connected sockets without an address
                local[f"{name} (no inet address)"] += 1
                continue
            port, addr = found.groups()
            if is_local(addr):
                local[f"{name} to loopback"] += 1
                continue
            result = RESULT.search(rest)
            value, errno = (result.group(1), result.group(2)) if result else ("?", None)
            key = (addr, int(port), name, program, errno or value)
            if errno is None and value not in ("-1", "?"):
                succeeded[key] += 1
            else:
                failed[key] += 1
    return local, failed, succeeded


def main(log_dir: str) -> int:
    files = {
        path.name.rsplit(".", 1)[-1]: path.read_text(errors="replace").splitlines()
        for path in sorted(Path(log_dir).glob("trace.*"))
    }
    local, failed, succeeded = summarize(files)
    print(f"offline_trace: {len(files)} processes traced")
    print(f"offline_trace: {sum(local.values())} network calls to loopback, unix or netlink sockets "
          f"({', '.join(f'{n} {k}' for k, n in sorted(local.items())) or 'none'})")
    if not failed and not succeeded:
        print("offline_trace: no connect/sendto/sendmsg to any address beyond loopback")
    for (addr, port, name, program, result), n in sorted(failed.items()):
        print(f"offline_trace: attempt refused: {n}x {name} to {addr}:{port} by {program} -> {result}")
    for (addr, port, name, program, result), n in sorted(succeeded.items()):
        print(f"offline_trace: LEAK: {n}x {name} to {addr}:{port} by {program} returned {result}")
    return 1 if succeeded else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: offline_trace.py STRACE_LOG_DIR")
    raise SystemExit(main(sys.argv[1]))
