"""Per-episode workspaces: the one directory an episode's tools may read, write and run in.

Isolation. Each episode's directory is owned by the episode's own uid (``SANDBOX_UID_BASE`` + a
slot) with mode 0700, and is the only directory of the host its sandbox sees (bubblewrap binds
just that one); the workspace root itself is root's. With ``GAIA_ENV_WORKSPACE_QUOTA_MB`` > 0
(the default, 1024) the directory is its own size-limited tmpfs, so a full workspace is
``ENOSPC`` for that episode only. Workspaces go away on ``DELETE /workspaces/<episode>``, after
``GAIA_ENV_WORKSPACE_IDLE_S`` without use, and when the server stops.

Root-side file access. The server runs as root and the sandboxed code can change its workspace
at any moment (swap a directory for a symlink between a check and an open). So the server never
opens a workspace path by name: it walks it one component at a time from a directory handle
with ``O_NOFOLLOW`` (``O_DIRECTORY`` for the directories on the way), refuses symbolic links,
opens the last component with ``O_NOFOLLOW | O_NONBLOCK`` and reads only regular files; listings
use ``lstat`` and never follow a link. Writes go to a fresh temporary file in a directory
opened the same way, then are renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from aworld_gaia_env.errors import ToolError

logger = logging.getLogger("aworld_gaia_env.workspace")

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SHARED_KEY = "shared"
QUOTA_SOURCE = "aworld-gaia-ws"  # the tmpfs's source name, so leftovers of a crashed run are found
SCRATCH = ".sandbox"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_INODES = 200_000
_MNT_DETACH = 2


def check_workspace_key(key: str) -> str:
    """An episode id usable as a directory name; anything else is refused, never rewritten."""
    if not _KEY_RE.match(key) or ".." in key:
        raise ToolError(
            f"invalid episode id {key!r}: use 1-128 characters of letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit"
        )
    return key


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc, ctypes


def _mount_quota(path: Path, size_mb: int, uid: int) -> None:
    libc, ctypes = _libc()
    options = f"size={size_mb}m,nr_inodes={_MAX_INODES},mode=0700,uid={uid},gid={uid}"
    if libc.mount(QUOTA_SOURCE.encode(), str(path).encode(), b"tmpfs", 2 | 4, options.encode()) != 0:  # nosuid,nodev
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount the workspace's {size_mb} MB tmpfs on {path}: {os.strerror(err)}")


def _unmount(path: Path) -> None:
    libc, ctypes = _libc()
    if libc.umount2(str(path).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):
            logger.warning("could not unmount the workspace %s: %s", path, os.strerror(err))


def _quota_mounts_under(root: Path) -> list[Path]:
    found = []
    prefix = str(root) + "/"
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point.startswith(prefix) and tail[:2] == ["tmpfs", QUOTA_SOURCE]:
                found.append(Path(point))
    return found


def prepare_directory(path: Path, uid: int, quota_mb: int = 0) -> None:
    """``path`` as a workspace: its own tmpfs of ``quota_mb`` (when > 0), 0700, owned by ``uid``."""
    path.mkdir(exist_ok=True)
    if quota_mb > 0 and not os.path.ismount(path):
        _mount_quota(path, quota_mb, uid)
        return
    if os.geteuid() == 0:
        _chown_tree(path, uid)
    os.chmod(path, 0o700)


def _chown_tree(path: Path, uid: int) -> None:
    """Give an existing tree (a workspace adopted from an earlier run) to ``uid``, links not followed."""
    os.lchown(path, uid, uid)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, uid)


class Workspace:
    """One episode's directory, with race-free file access for the root-side tools."""

    def __init__(self, key: str, path: Path, uid: int):
        self.key = key
        self.path = path
        self.uid = uid
        self.last_used = time.monotonic()
        self._busy = 0
        self._busy_lock = threading.Lock()

    # --- use tracking (idle expiry) -----------------------------------------------------------

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        with self._busy_lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1
            self.last_used = time.monotonic()

    @property
    def busy(self) -> bool:
        return self._busy > 0

    # --- paths ---------------------------------------------------------------------------------

    def relative(self, path: str, kind: str = "file") -> str:
        """``path`` (relative, or absolute inside the workspace) as a normalized relative path
        ('' for the workspace itself); ``..`` may not leave the workspace."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError(f"empty {kind} path: give a path relative to the workspace, e.g. 'data.csv'")
        raw = path.strip()
        if raw.startswith("/"):
            base = str(self.path)
            if raw != base and not raw.startswith(base + "/"):
                raise self._outside(path)
            raw = raw[len(base):].lstrip("/")
        norm = posixpath.normpath(raw) if raw else "."
        if norm == ".." or norm.startswith("../"):
            raise self._outside(path)
        return "" if norm == "." else norm

    def _outside(self, path: str) -> ToolError:
        return ToolError(
            f"path {path!r} is outside the workspace ({self.path}); files can only be read or written inside it"
        )

    def _link_error(self, path: str, component: str) -> ToolError:
        return ToolError(
            f"{path!r}: {component!r} is a symbolic link; the environment's file tools do not follow links "
            f"(one could point outside the workspace); use the path of the file itself"
        )

    def _open_dir(self, parts: list[str], path: str, *, create: bool = False) -> int:
        fd = os.open(self.path, _DIR_FLAGS)
        try:
            for part in parts:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise ToolError(f"directory {part!r} of {path!r} not found in the workspace") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    child = self._open_child_dir(fd, part, path)
                    if os.geteuid() == 0:
                        os.fchown(child, self.uid, self.uid)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._not_a_dir(fd, part, path) from None
                    raise
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_child_dir(self, fd: int, part: str, path: str) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self._not_a_dir(fd, part, path) from None
            raise

    def _not_a_dir(self, fd: int, part: str, path: str) -> ToolError:
        try:
            if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                return self._link_error(path, part)
        except OSError:
            pass
        return ToolError(f"{path!r}: {part!r} is not a directory")

    @contextlib.contextmanager
    def open_file(self, path: str, kind: str = "file") -> Iterator[tuple[BinaryIO, str]]:
        """A regular file of the workspace opened for reading, and its relative path."""
        rel = self.relative(path, kind)
        if not rel:
            raise ToolError(f"{path!r} is the workspace directory, not a {kind}; files in it: {self.listing()}")
        parts = rel.split("/")
        dir_fd = self._open_dir(parts[:-1], path)
        try:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                raise ToolError(f"{kind} {path!r} not found in the workspace; existing files: {self.listing()}") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._link_error(path, parts[-1]) from None
                raise
        finally:
            os.close(dir_fd)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise ToolError(f"{path!r} is {what}; files in the workspace: {self.listing()}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            yield handle, rel

    def read_bytes(self, path: str, *, max_bytes: int | None = None, kind: str = "file") -> bytes:
        with self.open_file(path, kind) as (handle, _):
            if max_bytes is not None:
                size = os.fstat(handle.fileno()).st_size
                if size > max_bytes:
                    raise ToolError(f"{path!r} is {size} bytes, larger than the limit of {max_bytes} bytes")
                return handle.read(max_bytes + 1)[:max_bytes]
            return handle.read()

    def is_dir(self, path: str) -> bool:
        rel = self.relative(path, "directory")
        try:
            os.close(self._open_dir(rel.split("/") if rel else [], path))
            return True
        except ToolError:
            return False

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[tuple[BinaryIO, str]]:
        """A new file's handle and relative path; renamed into place when the block succeeds."""
        rel = self.relative(name)
        if not rel:
            raise ToolError(f"{name!r} names the workspace itself; give a file name")
        parts = rel.split("/")
        dir_fd = self._open_dir(parts[:-1], name, create=True)
        temp = f".{parts[-1][:80]}.{secrets.token_hex(4)}.part"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
            if os.geteuid() == 0:
                os.fchown(fd, self.uid, self.uid)
            try:
                with os.fdopen(fd, "wb") as handle:
                    yield handle, rel
                os.replace(temp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except IsADirectoryError:
                raise ToolError(f"{name!r} is a directory in the workspace; choose another name") from None
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise ToolError(
                        f"the workspace is full (its quota, GAIA_ENV_WORKSPACE_QUOTA_MB, is reached): {name!r} was not written"
                    ) from None
                raise
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def add_file(self, name: str, data: bytes) -> str:
        with self.writing(name) as (handle, rel):
            handle.write(data)
        return rel

    def copy_in(self, source: Path, name: str | None = None) -> tuple[str, int]:
        """Copy a trusted file (a GAIA attachment) in; its relative path and size."""
        with open(source, "rb") as src, self.writing(name or source.name) as (handle, rel):
            shutil.copyfileobj(src, handle, 1 << 20)
            size = handle.tell()
        return rel, size

    # --- listing -------------------------------------------------------------------------------

    def walk(self, directory: str = "", limit: int = 500) -> tuple[list[tuple[str, int | None]], bool]:
        """``(relative path, size or None for a symlink)`` of the files under ``directory``
        (lstat only, links never followed), and whether the listing was cut at ``limit``."""
        rel = self.relative(directory, "directory") if directory not in ("", ".") else ""
        entries: list[tuple[str, int | None]] = []
        stack = [(self._open_dir(rel.split("/") if rel else [], directory), rel + "/" if rel else "")]
        visited = 0
        try:
            while stack:
                fd, prefix = stack.pop()
                try:
                    visited += 1
                    for name in sorted(os.listdir(fd)):
                        if not prefix and name == SCRATCH:
                            continue
                        try:
                            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(info.st_mode):
                            if visited + len(stack) < 5000:
                                with contextlib.suppress(OSError):
                                    stack.append((os.open(name, _DIR_FLAGS, dir_fd=fd), prefix + name + "/"))
                        elif stat.S_ISREG(info.st_mode):
                            entries.append((prefix + name, info.st_size))
                        elif stat.S_ISLNK(info.st_mode):
                            entries.append((prefix + name, None))
                        if len(entries) >= limit:
                            return entries, True
                finally:
                    os.close(fd)
        finally:
            for fd, _ in stack:
                os.close(fd)
        return entries, False

    def listing(self, limit: int = 30) -> str:
        entries, more = self.walk(limit=limit)
        names = [name for name, size in entries if size is not None]
        if not names:
            return "(none)"
        return ", ".join(names) + (" (and more)" if more else "")


class WorkspaceManager:
    """Hands out workspaces by episode id: creates, owns, caps and removes their directories."""

    def __init__(self, root: Path, *, quota_mb: int = 0, uid_base: int = 200_000, idle_s: float = 0.0):
        if quota_mb > 0 and os.geteuid() != 0:
            raise ValueError(
                f"GAIA_ENV_WORKSPACE_QUOTA_MB={quota_mb} needs root (each workspace is a size-limited tmpfs); "
                f"run the environment as root, or set GAIA_ENV_WORKSPACE_QUOTA_MB=0 for workspaces without a quota"
            )
        root = Path(root)
        created = not root.exists()
        self.root = Path(os.path.realpath(root))
        self.root.mkdir(parents=True, exist_ok=True)
        if created or os.geteuid() == 0:
            os.chmod(self.root, 0o700)  # nobody but root walks in; sandboxes get their own directory bound
        self.quota_mb = quota_mb
        self.uid_base = uid_base
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._known: dict[str, Workspace] = {}
        self._slots: set[int] = set()
        for stale in _quota_mounts_under(self.root):  # a crashed run's tmpfs: nobody owns it any more
            _unmount(stale)

    def _take_uid(self) -> int:
        if os.geteuid() != 0:
            return os.getuid()
        slot = 1  # slot 0 (SANDBOX_UID_BASE itself) is the start-up probe's
        while slot in self._slots:
            slot += 1
        self._slots.add(slot)
        return self.uid_base + slot

    def get(self, key: str) -> tuple[Workspace, bool]:
        """The workspace for ``key`` and whether it was created just now."""
        check_workspace_key(key)
        workspace = self._known.get(key)
        if workspace is not None:
            workspace.last_used = time.monotonic()
            return workspace, False
        with self._lock:
            workspace = self._known.get(key)
            if workspace is not None:
                return workspace, False
            path = self.root / key
            created = not path.exists() or not os.listdir(path)
            uid = self._take_uid()
            try:
                prepare_directory(path, uid, self.quota_mb)
            except OSError as exc:
                self._slots.discard(uid - self.uid_base)
                raise ToolError(f"cannot prepare the workspace of episode {key!r}: {exc}") from None
            workspace = Workspace(key, path, uid)
            self._known[key] = workspace
            return workspace, created

    def remove(self, key: str) -> None:
        check_workspace_key(key)
        with self._lock:
            workspace = self._known.pop(key, None)
            if workspace is not None:
                self._slots.discard(workspace.uid - self.uid_base)
            path = self.root / key
            if os.path.ismount(path):
                _unmount(path)
            shutil.rmtree(path, ignore_errors=True)

    def sweep(self) -> list[str]:
        """Remove workspaces idle for longer than ``idle_s``; their keys."""
        if self.idle_s <= 0:
            return []
        cutoff = time.monotonic() - self.idle_s
        stale = [key for key, ws in list(self._known.items()) if not ws.busy and ws.last_used < cutoff]
        for key in stale:
            self.remove(key)
        if stale:
            logger.info("removed %d idle workspace(s) (GAIA_ENV_WORKSPACE_IDLE_S=%g)", len(stale), self.idle_s)
        return stale

    def close(self) -> None:
        """Remove every workspace of this run (the server is stopping)."""
        for key in list(self._known):
            self.remove(key)
        for stale in _quota_mounts_under(self.root):
            _unmount(stale)
