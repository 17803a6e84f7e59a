"""Token-exact rollouts: trained tokens are exactly the sampled ones, on every backend.

``TokenEngine`` (ids in, sampled ids + logprobs + version out) is what a backend implements;
``TokenLLM`` turns any engine into the agent-facing ``LLMClient`` and keeps each episode's exact
token sequence; ``HFTokenEngine`` runs a local HuggingFace model; ``aworld_core.gateway`` puts an
OpenAI-compatible HTTP API in front of a ``TokenLLM``. torch / transformers load only when used.
"""

from aworld_core.tokens.chat_template import ChatRenderer, load_chat_template
from aworld_core.tokens.engine import (
    ABORT,
    LENGTH,
    LOGPROBS_MODE,
    STOP,
    STOP_TOKEN_IDS,
    TokenEngine,
    TokenOutput,
)
from aworld_core.tokens.families import TemplateOptions, available_families, family_options
from aworld_core.tokens.hf_engine import HFTokenEngine
from aworld_core.tokens.llm import TokenLLM, copy_tokenizer_files, load_tokenizer
from aworld_core.tokens.messages import content_text
from aworld_core.tokens.parsers import (
    ParsedText,
    ToolParser,
    available_tool_parsers,
    get_tool_parser,
    register_tool_parser,
)
from aworld_core.tokens.scripted import ScriptedTokenEngine
from aworld_core.tokens.session import TokenSession
from aworld_core.tokens.turn import TurnRefused, current_turn
from aworld_core.tokens.vllm_engine import VLLMTokenEngine

__all__ = [
    "ABORT",
    "LENGTH",
    "LOGPROBS_MODE",
    "STOP",
    "STOP_TOKEN_IDS",
    "ChatRenderer",
    "HFTokenEngine",
    "ParsedText",
    "ScriptedTokenEngine",
    "TemplateOptions",
    "TokenEngine",
    "TokenLLM",
    "TokenOutput",
    "TokenSession",
    "ToolParser",
    "TurnRefused",
    "VLLMTokenEngine",
    "available_families",
    "available_tool_parsers",
    "content_text",
    "copy_tokenizer_files",
    "current_turn",
    "family_options",
    "get_tool_parser",
    "load_chat_template",
    "load_tokenizer",
    "register_tool_parser",
]
