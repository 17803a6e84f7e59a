"""The core starts a job's tool environment, exports its address, and stops it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from aworld_core.environments import running_environment
from aworld_core.errors import AworldError
from aworld_core.settings import get_settings
from aworld_core.tools.mcp_config import configured_release

SERVER = """
import json, sys, time
print("starting up", flush=True)
print(json.dumps({"ip": "127.0.0.1", "port": 4321, "token": "t0k"}), flush=True)
time.sleep(60)
"""


def test_address_is_exported_while_running_and_restored_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MCP_SERVER_URL", raising=False)
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    with running_environment(["python", str(script)], servers=["a", "b"]) as info:
        assert info["url"] == "http://127.0.0.1:4321/mcp"
        assert os.environ["MCP_SERVER_TOKEN"] == "t0k" and os.environ["MCP_SERVERS"] == "a,b"
        assert get_settings().mcp_server_url == "http://127.0.0.1:4321/mcp"
        assert configured_release(get_settings().mcp_server_release) is None  # it declares no release
    assert "MCP_SERVER_URL" not in os.environ
    with running_environment(["python", str(script)], release="POST {base}/end/{episode_id}"):
        assert configured_release(get_settings().mcp_server_release) == "POST {base}/end/{episode_id}"
    assert "MCP_SERVER_RELEASE" not in os.environ
    assert get_settings().mcp_server_url is None


def test_environment_that_dies_reports_its_output(tmp_path: Path):
    script = tmp_path / "bad.py"
    script.write_text("print('cannot bind port 8000', flush=True)\nraise SystemExit(3)\n")
    with pytest.raises(AworldError, match="exited before it was ready(.|\n)*cannot bind port 8000"):
        with running_environment([sys.executable, str(script)]):
            pass
