"""Fixtures for the ms-swift suite: run with ``.venvs/swift/bin/python -m pytest tests/swift``.

ms-swift 4.6 pins ``trl<1.0`` and ``transformers<5.20``, so it has its own environment
(``.venvs/swift``, see ``plugins/aworld-swift/test-env.txt``); in any other environment this
folder is skipped. Everything is real and local: the test MCP server (official SDK) on
127.0.0.1, a tiny model warm-started here, ms-swift's own generation and GRPO trainer.

Nothing may reach a hub: the HuggingFace libraries are offline, and every other HTTP(S) client
that honours proxy settings is pointed at a closed local port (loopback excepted), so a stray
hub call fails at once instead of leaving the machine.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)


def _has_swift() -> bool:
    try:
        return importlib.util.find_spec("swift.rollout.multi_turn") is not None
    except ImportError:
        return False


if not _has_swift():
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def mcp_server() -> Iterator[Any]:
    """The test MCP server (``add`` only) on 127.0.0.1, streamable HTTP."""
    from aworld_core.testing import McpHttpServer

    server = McpHttpServer(name="calc", tools=["add"]).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mcp_config(mcp_server: Any) -> dict[str, Any]:
    return {"mcpServers": {"calc": mcp_server.config()}}


@pytest.fixture(scope="session")
def add_tools(mcp_config: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool schemas the agent is offered, listed by aworld-swift's probe episode."""
    from swift_testkit import SYSTEM_PROMPT

    from aworld_core import Agent
    from aworld_core.schemas import Sample
    from aworld_swift.rows import list_agent_tools

    agent = Agent(name="calc", system_prompt=SYSTEM_PROMPT, mcp_config=mcp_config)
    sample = Sample(id="probe", prompt=[{"role": "user", "content": "What is 1 + 2?"}])
    return asyncio.run(list_agent_tools(agent, sample, timeout=30))


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory, add_tools: list[dict[str, Any]]) -> Path:
    from swift_testkit import build_tool_model

    return build_tool_model(tmp_path_factory.mktemp("swift-tool-model"), add_tools)
