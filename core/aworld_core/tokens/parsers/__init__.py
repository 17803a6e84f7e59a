"""Tool-call parsers, chosen by name: turn a sampled assistant text into content + tool calls.

Parsing only reads the decoded text (special tokens kept as text); the sampled token ids are never
touched. A call the model wrote but that does not parse becomes a ``ToolCall`` with ``error`` set,
so the runtime can answer it with a tool error the model sees: never a crash, never a silently
dropped call.

Built in (module: what it reads):

* ``hermes`` (tagged): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen2.5/3, Hermes);
* ``qwen3_coder`` (tagged): ``<tool_call><function=name><parameter=p>v</parameter></function></tool_call>``;
* ``glm45`` (tagged): ``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>``;
* ``llama3_json`` (llama): a bare ``{"name": ..., "parameters": {...}}`` answer, calls split by ``;``,
  and Llama-3.1's ``<|python_tag|>`` form (JSON or ``brave_search.call(query="...")``);
* ``mistral`` (mistral): ``[TOOL_CALLS][{...}, ...]`` (v3/v7) and ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}``
  / ``[TOOL_CALLS]name[ARGS]{...}`` (v11+); 9-alphanumeric ids by default;
* ``deepseek_v3`` (alias ``deepseek_r1``; deepseek): ``<｜tool▁calls▁begin｜>...`` with ```json blocks
  (V3, R1) or bare JSON (V3.1);
* ``harmony`` (alias ``gpt_oss``; harmony): gpt-oss channels, ``to=functions.NAME`` calls, analysis as
  reasoning.

Ids: ``id_format="prefix"`` (``id_prefix`` + index) or ``"alnum9"`` (9 letters/digits hashed from
the same text), both deterministic: ``get_tool_parser(name, id_format=...)``.
Add a parser with ``register_tool_parser(name, factory)`` or name an import ref ``"module:Class"``.
"""

from __future__ import annotations

from collections.abc import Callable

from aworld_core.errors import UsageError
from aworld_core.tokens.parsers.base import (
    ID_FORMATS,
    BaseToolParser,
    ParsedText,
    ToolParser,
    check_id_format,
    is_valid_call_id,
    make_call_id,
    split_reasoning,
)
from aworld_core.tokens.parsers.deepseek import DeepSeekParser
from aworld_core.tokens.parsers.harmony import HarmonyParser
from aworld_core.tokens.parsers.llama import Llama3JsonParser
from aworld_core.tokens.parsers.mistral import MistralParser
from aworld_core.tokens.parsers.tagged import Glm45Parser, HermesParser, Qwen3CoderParser

_REGISTRY: dict[str, Callable[[], ToolParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
    "qwen3_coder": Qwen3CoderParser,
    "glm45": Glm45Parser,
    "mistral": MistralParser,
    "deepseek_v3": DeepSeekParser,
    "deepseek_r1": DeepSeekParser,
    "harmony": HarmonyParser,
    "gpt_oss": HarmonyParser,
}


def register_tool_parser(name: str, factory: Callable[[], ToolParser], *, replace: bool = False) -> None:
    """Make ``factory()`` available as ``tool_parser=name``."""
    if name in _REGISTRY and not replace:
        raise UsageError(f"tool parser {name!r} is already registered; pass replace=True to override it")
    _REGISTRY[name] = factory


def available_tool_parsers() -> list[str]:
    return sorted(_REGISTRY)


def get_tool_parser(name: str | ToolParser, *, id_format: str | None = None) -> ToolParser:
    """A parser by registered name, by import ref (``"module:Class"``), or an instance as is.

    ``id_format`` (``"prefix"`` or ``"alnum9"``) overrides the parser's default tool-call id
    format; a parser that has no id format refuses it rather than ignoring it.
    """
    if not isinstance(name, str):
        parser = name
    elif name in _REGISTRY:
        parser = _REGISTRY[name]()
    elif ":" in name:
        from aworld_core.imports import import_ref

        parser = import_ref(name)()
    else:
        raise UsageError(
            f"unknown tool parser {name!r}; choose one of {', '.join(available_tool_parsers())} "
            "or give an import ref 'module:Class'"
        )
    if id_format is not None:
        check_id_format(id_format)
        if not hasattr(parser, "id_format"):
            raise UsageError(
                f"tool parser {type(parser).__name__} has no tool-call id format; id_format={id_format!r} "
                "needs a parser with an 'id_format' attribute (subclass BaseToolParser)"
            )
        parser.id_format = id_format  # type: ignore[union-attr]
    return parser


__all__ = [
    "ID_FORMATS",
    "BaseToolParser",
    "DeepSeekParser",
    "Glm45Parser",
    "HarmonyParser",
    "HermesParser",
    "Llama3JsonParser",
    "MistralParser",
    "ParsedText",
    "Qwen3CoderParser",
    "ToolParser",
    "available_tool_parsers",
    "check_id_format",
    "get_tool_parser",
    "is_valid_call_id",
    "make_call_id",
    "register_tool_parser",
    "split_reasoning",
]
