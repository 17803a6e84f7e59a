"""Fixtures for the tests that go through AReaL's real ``RemoteInfEngine`` (``pytest_plugins``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from areal_sglang_server import SGLangServer, areal_engine


@pytest.fixture(scope="session")
def sglang_server(tool_model_dir: Path) -> Any:
    server = SGLangServer(tool_model_dir).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def real_engine(sglang_server: SGLangServer) -> Any:
    engine = areal_engine(sglang_server)
    yield engine
    engine.destroy()
