"""Chat-template families for token-fidelity tests: the templates in this folder and what a test needs
to know about each (its control tokens, how its model ends a turn, its tool-call parser, the
options its template needs, whether it is prefix-stable).

The ``.jinja`` files are written here from the published templates of each family (nothing can be
downloaded at test time); each file's header says what it keeps and what it cuts. A family's
tokenizer is the kit's tiny BPE tokenizer with the family's control tokens added as special
tokens, so ``[TOOL_CALLS]`` or ``<|channel|>`` are one id each, as in the real vocabularies.

``family_tokenizer(name)``, ``family_template(name)``, ``FAMILIES[name]`` and
``model_turn_text(family, tokenizer, message, tools)`` (what a model trained on the template
samples for an assistant message, terminator included).
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class TemplateFamily:
    """One template variant and the facts a token-fidelity test needs about it."""

    name: str
    template: str  # the .jinja file's stem
    preset: str  # the TokenLLM family preset that drives it (aworld_core.tokens.families)
    parser: str  # tool parser name (aworld_core.tokens.parsers)
    stops: tuple[str, ...]  # tokens the model ends a turn with; the first is the usual one
    special_tokens: tuple[str, ...] = ()  # added to the tiny tokenizer (beyond its ChatML/Llama-3 ones)
    bos: str | None = None
    eos: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    arguments: str = "dict"  # how the template wants tool-call arguments: "dict" or "string" (JSON text)
    tool_role: str = "tool"  # "user": the template has no tool role; results go in as user turns
    id_format: str = "prefix"  # tool-call id format the template accepts ("alnum9": 9 letters/digits)
    max_calls: int = 3  # calls per assistant turn the template renders (1: parallel calls unsupported)
    prefix_stable: bool = True  # a fresh render of the finished conversation equals the sequence
    reasoning: str = "none"  # "think": <think> blocks; "harmony": analysis channel
    supported: bool = True  # False: the token path must refuse the family with a clear error
    notes: str = ""


_MISTRAL = ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]", "[/TOOL_RESULTS]")
_DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
             "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
             "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
             "<｜tool▁output▁end｜>")
_HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>")

FAMILIES: dict[str, TemplateFamily] = {
    f.name: f
    for f in (
        TemplateFamily("qwen2_5", "qwen2_5", "qwen2.5", "hermes", ("<|im_end|>",), notes="ChatML, default system block"),
        TemplateFamily("qwen3", "qwen3", "qwen3", "hermes", ("<|im_end|>",), prefix_stable=False, reasoning="think",
                       notes="earlier <think> blocks stripped on re-render"),
        TemplateFamily("qwen3_coder", "qwen3_coder", "qwen3-coder", "qwen3_coder", ("<|im_end|>",),
                       notes="XML-style parameters typed back by the tool schema"),
        TemplateFamily("mistral_v3", "mistral_v3", "mistral-v3", "mistral", ("</s>",), _MISTRAL, bos="<s>", eos="</s>",
                       id_format="alnum9", prefix_stable=False,
                       notes="system text and tools block move to the last user message"),
        TemplateFamily("mistral_v11", "mistral_v11", "mistral-v11", "mistral", ("</s>",),
                       (*_MISTRAL, "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[CALL_ID]", "[ARGS]", "[TOOL_CONTENT]"),
                       bos="<s>", eos="</s>", id_format="alnum9", prefix_stable=False,
                       notes="tools block moves to the last user message; empty assistant turns refused"),
        TemplateFamily("deepseek_v3", "deepseek_v3", "deepseek-v3", "deepseek_v3", ("<｜end▁of▁sentence｜>",), _DEEPSEEK,
                       bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>", arguments="string"),
        TemplateFamily("deepseek_r1", "deepseek_r1", "deepseek-r1", "deepseek_r1", ("<｜end▁of▁sentence｜>",), _DEEPSEEK,
                       bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>", arguments="string",
                       reasoning="think", notes="reasoning dropped on re-render (prefix-stable without it)"),
        TemplateFamily("gemma3", "gemma3", "gemma3", "hermes", ("<end_of_turn>",), ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
                       bos="<bos>", eos="<eos>", tool_role="user", prefix_stable=False,
                       notes="no tool role, tool calls not rendered, content trimmed, strict alternation"),
        TemplateFamily("phi4", "phi4", "phi4", "hermes", ("<|im_end|>",), ("<|im_sep|>",), supported=False,
                       notes="renders only system/user/assistant: tool results would vanish"),
        TemplateFamily("phi4_tools_as_user", "phi4", "phi4", "hermes", ("<|im_end|>",), ("<|im_sep|>",),
                       tool_role="user", prefix_stable=False,
                       notes="tool results sent as user turns; tool calls are not rendered in history"),
        TemplateFamily("hermes2pro", "hermes2pro", "hermes-2-pro", "hermes", ("<|im_end|>",), bos="<|begin_of_text|>",
                       prefix_stable=False, notes="last tool result renders differently once a turn follows"),
        TemplateFamily("llama31", "llama31", "llama3.1", "llama3_json", ("<|eot_id|>",), bos="<|begin_of_text|>", max_calls=1,
                       notes="one call per turn; content trimmed; tool results JSON-encoded"),
        TemplateFamily("llama31_ipython", "llama31", "llama3.1-ipython", "llama3_json", ("<|eom_id|>", "<|eot_id|>"),
                       bos="<|begin_of_text|>", max_calls=1,
                       template_kwargs={"builtin_tools": ["brave_search", "wolfram_alpha"]},
                       notes="tool-call turns end with <|eom_id|>"),
        TemplateFamily("gpt_oss", "gpt_oss", "gpt-oss", "harmony", ("<|call|>", "<|return|>"), _HARMONY, eos="<|return|>",
                       max_calls=1, prefix_stable=False, reasoning="harmony",
                       notes="final <|return|> re-rendered as <|end|>; earlier analysis dropped"),
        TemplateFamily("glm45", "glm45", "glm4.5", "glm45", ("<|observation|>", "<|user|>"),
                       ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                        "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
                       eos="<|endoftext|>", reasoning="think", notes="no end-of-turn token: next role tokens"),
    )
}


def family_template(name: str) -> str:
    """The Jinja text of family ``name``."""
    family = _family(name)
    if name not in _TEXTS:
        _TEXTS[name] = (HERE / f"{family.template}.jinja").read_text()
    return _TEXTS[name]


_LOCK = threading.Lock()
_BASE: list[Any] = []
_TOKENIZERS: dict[str, Any] = {}
_HEADS: dict[tuple[int, str, str], str] = {}
_TEXTS: dict[str, str] = {}


def family_tokenizer(name: str) -> Any:
    """The tiny tokenizer with family ``name``'s control tokens (one special id each), its BOS/EOS
    and its template as ``chat_template``; built once per process."""
    family = _family(name)
    with _LOCK:
        if name not in _TOKENIZERS:
            if not _BASE:
                from aworld_core.testing.tiny_model import build_tiny_tokenizer

                _BASE.append(build_tiny_tokenizer())
            tok = copy.deepcopy(_BASE[0])
            new = [t for t in family.special_tokens if t not in tok.get_vocab()]
            if new:
                tok.add_tokens(new, special_tokens=True)
            if family.bos:
                tok.bos_token = family.bos
            if family.eos:
                tok.eos_token = family.eos
            tok.chat_template = family_template(name)
            _TOKENIZERS[name] = tok
        return _TOKENIZERS[name]


def model_turn_text(family: TemplateFamily, tokenizer: Any, message: dict[str, Any], tools: Any = None) -> str:
    """What a model trained on ``family``'s template samples for assistant ``message``: the text the
    template puts after the generation prompt, up to and including the first stop token.

    Families without an end-of-turn token (GLM) stop on the next role token, which is appended
    (``<|observation|>`` after tool calls, ``<|user|>`` after an answer).
    """
    template = family_template(family.name)
    context = [{"role": "user", "content": "hi"}]
    kwargs = dict(family.template_kwargs)
    key = (id(tokenizer), family.name, json.dumps(tools, sort_keys=True))
    head = _HEADS.get(key)
    if head is None:
        head = _HEADS[key] = tokenizer.apply_chat_template(
            context, tools=tools, chat_template=template, add_generation_prompt=True, tokenize=False, **kwargs
        )
    full = tokenizer.apply_chat_template(
        [*context, message], tools=tools, chat_template=template, add_generation_prompt=False, tokenize=False, **kwargs
    )
    if not full.startswith(head):
        raise ValueError(f"{family.name}: the context renders differently once an assistant turn follows")
    body = full[len(head) :]
    if family.name == "glm45":
        return body + ("<|observation|>" if message.get("tool_calls") else "<|user|>")
    ends = [body.find(t) + len(t) for t in family.stops if t in body]
    if not ends:
        raise ValueError(f"{family.name}: the assistant turn has none of the stop tokens {family.stops}")
    return body[: min(ends)]


def _family(name: str) -> TemplateFamily:
    if name not in FAMILIES:
        raise KeyError(f"no template family {name!r}; have {', '.join(FAMILIES)}")
    return FAMILIES[name]


__all__ = ["FAMILIES", "TemplateFamily", "family_template", "family_tokenizer", "model_turn_text"]
