"""Test kit for plugin authors: real components to test a backend or environment against.

* a tiny tokenizer and Qwen2 model made on the spot with a chosen chat template
  (``make_tiny_model``, ``get_tiny_model_dir``, ``load_tiny_tokenizer``, ``load_tiny_model``,
  ``load_template``, ``assistant_turn_text``; needs ``pip install 'aworld-core[hf]'``);
* ``ScriptedTokenEngine``: a ``TokenEngine`` answering predetermined ids (no model);
* ``check_segments(view, engine.calls)``: an episode's training segments against what the engine
  sampled, token for token (every sampled token trains, nothing else does);
* a real MCP server with test tools (``McpHttpServer`` in a thread, ``McpServerProcess`` as a
  process, ``stdio_server_config``; ``python -m aworld_core.testing.mcp_server``);
* ``aworld_core.testing.smolagents_client:smolagents_agent``: real smolagents (``ToolCallingAgent``
  over ``OpenAIServerModel``) as a job's ``agent.openai_agent`` (needs ``pip install smolagents``);
* pytest fixtures ``tiny_model_dir``, ``tiny_tokenizer``, ``tiny_model``:
  ``pytest_plugins = ["aworld_core.testing.fixtures"]``.

Names are imported lazily: ``import aworld_core.testing`` imports neither torch, transformers
nor uvicorn; a missing extra raises ``MissingExtraError`` naming what to install.
"""

from __future__ import annotations

from aworld_core.lazy import lazy_exports

_TINY = "aworld_core.testing.tiny_model"
_MCP = "aworld_core.testing.mcp_server"

_EXPORTS: dict[str, str] = {
    # the tiny model and its chat templates
    "DEFAULT_TEMPLATE": _TINY,
    "SPECIAL_TOKENS": _TINY,
    "TAG_TOKENS": _TINY,
    "TEMPLATES_DIR": _TINY,
    "TEMPLATE_NAMES": _TINY,
    "assistant_turn_text": _TINY,
    "build_tiny_model": _TINY,
    "build_tiny_tokenizer": _TINY,
    "get_tiny_model_dir": _TINY,
    "load_template": _TINY,
    "load_tiny_model": _TINY,
    "load_tiny_tokenizer": _TINY,
    "make_tiny_model": _TINY,
    "template_text": _TINY,
    # the scripted token engine (it lives in aworld_core.tokens)
    "ScriptedCall": "aworld_core.tokens.scripted",
    "ScriptedTokenEngine": "aworld_core.tokens.scripted",
    # an episode's training segments against the engine's calls
    "check_segments": "aworld_core.testing.segments",
    # the MCP test server
    "ALL_TOOLS": _MCP,
    "McpHttpServer": _MCP,
    "McpServerProcess": _MCP,
    "build_app": _MCP,
    "build_mcp_server": _MCP,
    "server_command": _MCP,
    "stdio_server_config": _MCP,
    "wait_for_port": _MCP,
    # errors
    "MissingExtraError": "aworld_core.testing._extras",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__
