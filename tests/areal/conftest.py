"""Fixtures for the AReaL suite (run it with ``.venvs/areal/bin/python -m pytest tests/areal``).

Skipped where AReaL is not installed. Real parts only: an MCP server on loopback, a tiny Qwen2
model made here (fitted to one tool conversation), AReaL's own classes and validators.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

try:  # not just ``import areal``: with tests/ on sys.path, this folder is a namespace "areal"
    import areal.api.cli_args  # noqa: F401
except ImportError:  # the suite runs in .venvs/areal (plugins/aworld-areal/test-env.txt)
    collect_ignore_glob = ["test_*.py"]

from aworld_core.testing import McpHttpServer, get_tiny_model_dir

# this folder's helpers (areal_*.py) import by name; no __init__.py here, so that ``areal``
# stays AReaL's package even with tests/ on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))

from areal_tool_model import SYSTEM_PROMPT, ScriptedClient, fit_tool_model, tool_sample


@pytest.fixture(scope="session")
def mcp_server() -> Any:
    server = McpHttpServer(name="calc", tools=["add", "sleep"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tool_conversation(mcp_server: Any) -> tuple[str, list[dict[str, Any]]]:
    """The taught conversation as rendered text, and the tool schemas the runtime offered."""
    from aworld_core.agents.agent import Agent
    from aworld_core.runtime.episode import run_episode
    from aworld_core.tokens.chat_template import ChatRenderer
    from aworld_core.tokens.llm import load_tokenizer

    agent = Agent("adder", system_prompt=SYSTEM_PROMPT, mcp_config={"mcpServers": {"calc": mcp_server.config()}})
    client = ScriptedClient()
    episode = asyncio.run(run_episode(agent, tool_sample(), llm=client, timeout=30))
    assert episode.status.value == "success", episode.error
    assert client.tools, "the runtime offered no tools"
    renderer = ChatRenderer(load_tokenizer(get_tiny_model_dir()))
    text = renderer.render(episode.messages, client.tools, generation_prompt=False)
    return text, client.tools


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory, tool_conversation: Any) -> Path:
    text, _ = tool_conversation
    return fit_tool_model(get_tiny_model_dir(), tmp_path_factory.mktemp("tool-model"), text)


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
