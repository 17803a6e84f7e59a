"""Each episode opens its own MCP HTTP client; the TLS context (CA bundle) is built once per process.

Loading the CA bundle took ~20 ms of CPU per episode, more than the rest of the framework's work
for an episode (benchmarks/rollout_overhead.py). Checked by counting CA-bundle loads around real
episodes against a real MCP server, not by timing.
"""

from __future__ import annotations

import ssl

import pytest

from aworld_core.testing import McpHttpServer
from aworld_core.tools.mcp_client import MCPToolset
from aworld_core.tools.mcp_config import parse_mcp_config, select_servers
from aworld_core.tools.mcp_session import ssl_context as _ssl_context


@pytest.fixture(scope="module")
def server():
    with McpHttpServer(name="tls-check", tools=["add"]) as running:
        yield running


@pytest.fixture
def ca_loads(monkeypatch):
    """How many times any TLS context loads CA certificates (both ways httpx2 builds one)."""
    loads = []
    original_load = ssl.SSLContext.load_verify_locations
    original_default = ssl.SSLContext.set_default_verify_paths

    def load(self, *args, **kwargs):
        loads.append("load_verify_locations")
        return original_load(self, *args, **kwargs)

    def default(self, *args, **kwargs):
        loads.append("set_default_verify_paths")
        return original_default(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", load)
    monkeypatch.setattr(ssl.SSLContext, "set_default_verify_paths", default)
    return loads


async def one_episode(servers) -> int:
    toolset = MCPToolset(servers, call_timeout_s=10, connect_retries=0)
    try:
        specs = await toolset.open()
        outcome = await toolset.executor(specs[0])({"a": 2, "b": 3})
        assert not outcome.is_error, outcome.content
        return int(outcome.content)
    finally:
        await toolset.aclose()


async def test_episodes_share_one_tls_context(server, ca_loads):
    servers = select_servers(parse_mcp_config({"mcpServers": {"calc": server.config()}}), None)
    assert await one_episode(servers) == 5  # builds the shared context if no earlier test did
    ca_loads.clear()
    for _ in range(3):
        assert await one_episode(servers) == 5
    assert ca_loads == [], f"CA bundle loaded again in later episodes: {ca_loads}"
    assert _ssl_context() is _ssl_context()
    assert isinstance(_ssl_context(), ssl.SSLContext)
