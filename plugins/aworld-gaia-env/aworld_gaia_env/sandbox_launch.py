"""The sandbox's launcher: a fresh, single-threaded process that prepares, drops root and execs.

Run as ``python -I -S -B sandbox_launch.py`` with its JSON config on stdin (so neither the
command nor the snippet shows in ``/proc/*/cmdline`` or hits the argument size limit) by
:mod:`aworld_gaia_env.sandbox`
(never imported by the server: changing namespaces, credentials and limits from a forked thread
of a busy server is unsafe, so the work happens here, in a process that has nothing else running).

``bwrap`` mode. As root, the launcher first gets a private mount namespace and binds what the
sandbox may see (the interpreter's prefixes, the episode's workspace, a few ``/etc`` files) into
a staging tmpfs that an unprivileged user can traverse: bubblewrap resolves its sources as the
user it runs as, and the sources may lie under directories only root can enter (``/root``,
the 0700 workspace root). It joins a cgroup when one is writable, sets the resource limits,
drops to the episode's uid and execs ``bwrap``, which builds the sandbox from the staged paths
in fresh user, mount, pid, network, ipc, uts and cgroup namespaces and loads the seccomp filter
(given as hex, written to a memfd for ``--seccomp``). ``audit`` mode (the explicit opt-out):
only the resource limits apply here; the Python bootstrap adds its audit hook.

Exit code 125 means the launcher itself failed (its reason is on stderr).
"""

from __future__ import annotations

import json
import os
import resource
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV = 2, 4
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
STAGE = "/tmp"  # always present and traversable; covered by a tmpfs in the launcher's own mount namespace


def _fail(message: str) -> None:
    sys.stderr.write(f"sandbox launcher: {message}\n")
    sys.stderr.flush()
    os._exit(125)


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc, ctypes


def _mount(libc, ctypes, source, target, fstype, flags, data=None) -> None:
    enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        _fail(f"mount {source} on {target} failed: {os.strerror(err)}")


def _stage(binds: list[list[str]]) -> list[list[str]]:
    """Bind every source into a staging tmpfs; return the binds with staged sources."""
    libc, ctypes = _libc()
    if libc.unshare(CLONE_NEWNS) != 0:
        _fail(f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}")
    _mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)
    # sources are held open first: the staging tmpfs may cover them (a workspace under /tmp)
    fds = [os.open(source, os.O_PATH | os.O_CLOEXEC) for _, source, _ in binds]
    _mount(libc, ctypes, "aworld-stage", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    staged = []
    for index, ((kind, _, dest), fd) in enumerate(zip(binds, fds, strict=True)):
        target = f"{STAGE}/{index}"
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.mkdir(target)
        else:
            open(target, "w").close()
        _mount(libc, ctypes, f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        os.close(fd)
        staged.append([kind, target, dest])
    return staged


def _join_cgroup(paths: list[str]) -> None:
    for path in paths:
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            _fail(f"cannot join the cgroup {path}: {exc}")


def _limits(cfg: dict) -> None:
    cpu = int(cfg["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(cfg["memory_mb"]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    file_size = int(cfg["file_mb"]) * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = int(cfg["nproc"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.set_inheritable(fd, True)  # bwrap reads it after exec
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _bwrap_argv(cfg: dict, binds: list[list[str]]) -> list[str]:
    features = set(cfg.get("bwrap_features", ()))
    argv = [cfg["bwrap"], "--unshare-all", "--unshare-user", "--as-pid-1", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--cap-drop", "ALL"]
    if "--disable-userns" in features:  # bubblewrap >= 0.8; the seccomp filter refuses new namespaces anyway
        argv.append("--disable-userns")
    size = ["--size", str(64 * 2**20)] if "--size" in features else []  # >= 0.5; else the cgroup bounds them
    if cfg["network"]:
        argv.append("--share-net")
    argv += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
    for link, target in cfg["symlinks"]:
        argv += ["--symlink", target, link]
    for kind, source, dest in binds:  # the workspace comes last: nothing may cover it
        argv += ["--bind" if kind == "rw" else "--ro-bind", source, dest]
    for dest, text in cfg["files"]:
        argv += ["--ro-bind-data", str(_memfd("etc", text.encode())), dest]
    argv += ["--remount-ro", "/"]  # the root tmpfs (parents of the workspace, /etc, /run) read-only
    argv += ["--seccomp", str(_memfd("seccomp", bytes.fromhex(cfg["seccomp"])))]
    argv += ["--chdir", cfg["workspace"], "--", *cfg["argv"]]
    return argv


def main() -> None:
    cfg = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the command's stdin: empty
    os.close(null)
    binds = cfg.get("binds", [])
    if cfg["mode"] == "bwrap" and os.geteuid() == 0:
        binds = _stage(binds)
    _join_cgroup(cfg.get("cgroups", []))
    os.umask(0o022)
    _limits(cfg)
    if cfg["mode"] == "bwrap" and os.geteuid() == 0 and int(cfg["uid"]) != 0:
        uid = int(cfg["uid"])
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if cfg["mode"] == "bwrap":
        argv = _bwrap_argv(cfg, binds)
    else:
        os.chdir(cfg["workspace"])
        argv = cfg["argv"]
    try:
        os.execve(argv[0], argv, cfg["env"])
    except OSError as exc:
        _fail(f"cannot run {argv[0]}: {exc}")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as exc:  # anything before exec is a launcher failure, said plainly
        _fail(f"{type(exc).__name__}: {exc}")
