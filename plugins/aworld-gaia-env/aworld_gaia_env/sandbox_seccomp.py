"""The seccomp filter bubblewrap loads before it runs sandboxed code (``bwrap --seccomp FD``).

Namespaces hide the host; this filter takes away the kernel interfaces that namespaces do not
cover and that model code never needs, each a known way out of (or through) a container:
tracing other processes, mounting, keyrings, BPF, perf, io_uring (runs I/O outside these
checks), userfaultfd, handle-based opens (``open_by_handle_at``), module and kexec loading,
clock and host settings, new namespaces (``unshare``/``setns``/``clone`` with a namespace flag),
and terminal injection (``TIOCSTI``/``TIOCLINUX``). ``socket`` and ``socketpair`` take an
allowlist of address families: ``AF_UNIX`` (pipes between processes, ``multiprocessing``,
asyncio's self-pipe; the host's file-system sockets are outside the mount namespace), ``AF_INET``
and ``AF_INET6`` (without the network they reach only the sandbox's own loopback). Every other
family gets ``EAFNOSUPPORT``, as from a kernel built without it: ``AF_VSOCK`` ignores network
namespaces (on a VM host it reaches the hypervisor's services), ``AF_NETLINK``, ``AF_PACKET``,
``AF_ALG``, ``AF_KEY``, ``AF_BLUETOOTH``... are kernel surface model code never needs. When the
sandbox shares the host's network, ``socket(AF_UNIX)`` is refused with ``EPERM`` too: the host's
abstract unix sockets live in its network namespace (``socketpair(AF_UNIX)`` connects nothing
outside and stays allowed). ``clone3`` gets ``ENOSYS`` (its flags sit in memory a filter cannot read), so the C
library falls back to ``clone``, whose flags it can. Everything else is allowed; denied calls
fail with ``EPERM`` (refused socket families with ``EAFNOSUPPORT``) so programs report an error
instead of dying.

The program is classic BPF, assembled here with :mod:`struct` (no libseccomp binding needed);
syscall numbers for x86_64 and aarch64 come from the kernel's ``unistd`` headers.
"""

from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index  # low 32 bits of args[index] (little-endian)


_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000

_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "swapon", "swapoff", "reboot",
    "sethostname", "setdomainname", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "quotactl", "quotactl_fd", "acct", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "syslog", "vhangup", "add_key", "request_key", "keyctl", "unshare", "setns",
    "perf_event_open", "fanotify_init", "name_to_handle_at", "open_by_handle_at", "bpf", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "lookup_dcookie", "personality",
    # x86_64 only
    "iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl", "create_module", "nfsservctl",
)

_SYSCALLS = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166,
        "pivot_root": 155, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
        "setdomainname": 171, "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "quotactl": 179, "quotactl_fd": 443, "acct": 163, "settimeofday": 164,
        "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "syslog": 103, "vhangup": 153,
        "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "setns": 308, "perf_event_open": 298,
        "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304, "bpf": 321, "userfaultfd": 323,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "lookup_dcookie": 212,
        "personality": 135, "iopl": 172, "ioperm": 173, "uselib": 134, "ustat": 136, "sysfs": 139,
        "_sysctl": 156, "create_module": 174, "nfsservctl": 180,
        "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53, "ioctl": 16,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40, "umount2": 39,
        "pivot_root": 41, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "swapon": 224, "swapoff": 225, "reboot": 142, "sethostname": 161,
        "setdomainname": 162, "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "quotactl": 60, "quotactl_fd": 443, "acct": 89, "settimeofday": 170,
        "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "syslog": 116, "vhangup": 58,
        "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97, "setns": 268, "perf_event_open": 241,
        "fanotify_init": 262, "name_to_handle_at": 264, "open_by_handle_at": 265, "bpf": 280, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "lookup_dcookie": 18,
        "personality": 92,
        "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199, "ioctl": 29,
    },
}

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C


def supported_arch() -> str | None:
    """This machine's architecture when the filter knows its syscall numbers, else None."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in _SYSCALLS else None


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _by_family(nr: int, actions: dict[int, int], default: int) -> list[bytes]:
    """``socket``/``socketpair`` (nr): the return for the family in arg 0; every branch returns."""
    body = [_ins(_LD_W_ABS, _arg_low(0))]
    for family, action in actions.items():
        body += [_ins(_JEQ_K, family, jf=1), _ins(_RET_K, action)]
    body.append(_ins(_RET_K, default))
    return [_ins(_JEQ_K, nr, jf=len(body)), *body]


def build_filter(*, shared_network: bool, arch: str | None = None) -> bytes:
    """The filter as the raw ``struct sock_filter`` array bwrap reads from its ``--seccomp`` fd.

    ``shared_network``: the sandbox runs in the host's network namespace (``--share-net``), so
    ``socket(AF_UNIX)`` could reach the host's abstract sockets and is refused.
    """
    arch = arch or supported_arch()
    if arch not in _SYSCALLS:
        raise ValueError(
            f"the sandbox's seccomp filter knows the syscall numbers of {sorted(_SYSCALLS)}, not {platform.machine()!r}"
        )
    numbers = _SYSCALLS[arch]
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        _ins(_LD_W_ABS, _ARCH),
        _ins(_JEQ_K, _AUDIT_ARCH[arch], jt=1),  # another ABI (i386 on x86_64): kill
        _ins(_RET_K, _RET_KILL_PROCESS),
        _ins(_LD_W_ABS, _NR),
    ]
    if arch == "x86_64":  # the x32 ABI numbers everything with bit 30 set
        prog += [_ins(_JGE_K, _X32_BIT, jf=1), _ins(_RET_K, eperm)]
    for name in _DENIED:
        if name in numbers:
            prog += [_ins(_JEQ_K, numbers[name], jf=1), _ins(_RET_K, eperm)]
    prog += [_ins(_JEQ_K, numbers["clone3"], jf=1), _ins(_RET_K, _RET_ERRNO | errno.ENOSYS)]
    # clone: refuse namespace flags (arg 0); the accumulator is reloaded with nr afterwards
    prog += [
        _ins(_JEQ_K, numbers["clone"], jf=4),
        _ins(_LD_W_ABS, _arg_low(0)),
        _ins(_JSET_K, _NAMESPACE_FLAGS, jf=1),
        _ins(_RET_K, eperm),
        _ins(_RET_K, _RET_ALLOW),
    ]
    # ioctl: no typing into the controlling terminal (arg 1 is the request)
    prog += [
        _ins(_JEQ_K, numbers["ioctl"], jf=5),
        _ins(_LD_W_ABS, _arg_low(1)),
        _ins(_JEQ_K, _TIOCSTI, jt=1),
        _ins(_JEQ_K, _TIOCLINUX, jf=1),
        _ins(_RET_K, eperm),
        _ins(_RET_K, _RET_ALLOW),
    ]
    # socket families: an allowlist (the rest get EAFNOSUPPORT, as from a kernel without them)
    no_family = _RET_ERRNO | errno.EAFNOSUPPORT
    unix = eperm if shared_network else _RET_ALLOW
    prog += _by_family(numbers["socket"], {_AF_UNIX: unix, _AF_INET: _RET_ALLOW, _AF_INET6: _RET_ALLOW}, no_family)
    prog += _by_family(numbers["socketpair"], {_AF_UNIX: _RET_ALLOW}, no_family)
    prog.append(_ins(_RET_K, _RET_ALLOW))
    return b"".join(prog)
