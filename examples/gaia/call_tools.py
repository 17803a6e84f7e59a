"""List the GAIA environment's tools and call them from Python, with the official MCP client.

    python -m aworld_gaia_env serve --workspace /tmp/gaia-ws     # prints MCP_SERVER_URL=... MCP_SERVER_TOKEN=...
    export MCP_SERVER_URL=http://127.0.0.1:8000/mcp MCP_SERVER_TOKEN=...
    python examples/gaia/call_tools.py                           # every tool, one line each
    python examples/gaia/call_tools.py --servers wiki,documents-txt --episode try-1 \\
        --call documents-txt__list_files '{}'

What an agent's client sends, and nothing more: ``Authorization: Bearer <token>``; ``MCP_SERVERS``
(the tool servers to offer: the same names ``--servers`` takes, upstream aliases such as
``readweb-server`` accepted); ``X-Episode-Id`` (the workspace the calls share: files written by one
call are read by the next; ``DELETE /workspaces/<episode>`` frees it). A tool's answer is a list of
content blocks: text, and for ``browser__screenshot`` an image (also saved in the workspace).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any


async def main(url: str, token: str, servers: str | None, episode: str, calls: list[tuple[str, dict[str, Any]]]) -> int:
    import httpx2  # the HTTP client of the mcp SDK 2.x
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}", "X-Episode-Id": episode}
    if servers:
        headers["MCP_SERVERS"] = servers
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = (await client.list_tools()).tools
            if not calls:
                for tool in tools:
                    print(f"{tool.name}: {(tool.description or '').split('. ')[0]}")
                print(f"{len(tools)} tools")
            failed = 0
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                for block in result.content:
                    if block.type == "text":
                        print(block.text)
                    else:  # an image or other binary part
                        print(f"[{block.type} {getattr(block, 'mime_type', '')}]")
                failed += bool(result.is_error)
            return 1 if failed else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("MCP_SERVER_URL"), help="default: MCP_SERVER_URL")
    parser.add_argument("--servers", default=None, help="comma list of tool servers (default: all served)")
    parser.add_argument("--episode", default="python-try", help="the workspace the calls share")
    parser.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON_ARGUMENTS"),
                        help="call a tool (repeatable), e.g. --call wiki__search '{\"query\": \"penguin\"}'")
    args = parser.parse_args(argv)
    if not args.url or not os.environ.get("MCP_SERVER_TOKEN"):
        parser.error("set MCP_SERVER_URL (or --url) and MCP_SERVER_TOKEN to what 'python -m aworld_gaia_env serve' printed")
    try:
        args.calls = [(name, json.loads(arguments)) for name, arguments in args.call]
    except json.JSONDecodeError as exc:
        parser.error(f"--call arguments must be a JSON object: {exc}")
    return args


if __name__ == "__main__":
    options = parse()
    sys.exit(asyncio.run(main(options.url, os.environ["MCP_SERVER_TOKEN"], options.servers, options.episode, options.calls)))
