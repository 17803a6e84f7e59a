"""Chat-template rendering for the token path: the first prompt, and the env delta of a turn.

The delta of a turn is what the template puts after the assistant's sampled text: its
end-of-turn token, the separator after it, the new messages (tool results, user turns) and the
next generation prompt. It is found by rendering the conversation with a marker as the last
assistant's content and cutting at the first end-of-turn token after the marker. That keeps it
right for templates that render the conversation differently as a whole (Qwen3 strips earlier
``<think>`` blocks; Qwen2.5 and Llama-3 inject a default system block at the top): only the text
after the last assistant turn is used, so nothing before it can leak into the response.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from aworld_core.errors import EpisodeInputError, LLMError, UsageError
from aworld_core.schemas import Message

_MARKS = itertools.count()


def load_chat_template(chat_template: str | Path | None, tokenizer: Any) -> str:
    """The template text: given text, a file path, or the tokenizer's own."""
    if chat_template is None:
        own = getattr(tokenizer, "chat_template", None)
        if not own:
            raise UsageError(
                "the tokenizer has no chat template; pass chat_template= (a .jinja file or the template text)"
            )
        if isinstance(own, dict):  # tokenizers with named templates keep the default under "default"
            own = own.get("default") or next(iter(own.values()))
        return own
    if isinstance(chat_template, Path) or ("{{" not in chat_template and "{%" not in chat_template):
        path = Path(chat_template).expanduser()
        if not path.is_file():
            raise UsageError(f"chat template file {str(path)!r} does not exist (pass a .jinja file or the text)")
        return path.read_text()
    return chat_template


class ChatRenderer:
    """Renders and tokenizes conversations with one tokenizer and one template."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | Path | None = None,
        *,
        end_of_turn: str | int | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ):
        self.tokenizer = tokenizer
        self.template = load_chat_template(chat_template, tokenizer)
        self.template_kwargs = dict(template_kwargs or {})
        self.eot_text, self.eot_id = self._end_of_turn(end_of_turn)

    # -- rendering ---------------------------------------------------------------------------

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, *, generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                chat_template=self.template,
                add_generation_prompt=generation_prompt,
                tokenize=False,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja errors and the template's own raise_exception()
            raise EpisodeInputError(f"the chat template failed on this conversation: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text. Templates write their own BOS, so none is added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render(messages, tools, generation_prompt=True))

    def delta_ids(
        self,
        before: list[Message],
        assistant: Message,
        new_messages: list[Message],
        tools: list[dict[str, Any]] | None,
    ) -> list[int]:
        """Ids from the last assistant's end-of-turn token up to the next generation prompt.

        ``before`` is the conversation before the assistant turn ``assistant``. The first id is
        always ``eot_id``; the caller drops it when the model sampled it.
        """
        mark = f"AWORLDTURNMARK{next(_MARKS)}X"
        # The stand-in carries no model text, so nothing sampled can be mistaken for the
        # end-of-turn token. Templates that insist on tool results answering tool calls get the
        # calls' names (with empty arguments) on a second try.
        dummy: Message = {"role": "assistant", "content": mark}
        try:
            text = self.render([*before, dummy, *new_messages], tools, generation_prompt=True)
        except UsageError:
            if not assistant.get("tool_calls"):
                raise
            text = ""
        at = text.find(mark)
        if at < 0 and assistant.get("tool_calls"):
            dummy["tool_calls"] = [
                {"id": c.get("id"), "type": "function", "function": {"name": c["function"]["name"], "arguments": {}}}
                for c in assistant["tool_calls"]
            ]
            text = self.render([*before, dummy, *new_messages], tools, generation_prompt=True)
            at = text.find(mark)
        if at < 0:
            raise LLMError(
                "the chat template does not print an assistant message's content, so the tokens of "
                "the next turn cannot be placed after the sampled ones; use a template that renders "
                "assistant content"
            )
        eot_at = text.find(self.eot_text, at + len(mark))
        if eot_at < 0:
            raise LLMError(
                f"the chat template does not close an assistant turn with {self.eot_text!r}; pass "
                "end_of_turn= the token the template ends assistant turns with"
            )
        ids = self.encode(text[eot_at:])
        if not ids or ids[0] != self.eot_id:
            raise LLMError(
                f"{self.eot_text!r} does not tokenize to its own id {self.eot_id}; pass end_of_turn= a "
                "single special token"
            )
        return ids

    # -- setup ----------------------------------------------------------------------------------

    def _end_of_turn(self, end_of_turn: str | int | None) -> tuple[str, int]:
        """The token that closes an assistant turn: given, or read off the template."""
        tok = self.tokenizer
        if isinstance(end_of_turn, int):
            return tok.convert_ids_to_tokens(end_of_turn), end_of_turn
        if isinstance(end_of_turn, str):
            ids = self.encode(end_of_turn)
            if len(ids) != 1:
                raise UsageError(f"end_of_turn={end_of_turn!r} is not a single token of this tokenizer")
            return end_of_turn, ids[0]
        mark = "AWORLDEOTPROBE"
        text = self.render(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": mark}], None, generation_prompt=False
        )
        at = text.find(mark)
        after = self.encode(text[at + len(mark) :]) if at >= 0 else []
        special = set(getattr(tok, "all_special_ids", [])) | set(getattr(tok, "added_tokens_decoder", {}))
        if after and after[0] in special:
            return tok.convert_ids_to_tokens(after[0]), after[0]
        eos = getattr(tok, "eos_token", None)
        if at >= 0 and eos and text.find(eos, at) >= 0:
            return eos, tok.convert_tokens_to_ids(eos)
        raise UsageError(
            "cannot tell which token ends an assistant turn in this chat template; pass end_of_turn= "
            "(e.g. '<|im_end|>' or '<|eot_id|>')"
        )
