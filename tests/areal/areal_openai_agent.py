"""An agent written against the OpenAI API (the ``openai`` SDK) with tools from an MCP server (the
official ``mcp`` client): nothing from aworld-core. The job's ``agent.openai_agent`` trains it
by pointing ``base_url`` at the core's gateway. The MCP server's URL comes from
``AREAL_TEST_MCP_URL``, as a real agent would read its own configuration."""

from __future__ import annotations

import json
import os
from typing import Any

from areal_tool_model import SYSTEM_PROMPT


async def adder_agent(sample: Any, *, base_url: str, api_key: str, model: str) -> str | None:
    from mcp import Client
    from openai import AsyncOpenAI

    llm = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    try:
        async with Client(os.environ["AREAL_TEST_MCP_URL"]) as mcp:
            listed = await mcp.list_tools()
            tools = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description or t.title or "",
                        "parameters": t.input_schema,
                    },
                }
                for t in listed.tools
            ]
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, *sample.prompt]
            for _ in range(4):
                reply = await llm.chat.completions.create(model=model, messages=messages, tools=tools)
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    return message.content
                for call in message.tool_calls:
                    result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments))
                    text = "".join(part.text for part in result.content if part.type == "text")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            return None
    finally:
        await llm.close()


async def broken_agent(sample: Any, *, base_url: str, api_key: str, model: str) -> str | None:
    raise RuntimeError("the agent crashed")


async def wrong_type_agent(sample: Any, *, base_url: str, api_key: str, model: str) -> Any:
    return 1.0
