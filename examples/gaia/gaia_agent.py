"""The GAIA agent, written the way the seed writes it, and a factory backends can import.

    from gaia_agent import build_gaia_agent
    agent = build_gaia_agent()          # reads LLM_* and MCP_SERVER_* from the environment / .env

The job config points at ``gaia_agent.py:build_gaia_agent`` (an import reference: backend workers
in other processes rebuild the agent from it; objects never travel).
"""

from __future__ import annotations

import os

from aworld_core import Agent, AgentConfig, get_agent_tool_env_and_servers

GAIA_SYSTEM_PROMPT = """You are an all-capable AI assistant that solves the task the user gives you, \
however hard, by using the tools at hand: reading documents (PDF, Word, Excel, PowerPoint, CSV, text), \
running Python and shell commands in your workspace, searching the web, Wikipedia, the Wayback Machine \
and arXiv, reading web pages, and asking vision and speech models about images and audio.

Work step by step. Before each tool call, say briefly what you want to find out. Check facts that \
matter in more than one source when you can. Files the task mentions are in your workspace; refer to \
them by their names.

When you are sure, give the final answer inside <answer></answer> tags, in exactly the form the \
question asks for: a number without units or thousands separators unless asked, as few words as \
possible for a string, a comma-separated list for a list. Nothing else goes inside the tags.
Today is {date}."""

# the tool servers a GAIA agent uses (all of the environment's; trim to make episodes cheaper)
GAIA_SERVERS = [
    "documents-csv", "documents-xlsx", "documents-docx", "documents-pptx", "documents-pdf", "documents-txt",
    "intelligence-code", "intelligence-think", "intelligence-guard", "terminal", "download", "readweb",
    "wiki", "wayback", "arxiv", "search", "media-image", "media-audio", "media-video", "browser",
]


def build_gaia_agent(servers: list[str] | None = None, max_steps: int = 30) -> Agent:
    """The agent the job trains; its model endpoint is only used when it is not the trained policy."""
    import datetime

    gaia_env_config, gaia_env_servers = get_agent_tool_env_and_servers(
        servers=servers or os.environ.get("MCP_SERVERS") or GAIA_SERVERS
    )
    return Agent(
        name="gaia_super_agent",
        system_prompt=GAIA_SYSTEM_PROMPT.format(date=datetime.date.today().isoformat()),
        conf=AgentConfig(
            llm_base_url=os.environ.get("LLM_BASE_URL"),
            llm_model_name=os.environ.get("LLM_MODEL_NAME"),
            llm_api_key=os.environ.get("LLM_API_KEY"),
            max_steps=max_steps,
            tool_timeout_s=300,
            temperature=0.6,
        ),
        mcp_config=gaia_env_config,
        mcp_servers=gaia_env_servers,
    )
