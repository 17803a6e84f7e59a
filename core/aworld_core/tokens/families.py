"""Chat-template families: which tokens end an assistant turn, which parser reads its tool calls,
and what the template needs from the messages, as one typed profile (``TemplateOptions``).

Chat templates differ in ways the token path must know and cannot read off the template alone:
Llama-3.1 ends a tool-call turn with ``<|eom_id|>`` and others with ``<|eot_id|>``; gpt-oss samples
``<|call|>`` or ``<|return|>`` and renders ``<|end|>`` in history; GLM-4.5 has no end token (the next
role's token ends a turn); DeepSeek-V3 wants tool-call arguments as a JSON string; Gemma-3 has no
tool role; Mistral refuses tool-call ids that are not 9 letters and digits. A named preset
(``family="gpt-oss"``) sets all of that at once; any field can be overridden.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aworld_core.errors import UsageError

HistoryChanges = Literal["keep", "restart", "error"]


class TemplateOptions(BaseModel):
    """How one chat-template family is driven on the token path (see docs/token-fidelity.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: str | None = Field(default=None, description="The preset these options came from (named in errors).")
    terminators: list[str] = Field(
        default_factory=list,
        description="Tokens that end an assistant turn when sampled (all are engine stop tokens); "
        "empty: the one the template closes an assistant turn with.",
    )
    history_terminators: list[str] = Field(
        default_factory=list,
        description="Tokens the template may render after a past assistant turn in place of the sampled "
        "terminator (gpt-oss: <|end|>); never stop tokens.",
    )
    terminator_opens_next_turn: bool = Field(
        default=False,
        description="The terminators are the next turn's role tokens (GLM-4.5: <|user|>, <|observation|>).",
    )
    tool_parser: str | None = Field(default=None, description="Tool-call parser name; default: hermes.")
    tool_call_id: Literal["prefix", "alnum9"] | None = Field(
        default=None,
        description="Tool-call id format: 'prefix' (call_<hash>_<turn>_<i>) or 'alnum9' (9 letters and digits, "
        "Mistral); default: the parser's own.",
    )
    tool_arguments: Literal["dict", "json"] = Field(
        default="dict", description="Tool-call arguments given to the template as a dict or as a JSON string."
    )
    tool_role: Literal["tool", "user"] = Field(
        default="tool", description="Tool results rendered as 'tool' turns, or as 'user' turns (consecutive ones merged)."
    )
    history_changes: HistoryChanges = Field(
        default="keep",
        description="When the template renders earlier turns differently once new ones follow: 'keep' the "
        "sequence the policy saw, 'restart' a segment from a fresh render (history_rewritten), or 'error'.",
    )
    think_in_prompt: bool = Field(
        default=False,
        description="The generation prompt may open a <think> block itself (reasoning models), so a sampled "
        "turn's text up to its first </think> is reasoning even without an opening tag; otherwise only a turn "
        "that starts with <think> has reasoning. A </think> after a tool-call marker never splits.",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Extra variables for the template (e.g. builtin_tools for Llama-3.1)."
    )
    limits: str = Field(default="", description="Known limits of the family on the token path, for docs and errors.")

    def merged(self, overrides: TemplateOptions | dict[str, Any] | None) -> TemplateOptions:
        """These options with the fields ``overrides`` sets explicitly replaced."""
        if overrides is None:
            return self
        if isinstance(overrides, dict):
            overrides = TemplateOptions.model_validate(overrides)
        update = overrides.model_dump(include=overrides.model_fields_set)
        return self.model_copy(update=update) if update else self


_IM_END = ["<|im_end|>"]
_LLAMA = ["<|eot_id|>", "<|eom_id|>"]
_DEEPSEEK_EOS = ["<｜end▁of▁sentence｜>"]

FAMILIES: dict[str, TemplateOptions] = {
    options.family: options  # type: ignore[misc]
    for options in (
        TemplateOptions(family="qwen2.5", terminators=_IM_END, tool_parser="hermes"),
        TemplateOptions(
            family="qwen3",
            terminators=_IM_END,
            tool_parser="hermes",
            think_in_prompt=True,
            limits="the template strips earlier turns' <think> blocks; the sequence keeps them as sampled, "
            "so it differs from a fresh render there",
        ),
        TemplateOptions(family="qwen3-coder", terminators=_IM_END, tool_parser="qwen3_coder"),
        TemplateOptions(
            family="hermes-2-pro",
            terminators=_IM_END,
            tool_parser="hermes",
            limits="a tool result renders '</tool_response><|im_end|>' when last and '</tool_response>\\n"
            "<|im_end|>' when followed; the sequence keeps the first form (what the policy saw)",
        ),
        TemplateOptions(
            family="llama3.1",
            terminators=_LLAMA,
            tool_parser="llama3_json",
            limits="the template renders <|eot_id|> after every turn: a sampled <|eom_id|> ends the segment and the "
            "episode goes on from a fresh render",
        ),
        TemplateOptions(
            family="llama3.1-ipython",
            terminators=_LLAMA,
            tool_parser="llama3_json",
            limits="tool-call turns end with <|eom_id|> (pass builtin_tools in chat_template_kwargs)",
        ),
        TemplateOptions(
            family="mistral-v3",
            terminators=["</s>"],
            tool_parser="mistral",
            tool_call_id="alnum9",
            history_changes="restart",
            limits="the template moves the tools block and the system text to the last user message, so a "
            "user follow-up restarts the segment (history_rewritten); it renders the system text only while a "
            "user message is last, so after a tool turn the restart's fresh render has no system message and "
            "the episode is refused (use mistral-v11's template, or no system message)",
        ),
        TemplateOptions(
            family="mistral-v11",
            terminators=["</s>"],
            tool_parser="mistral",
            tool_call_id="alnum9",
            history_changes="restart",
            limits="the template moves the tools block to the last user message, so a user follow-up restarts "
            "the segment (history_rewritten)",
        ),
        TemplateOptions(
            family="deepseek-v3", terminators=_DEEPSEEK_EOS, tool_parser="deepseek_v3", tool_arguments="json"
        ),
        TemplateOptions(
            family="deepseek-r1",
            terminators=_DEEPSEEK_EOS,
            tool_parser="deepseek_r1",
            tool_arguments="json",
            think_in_prompt=True,
            limits="the generation prompt opens <think> and history drops reasoning; the sequence keeps it",
        ),
        TemplateOptions(
            family="gemma3",
            terminators=["<end_of_turn>"],
            tool_role="user",
            limits="no tool role: tool results are user turns (consecutive results merged, blank line between)",
        ),
        TemplateOptions(
            family="phi4",
            terminators=_IM_END,
            limits="the template renders only system/user/assistant: a tool result is an error (it would "
            "vanish from the model's context); use tool_role='user' to send results as user turns",
        ),
        TemplateOptions(
            family="gpt-oss",
            terminators=["<|call|>", "<|return|>"],
            history_terminators=["<|end|>"],
            tool_parser="gpt_oss",
            limits="history renders <|end|> where <|return|> was sampled: the sampled token is kept and "
            "trained, the template's <|end|> is left out",
        ),
        TemplateOptions(
            family="glm4.5",
            terminators=["<|user|>", "<|observation|>", "<|assistant|>"],
            terminator_opens_next_turn=True,
            tool_parser="glm45",
            think_in_prompt=True,
            limits="no end-of-turn token: the next role's token ends a turn and opens the next one",
        ),
    )
}


def available_families() -> list[str]:
    return sorted(FAMILIES)


def family_options(name: str) -> TemplateOptions:
    """The preset called ``name``; a ``UsageError`` listing the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(
            f"unknown chat-template family {name!r}; choose one of {', '.join(available_families())} "
            "(or leave it unset and give template_options)"
        ) from None


def resolve_options(
    family: str | None = None, overrides: TemplateOptions | dict[str, Any] | None = None
) -> TemplateOptions:
    """The preset ``family`` (or the defaults) with ``overrides`` applied."""
    base = family_options(family) if family else TemplateOptions()
    return base.merged(overrides)
