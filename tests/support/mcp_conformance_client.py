"""aworld-core's MCP client as the conformance suite's client under test: ``python THIS URL``.

The suite starts a server for its scenario and runs this program with the server's URL; it names
the scenario in ``MCP_CONFORMANCE_SCENARIO`` and gives credentials, where a scenario has them, in
``MCP_CONFORMANCE_CONTEXT`` (the environment, never argv). The program does what an agent's
episode does: ``MCPToolset`` opens the server (OAuth through ``mcp_auth`` where the scenario asks
for it), lists the tools and calls each one, then closes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

ARGUMENTS = {"add_numbers": {"a": 5, "b": 3}}  # the tools_call scenario's tool


def server_entry(scenario: str, url: str, context: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "streamable-http", "url": url, "timeout": 20, "session": "episode",
                             "tools_cache_ttl": 0}  # fmt: skip
    if scenario.startswith("elicitation"):
        entry["elicitation"] = "accept_defaults"  # the scenario checks the schema's defaults come back
    if scenario.startswith("auth/"):
        if "client-credentials" in scenario:
            auth = {"grant": "client_credentials"}
        else:
            auth = {"grant": "authorization_code"}  # the suite's authorization server grants at once
        for key in ("client_id", "client_secret"):
            if context.get(key):
                auth[key] = context[key]
        entry["auth"] = auth
    return entry


async def main(url: str) -> int:
    from aworld_core.tools.mcp_client import MCPToolset, close_shared_sessions
    from aworld_core.tools.mcp_config import MCPServerConfig

    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    config = MCPServerConfig.model_validate(server_entry(scenario, url, context))
    toolset = MCPToolset({"conformance": config}, headers={"X-Episode-Id": "conformance"})
    try:
        specs = await toolset.open()
        for spec in specs:
            outcome = await toolset.executor(spec)(ARGUMENTS.get(spec.real_name, {}))
            print(json.dumps({"tool": spec.real_name, "content": outcome.content, "is_error": outcome.is_error,
                              "elicitations": outcome.elicitations}))  # fmt: skip
    finally:
        await toolset.aclose()
        await close_shared_sessions()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
