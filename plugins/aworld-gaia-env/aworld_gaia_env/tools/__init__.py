"""The tool servers, under the names users know from the upstream GAIA environment."""

from __future__ import annotations

from aworld_gaia_env.tools.base import ToolDef

SERVER_NAMES = (
    "documents-csv",
    "documents-xlsx",
    "documents-docx",
    "documents-pptx",
    "documents-pdf",
    "documents-txt",
    "intelligence-code",
    "intelligence-think",
    "intelligence-guard",
    "terminal",
    "download",
    "readweb",
    "wiki",
    "wayback",
    "arxiv",
    "search",
    "media-image",
    "media-audio",
    "media-video",
    "browser",
)


SERVER_ALIASES = {
    "parxiv": "arxiv",
    "googlesearch": "search",
    "browseruse": "browser",
}
"""Upstream names that differ from ours beyond the ``-server`` suffix."""

SEED_SERVERS = (
    "readweb-server,browseruse-server,documents-csv-server,documents-docx-server,documents-pptx-server,"
    "documents-pdf-server,documents-txt-server,download-server,intelligence-code-server,intelligence-think-server,"
    "intelligence-guard-server,media-audio-server,media-image-server,media-video-server,parxiv-server,"
    "terminal-server,wayback-server,wiki-server,googlesearch-server"
)
"""The upstream seed's own ``MCP_SERVERS`` value (its agent config sends exactly this)."""


def canonical_server(name: str) -> str:
    """Our name for a server name as users write it: ``-server`` suffix dropped, upstream aliases mapped
    (``parxiv-server`` -> ``arxiv``, ``googlesearch-server`` -> ``search``, ``browseruse-server`` -> ``browser``)."""
    plain = name.strip().lower()
    if plain.endswith("-server"):
        plain = plain[: -len("-server")]
    return SERVER_ALIASES.get(plain, plain)


def server_catalog() -> dict[str, list[ToolDef]]:
    """Every server's tools, in the order above (document parsers import their libraries lazily)."""
    from aworld_gaia_env.tools import attachments, browser, code, documents, llm_tools, video, web

    catalog: dict[str, list[ToolDef]] = {name: [] for name in SERVER_NAMES}
    for module in (documents, code, web, attachments, llm_tools, video, browser):
        for tool in module.TOOLS:
            catalog[tool.server].append(tool)
    empty = [name for name, tools in catalog.items() if not tools]
    if empty:  # a server without tools is a packaging bug, not something to serve silently
        raise RuntimeError(f"tool servers without tools: {empty}")
    return catalog
