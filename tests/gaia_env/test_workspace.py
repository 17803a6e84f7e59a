"""Workspace path checks, and the plugin's registrations as the core sees them."""

from __future__ import annotations

import os
import stat
import time

import pytest

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.workspace import WorkspaceManager


def test_paths_stay_inside_and_links_are_not_followed(tmp_path):
    workspace, created = WorkspaceManager(tmp_path / "root").get("ep-1")
    assert created and workspace.path.is_dir()
    (workspace.path / "sub").mkdir()
    (workspace.path / "a.txt").write_text("A")
    assert workspace.relative("sub/../a.txt") == "a.txt"
    assert workspace.relative(str(workspace.path / "sub")) == "sub"
    assert workspace.read_bytes("sub/../a.txt") == b"A"
    for bad in ("../a.txt", "/etc/passwd", "sub/../../x"):
        with pytest.raises(ToolError, match="outside the workspace"):
            workspace.relative(bad)
    (workspace.path / "out").symlink_to(tmp_path)
    with pytest.raises(ToolError, match="symbolic link"):
        workspace.read_bytes("out/anything")
    (workspace.path / "in").symlink_to(workspace.path / "a.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        workspace.read_bytes("in")
    with pytest.raises(ToolError, match="empty file path"):
        workspace.relative("  ")
    os.mkfifo(workspace.path / "pipe")  # opening a FIFO must not block the server
    with pytest.raises(ToolError, match="not a regular file"):
        workspace.read_bytes("pipe")
    entries, more = workspace.walk()
    assert dict(entries) == {"a.txt": 1, "in": None, "out": None} and not more


def test_workspaces_are_private_to_their_episode(tmp_path):
    manager = WorkspaceManager(tmp_path / "root", uid_base=300_000)
    first, _ = manager.get("ep-a")
    second, _ = manager.get("ep-b")
    assert stat.S_IMODE(os.stat(manager.root).st_mode) == 0o700
    for ws in (first, second):
        info = os.stat(ws.path)
        assert stat.S_IMODE(info.st_mode) == 0o700
    if os.geteuid() == 0:
        assert first.uid != second.uid and os.stat(first.path).st_uid == first.uid
    rel = first.add_file("sub/new.txt", b"x")
    assert rel == "sub/new.txt" and (first.path / "sub" / "new.txt").read_bytes() == b"x"
    assert os.stat(first.path / "sub" / "new.txt").st_uid == first.uid  # the episode's code may change it


@pytest.mark.skipif(os.geteuid() != 0, reason="the quota is a tmpfs per workspace, which needs root")
def test_quota_workspace_is_its_own_tmpfs_and_goes_away(tmp_path):
    manager = WorkspaceManager(tmp_path / "root", quota_mb=8)
    workspace, _ = manager.get("ep-q")
    assert os.path.ismount(workspace.path) and os.statvfs(workspace.path).f_blocks * os.statvfs(workspace.path).f_frsize == 8 * 2**20
    with pytest.raises(ToolError, match="workspace is full"):
        workspace.add_file("big.bin", b"x" * (9 * 2**20))
    assert workspace.walk() == ([], False)  # the partial file was removed
    manager.remove("ep-q")
    assert not workspace.path.exists()
    again, _ = manager.get("ep-q2")
    manager.close()
    assert not again.path.exists()


def test_quota_needs_root(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("as root the quota works")
    with pytest.raises(ValueError, match="GAIA_ENV_WORKSPACE_QUOTA_MB=0"):
        WorkspaceManager(tmp_path, quota_mb=8)


def test_episode_ids_are_checked_not_rewritten(tmp_path):
    manager = WorkspaceManager(tmp_path)
    assert manager.get("ep-1")[1] is True and manager.get("ep-1")[1] is False
    for bad in ("..", "a/b", ".hidden", "", "x" * 200):
        with pytest.raises(ToolError, match="invalid episode id"):
            manager.get(bad)
    manager.remove("ep-1")
    assert not (tmp_path / "ep-1").exists()


def test_plugin_registers_the_environment_and_dataset():
    from aworld_core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    environments = [spec for specs in pm.hook.register_environments() for spec in specs]
    gaia = next(spec for spec in environments if spec.name == "gaia")
    assert gaia.serve_command == ("python", "-m", "aworld_gaia_env", "serve")
    datasets = [spec for specs in pm.hook.register_datasets() for spec in specs]
    assert any(spec.name == "gaia" and spec.loader == "aworld_gaia_env.data:load_gaia" for spec in datasets)


def test_idle_workspaces_are_swept_busy_ones_kept(tmp_path):
    manager = WorkspaceManager(tmp_path / "root", idle_s=0.05)
    idle, _ = manager.get("ep-idle")
    busy, _ = manager.get("ep-busy")
    with busy.in_use():
        time.sleep(0.1)
        assert manager.sweep() == ["ep-idle"]
    assert not idle.path.exists() and busy.path.exists()
    again, created = manager.get("ep-idle")  # a later call starts a fresh one
    assert created and again.path.is_dir()
    manager.close()
    assert not again.path.exists() and not busy.path.exists()
