#!/usr/bin/env python3
"""Summarize an strace log of network system calls: which destinations beyond loopback were
tried, and by which program.

``scripts/offline-run.sh --trace DIR -- CMD`` runs CMD under ``strace -ff`` tracing
connect/sendto/sendmsg/sendmmsg, execve and the process-creating calls, one file per thread in
``DIR/trace.<tid>`` (so no call is split across lines), then this script: a person sees not only
that no packet left (the namespace has no interface but ``lo``) but also *who tried* -- every
connect/sendto to an address outside 127.0.0.0/8 and ::1, with its port, result and program.
A process that did not exec (a thread, Chromium's zygote children) is named after its parent,
so ``lineage`` holds every program it descends from (pids inside a pid namespace are
translated by strace's ``--decode-pids=pidns``).

    offline_trace.py DIR

Exit status 1 when a call to an address beyond loopback *succeeded* (a packet could have left),
0 otherwise (attempts that failed -- ENETUNREACH in the namespace -- are listed, not fatal).
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

CALL = re.compile(r"^(connect|sendto|sendmsg|sendmmsg)\((.*)$")
INET = re.compile(r'sa_family=AF_INET, sin_port=htons\((\d+)\), sin_addr=inet_addr\("([^"]+)"\)')
INET6 = re.compile(r'sa_family=AF_INET6, sin6_port=htons\((\d+)\).*?inet_pton\(AF_INET6, "([^"]+)"')
RESULT = re.compile(r"\)\s+=\s+(-?\d+|\?)(?:\s+(E[A-Z0-9]+))?")
EXECVE = re.compile(r'^execve\("([^"]+)".*\)\s+=\s+0$')
# a process-creating call, whole or resumed (a call strace had to split: "<... clone3 resumed>...) = N")
SPAWN = re.compile(r"^(?:(?:clone3?|fork|vfork)\(|<\.\.\. (?:clone3?|fork|vfork) resumed>).*\)\s+=\s+(\d+)"
                   r"(?:\s+/\* (\d+) in strace's PID NS \*/)?\s*$")


@dataclass(frozen=True)
class NetCall:
    """One connect/sendto/sendmsg/sendmmsg to an inet address."""

    pid: str
    call: str
    addr: str
    port: int
    result: str  # the errno name of a failure, else the return value
    lineage: tuple[str, ...]  # programs, this process's first, then its ancestors'

    @property
    def local(self) -> bool:
        return is_local(self.addr)

    @property
    def succeeded(self) -> bool:
        return not self.result.startswith("E") and self.result not in ("-1", "?")

    @property
    def program(self) -> str:
        return self.lineage[0] if self.lineage else f"pid {self.pid}"


def is_local(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def read_dir(log_dir: str | Path) -> dict[str, list[str]]:
    """tid -> lines of the trace files of one run."""
    return {
        path.name.rsplit(".", 1)[-1]: path.read_text(errors="replace").splitlines()
        for path in sorted(Path(log_dir).glob("trace.*"))
    }


def net_calls(files: dict[str, list[str]]) -> tuple[list[NetCall], Counter]:
    """Every inet connect/sendto of the run with its program lineage, and a count of the other
    network calls (unix sockets, netlink, connected sockets without an address)."""
    parent: dict[str, str] = {}
    program: dict[str, str] = {}
    for pid, lines in files.items():
        for line in lines:
            if (spawn := SPAWN.match(line)) is not None:
                parent[spawn.group(2) or spawn.group(1)] = pid
            elif (exe := EXECVE.match(line)) is not None:
                program[pid] = exe.group(1).rsplit("/", 1)[-1]

    def lineage(pid: str) -> tuple[str, ...]:
        chain: list[str] = []
        seen: set[str] = set()
        while pid and pid not in seen:
            seen.add(pid)
            if pid in program and (not chain or chain[-1] != program[pid]):
                chain.append(program[pid])
            pid = parent.get(pid, "")
        return tuple(chain)

    calls: list[NetCall] = []
    other: Counter = Counter()
    for pid, lines in files.items():
        for line in lines:
            found_call = CALL.match(line)
            if found_call is None:
                continue
            name, rest = found_call.groups()
            found = INET.search(rest) or INET6.search(rest)
            if found is None:
                other[f"{name} (no inet address)"] += 1
                continue
            port, addr = found.groups()
            result = RESULT.search(rest)
            value, errno = (result.group(1), result.group(2)) if result else ("?", None)
            calls.append(NetCall(pid, name, addr, int(port), errno or value, lineage(pid)))
    return calls, other


def summarize(files: dict[str, list[str]]) -> tuple[Counter, Counter, Counter]:
    """(local calls by kind, beyond-loopback failed attempts, beyond-loopback successes), the
    latter two keyed by (address, port, call, program, result)."""
    calls, local = net_calls(files)
    failed: Counter = Counter()
    succeeded: Counter = Counter()
    for c in calls:
        if c.local:
            local[f"{c.call} to loopback"] += 1
            continue
        key = (c.addr, c.port, c.call, f"{c.program} (pid {c.pid})", c.result)
        (succeeded if c.succeeded else failed)[key] += 1
    return local, failed, succeeded


def main(log_dir: str) -> int:
    files = read_dir(log_dir)
    local, failed, succeeded = summarize(files)
    print(f"offline_trace: {len(files)} threads traced; {sum(local.values())} network calls to loopback, "
          f"unix or netlink sockets ({', '.join(f'{n} {k}' for k, n in sorted(local.items())) or 'none'})")
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
