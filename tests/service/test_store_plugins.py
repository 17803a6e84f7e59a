"""Task stores are found by URL scheme in the entry-point group ``aworld_service.stores``: a
third-party distribution adds one without any change here, and a wrong registration is named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aworld_core.errors import UsageError
from aworld_service.store import STORE_ENTRY_POINT_GROUP, open_store, store_schemes

STORE = '''
from aworld_service.sqlite_store import SQLiteTaskStore

class FileTaskStore(SQLiteTaskStore):
    """file://PATH: a SQLite store under another scheme (what a third-party store looks like)."""

    def __init__(self, url, **options):
        super().__init__("sqlite:///" + url.removeprefix("file://"), **options)

NOT_A_STORE = object
'''


def _store_dist(site: Path) -> None:
    site.mkdir(parents=True)
    (site / "aworld_filestore.py").write_text(STORE)
    info = site / "aworld_filestore-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aworld-filestore\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{STORE_ENTRY_POINT_GROUP}]\nfile = aworld_filestore:FileTaskStore\nbogus = aworld_filestore:NOT_A_STORE\n"
    )


def test_the_shipped_stores_are_registered_by_scheme() -> None:
    schemes = store_schemes()
    assert schemes["sqlite"] == "aworld_service.sqlite_store:SQLiteTaskStore"
    assert schemes["postgresql"] == schemes["postgres"] == "aworld_service.postgres_store:PostgresTaskStore"


def test_a_third_party_store_is_opened_by_its_scheme(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _store_dist(site)
    code = (
        "import asyncio, sys\n"
        "from aworld_core.errors import UsageError\n"
        "from aworld_core.schemas import AworldTask\n"
        "from aworld_service import open_store\n"
        "async def main():\n"
        "    store = open_store('file://' + sys.argv[1])\n"
        "    await store.open()\n"
        "    await store.submit([AworldTask(task_id='t', agent_id='a', agent_input='x')])\n"
        "    print(type(store).__name__, (await store.get('t')).status.value)\n"
        "    await store.close()\n"
        "    for url in ('bogus://x', 'nope://x'):\n"
        "        try:\n"
        "            open_store(url)\n"
        "        except UsageError as exc:\n"
        "            print('refused', exc)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "tasks.sqlite")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "FileTaskStore init"
    assert "registered for bogus:// (aworld_filestore:NOT_A_STORE) is not a TaskStore subclass" in lines[1]
    assert "unknown task store URL 'nope://x'" in lines[2] and "also installed: bogus://..., file://..." in lines[2]
    assert (tmp_path / "tasks.sqlite").exists()


def test_an_unknown_scheme_names_the_shipped_ones() -> None:
    for url in ("mysql://db", "tasks.sqlite"):
        try:
            open_store(url)
        except UsageError as exc:
            assert "sqlite:///path/to/tasks.sqlite" in str(exc) and "postgresql://" in str(exc)
        else:
            raise AssertionError(f"{url} was accepted")
