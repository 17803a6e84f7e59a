"""Chat-template rendering for the token path: the first prompt, and the env delta of a turn.

The env tokens of a turn are the template's own render of the new messages (tool results, user
turns) and of the next generation prompt, placed after the assistant's sampled turn. They are
found from the real conversation, never from a stand-in: ``past`` is the render of the history
ending with the real assistant message (its content and its tool calls with their arguments, as
parsed) and ``full`` the render of the history plus the new messages. The assistant's own
terminator is the last one inside its turn in ``past``; when ``past`` up to there is a prefix of
``full`` the env text is exactly ``full`` from that terminator on. Nothing is searched for past the
assistant's turn, so a tool result that spells a terminator cannot move the cut.

A template that renders earlier turns differently once new ones follow (Qwen3 strips earlier
``<think>`` blocks, Mistral v3 moves its tools block to the last user message) is not prefix-stable;
``TemplateOptions.history_changes`` decides: ``keep`` the sequence the policy saw and place the new
messages after the assistant's terminator as re-rendered (bounded by two probe renders; exactly one
terminator may lie between the assistant's content and the first new content, else an error),
``restart`` a segment from a fresh render (the view
is marked ``history_rewritten``), or ``error``. A new message whose content the template leaves out
(Phi-4 drops tool results) and a template that raises are ``EpisodeInputError``s naming the template.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aworld_core.errors import EpisodeInputError, LLMError, UsageError
from aworld_core.schemas import Message
from aworld_core.tokens.families import TemplateOptions

logger = logging.getLogger(__name__)

_PROBES = ("AWORLDPROBE7Q", "ZAWORLDPROBE7Q")  # two, so one always differs from the next character
_CONTENT_PROBE = "AWORLDCONTENTPROBE4K"  # replaces a content whose presence a render must show
_SURE_LENGTH = 16  # a content this long found in a render is the content (unless template text spells it)


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


def _template_name(chat_template: str | Path | None, options: TemplateOptions) -> str:
    """How errors name the template: its family, its file, or where it came from."""
    if isinstance(chat_template, Path) or (
        isinstance(chat_template, str) and "{{" not in chat_template and "{%" not in chat_template
    ):
        where = f"chat template {Path(chat_template).name!r}"
    elif chat_template is None:
        where = "the tokenizer's chat template"
    else:
        where = "the given chat template"
    return f"{where} (family {options.family})" if options.family else where


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class Delta:
    """The env side of one turn."""

    ids: list[int]  # env tokens to append after the sampled ones (mask 0)
    text: str  # the template's render of the whole conversation with the generation prompt
    restart: bool = False  # not prefix-stable and history_changes="restart": start a new segment
    history_changed: bool = False  # the template re-rendered earlier turns (the sequence keeps them)


class ChatRenderer:
    """Renders and tokenizes conversations with one tokenizer, one template and its options."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | Path | None = None,
        *,
        end_of_turn: str | int | None = None,
        template_kwargs: dict[str, Any] | None = None,
        options: TemplateOptions | None = None,
    ):
        self.tokenizer = tokenizer
        self.options = options or TemplateOptions()
        self.template = load_chat_template(chat_template, tokenizer)
        self.template_name = _template_name(chat_template, self.options)
        self.template_kwargs = {**self.options.chat_template_kwargs, **(template_kwargs or {})}
        # tokens that end a sampled turn (engine stops), then those the template may render instead
        if end_of_turn is not None:
            self.terminators = dict([self._end_of_turn(end_of_turn)])
        elif self.options.terminators:
            self.terminators = dict(self._single_token(t, "terminators") for t in self.options.terminators)
        else:
            self.terminators = dict([self._end_of_turn(None)])
        self.closing = {**self.terminators}
        for text in self.options.history_terminators:
            key, value = self._single_token(text, "history_terminators")
            self.closing[key] = value
        self.eot_text, self.eot_id = next(iter(self.terminators.items()))
        self.stop_ids = list(dict.fromkeys(self.terminators.values()))
        self._warned = False

    # -- rendering ---------------------------------------------------------------------------

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, *, generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                self._template_messages(messages),
                tools=tools or None,
                chat_template=self.template,
                add_generation_prompt=generation_prompt,
                tokenize=False,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja errors and the template's own raise_exception()
            kind = type(exc).__name__
            if kind == "TemplateError":  # raise_exception("...") in the template: its own condition
                raise EpisodeInputError(f"{self.template_name} rejects this conversation: {exc}") from exc
            raise EpisodeInputError(f"{self.template_name} failed on this conversation: {kind}: {exc}") from exc

    def _template_messages(self, messages: list[Message]) -> list[Message]:
        """The messages as this family's template wants them (argument form, tool role)."""
        opts = self.options
        if opts.tool_arguments == "dict" and opts.tool_role == "tool":
            return messages
        out: list[Message] = []
        merged_tool = False  # the last message of ``out`` is tool results made into a user turn
        for message in messages:
            if message["role"] == "assistant" and message.get("tool_calls") and opts.tool_arguments == "json":
                message = {**message, "tool_calls": [_json_arguments(c) for c in message["tool_calls"]]}
            if message["role"] == "tool" and opts.tool_role == "user":
                text = message.get("content") or ""
                if merged_tool:
                    out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n\n{text}"}
                else:
                    out.append({"role": "user", "content": text})
                merged_tool = True
                continue
            merged_tool = False
            out.append(message)
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text. Templates write their own BOS, so none is added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> tuple[str, list[int]]:
        """The rendered first prompt (with the generation prompt) and its ids."""
        text = self.render(messages, tools, generation_prompt=True)
        self._check_contents(text, messages, [], tools)
        return text, self.encode(text)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.prompt(messages, tools)[1]

    # -- the env delta -----------------------------------------------------------------------

    def delta(
        self,
        history: list[Message],
        new_messages: list[Message],
        tools: list[dict[str, Any]] | None,
        *,
        previous: str | None,
        last_sampled: int | None,
    ) -> Delta:
        """The env tokens for ``new_messages`` after the last assistant turn of ``history``.

        ``history`` ends with the real assistant message; ``previous`` is the render (with the
        generation prompt) the assistant sampled after; ``last_sampled`` its last sampled id.
        The env tokens start with the template's terminator unless the model sampled one: then
        the sampled one closes the turn (when the template renders a different one in history,
        gpt-oss's ``<|end|>`` for a sampled ``<|return|>``, the sampled one stands in for it),
        except for families whose terminator opens the next turn (GLM), where a different one
        stays as env because it is the next turn's role.
        """
        full = self.render([*history, *new_messages], tools, generation_prompt=True)
        past = self.render(history, tools, generation_prompt=False)
        start = _common_prefix(previous, past) if previous is not None else 0
        changed = previous is not None and start < len(previous)
        end = self._turn_end(past, start)
        self._check_calls(history, tools, past)
        stable = full.startswith(past[:end])
        mode = self.options.history_changes
        if (changed or not stable) and mode != "keep":
            # the sequence sampled so far is not the start of the template's conversation, whether
            # the re-render shows between the last prompt and the history (``changed``) or only
            # once the new messages follow
            if mode == "restart":
                return Delta([], full, restart=True, history_changed=True)
            raise EpisodeInputError(
                f"{self.template_name} renders the earlier turns differently once the new "
                f"{_roles(new_messages)} message(s) follow (it is not prefix-stable), so the sequence "
                "sampled so far is not the start of the template's conversation; set "
                "template_options.history_changes to 'keep' or 'restart'"
            )
        if stable:
            at = end
        else:
            changed = True
            at = self._tail_start(full, history, new_messages, tools)
        env = full[at:]
        if changed:
            self._check_kept_history(previous, full, at, history, new_messages, tools)
            self._note_history_change()
        term = self._terminator_at(env)
        self._check_contents(env, new_messages, history, tools)
        ids = self.encode(env)
        if not ids or ids[0] != self.closing[term]:
            raise LLMError(
                f"{term!r} does not tokenize to its own id {self.closing[term]} at the start of the next "
                "turn; terminators must be single special tokens"
            )
        if last_sampled == ids[0]:
            return Delta(ids[1:], full, history_changed=changed)  # the sampled terminator is the template's
        if self.options.terminator_opens_next_turn or last_sampled not in self._end_ids():
            return Delta(ids, full, history_changed=changed)  # the template's terminator closes the turn
        if term in self.options.history_terminators:
            # the family's documented stand-in (gpt-oss: a sampled <|return|> where history renders <|end|>)
            return Delta(ids[1:], full, history_changed=changed)
        # the model ended its turn with a token the template does not render there (Llama 3.1: a
        # sampled <|eom_id|> where it renders <|eot_id|>): neither appending the template's token
        # after the sampled one nor letting the sampled one stand in is the template's conversation
        sampled = self.tokenizer.convert_ids_to_tokens(last_sampled)
        if mode == "error":
            raise EpisodeInputError(
                f"the model ended its turn with {sampled!r} where {self.template_name} renders {term!r}, so "
                "the sequence would not be the template's conversation; set template_options.history_changes "
                "to 'restart' (a fresh segment from the template's render)"
            )
        logger.debug("sampled %r where the template renders %r: a new segment from a fresh render", sampled, term)
        return Delta([], full, restart=True, history_changed=True)

    def _end_ids(self) -> set[int]:
        """Ids that end a sampled turn: the terminators and the tokenizer's EOS (an engine stops on it)."""
        ids = set(self.terminators.values())
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        return ids

    def _check_kept_history(
        self,
        previous: str | None,
        full: str,
        at: int,
        history: list[Message],
        new_messages: list[Message],
        tools: list[dict[str, Any]] | None,
    ) -> None:
        """``keep`` splices the new messages' render after the sequence the policy saw; that is exact
        only when the re-render changed earlier text in place (Qwen3's stripped ``<think>``,
        Hermes' whitespace). A template that *moves* text the policy already saw to after the
        assistant's turn (Mistral v3's tools block and system text go to the last user message)
        would have it trained twice, and one that stops rendering an earlier message (Mistral v3's
        system text once a tool turn follows) would train a conversation it never renders: both
        are errors. Moved text: any piece of what ``previous`` held beyond its common prefix with
        the new render, when it is an earlier message's content or a tool's name or description,
        now found after the assistant's turn and nowhere before it (and not in the new messages)."""
        if previous is None:
            return
        for message in history:
            content = message.get("content")
            content = content.strip() if isinstance(content, str) else ""
            if message["role"] == "assistant" or not content:
                continue
            forms = (content, json.dumps(content, ensure_ascii=False)[1:-1])
            if any(form in previous for form in forms) and not any(form in full for form in forms):
                raise EpisodeInputError(
                    f"{self.template_name} no longer renders the earlier {message['role']!r} message "
                    f"({content[:40]!r}) once the new {_roles(new_messages)} message(s) follow, so the sequence "
                    "the policy saw is not a conversation the template renders; leave that message out (e.g. "
                    "no system message with this template) or use a template that keeps rendering it"
                )
        removed = previous[_common_prefix(previous, full) :]
        news = "\n".join(str(m.get("content") or "") for m in new_messages)
        head, tail = full[:at], full[at:]
        candidates = [(f"the earlier {m['role']!r} message", m.get("content")) for m in history if m["role"] != "assistant"]
        for tool in tools or []:
            function = tool.get("function") or {}
            candidates += [("the tools block", function.get("name")), ("the tools block", function.get("description"))]
        for what, text in candidates:
            text = text.strip() if isinstance(text, str) else ""
            if len(text) < 4 or text in news:
                continue
            forms = (text, json.dumps(text, ensure_ascii=False)[1:-1])
            if any(f in removed for f in forms) and any(f in tail for f in forms) and not any(f in head for f in forms):
                raise EpisodeInputError(
                    f"{self.template_name} moves {what} ({text[:40]!r}) to after the assistant's turn once the new "
                    f"{_roles(new_messages)} message(s) follow (it renders it with the last user message), so "
                    "keeping the sequence the policy saw would train it twice; set "
                    "template_options.history_changes='restart' (a fresh segment, marked history_rewritten)"
                )

    def _turn_end(self, past: str, start: int) -> int:
        """Where the last assistant turn's terminator starts in ``past`` (its render when last)."""
        if self.options.terminator_opens_next_turn:
            return len(past)  # the next turn's role token closes it; ``past`` ends with the turn
        best, found = -1, ""
        for text in self.closing:
            at = past.rfind(text, max(0, start - len(text) + 1))  # may begin inside the common prefix
            if at > best or (at == best and len(text) > len(found)):
                best, found = at, text
        if best < 0:
            return len(past)  # closed only once something follows: ``full`` must put it there
        after = past[best + len(found) :]
        if after.strip():
            raise LLMError(
                f"{self.template_name} does not end an assistant turn with one of {sorted(self.closing)} "
                f"(after the last one it renders {after[:60]!r}); set template_options.terminators (or the "
                "family) to the tokens it ends assistant turns with"
            )
        return best

    def _terminator_at(self, env: str) -> str:
        matches = [t for t in self.closing if env.startswith(t)]
        if not matches:
            raise LLMError(
                f"{self.template_name} renders {env[:60]!r} right after the assistant's turn where one of "
                f"{sorted(self.closing)} was expected; set template_options.terminators (or the family) to "
                "the tokens it ends assistant turns with"
            )
        return max(matches, key=len)

    def _tail_start(
        self,
        full: str,
        history: list[Message],
        new_messages: list[Message],
        tools: list[dict[str, Any]] | None,
    ) -> int:
        """The assistant's terminator in ``full`` when earlier turns were re-rendered.

        Two probe renders bound it: a probe text inserted in the middle of the last assistant's
        content and in the middle of the first new message's content (the middle keeps any check a
        template makes on how a content starts or ends). The first difference from ``full`` is
        inside the assistant's turn, resp. inside the new content (which must be preceded by its
        first half). Exactly one terminator must lie between the two: the assistant's own. A second
        one (spelled by the model's text or by template text such as a moved tools block) would make
        the cut a guess, so that is an error.
        """
        low = _common_prefix(full, self.render([*_probed(history, -1), *new_messages], tools, generation_prompt=True))
        first = new_messages[0]
        content = first.get("content") or ""
        half = len(content) // 2
        begin = _common_prefix(full, self.render([*history, *_probed(new_messages, 0)], tools, generation_prompt=True))
        begin -= half
        if begin < low or full[begin : begin + half] != content[:half]:
            raise EpisodeInputError(self._unplaceable(new_messages))
        found = {at for t in self.closing for at in _occurrences(full, t, low, begin)}
        if len(found) != 1:
            raise EpisodeInputError(self._unplaceable(new_messages))
        return found.pop()

    def _unplaceable(self, new_messages: list[Message]) -> str:
        return (
            f"{self.template_name} renders the earlier turns differently once the new {_roles(new_messages)} "
            "message(s) follow, and the end of the assistant's turn cannot be placed exactly in the new render; "
            "set template_options.history_changes='restart' (a fresh segment, marked history_rewritten)"
        )

    def _check_contents(
        self, env: str, new_messages: list[Message], before: list[Message], tools: list[dict[str, Any]] | None
    ) -> None:
        """Every new message's content must be in its rendered text: a template that leaves one
        out would hide it from the model and from the trained sequence. Assistant messages are not
        checked (templates legitimately cut their reasoning out of the content).

        Finding the content in ``env`` settles it when the content is long and spelled nowhere in
        the template or the tools; a short one ("a", "2") or one the template could write itself
        ("assistant", a tool's description) may be found in the template's own text, so then the
        conversation (``before`` + the new messages) is rendered once more with each such content
        replaced by its own probe text, which must appear (one extra render for all of them)."""
        doubtful: list[int] = []
        for index, message in enumerate(new_messages):
            if message["role"] == "assistant":
                continue
            content = (message.get("content") or "").strip()
            if not content:
                continue
            if content not in env and json.dumps(content, ensure_ascii=False)[1:-1] not in env:
                raise self._left_out(message)
            if self._ambiguous(content, tools):
                doubtful.append(index)
        if doubtful:
            probed = list(new_messages)
            for index in doubtful:
                probed[index] = {**probed[index], "content": _content_probe(index)}
            text = self.render([*before, *probed], tools, generation_prompt=True)
            for index in doubtful:
                if _content_probe(index) not in text:
                    raise self._left_out(new_messages[index])

    def _left_out(self, message: Message) -> EpisodeInputError:
        role = message["role"]
        content = (message.get("content") or "").strip()
        hint = " or template_options.tool_role='user'" if role == "tool" else ""
        return EpisodeInputError(
            f"{self.template_name} leaves out the content of a new {role!r} message "
            f"({content[:60]!r}): the model would never see it; use a template that renders {role} "
            f"messages{hint}"
        )

    def _ambiguous(self, content: str, tools: list[dict[str, Any]] | None) -> bool:
        """Whether finding ``content`` in a render may be the template's own text, not the content."""
        if len(content) < _SURE_LENGTH or content in self.template:
            return True
        return bool(tools) and content in json.dumps(tools, ensure_ascii=False)

    def _check_calls(self, history: list[Message], tools: list[dict[str, Any]] | None, past: str) -> None:
        """A template that renders the assistant's tool calls must render all of them: one that
        keeps only the first (gpt-oss's takes one per message) would head the results of the others
        with the wrong call. Told apart by rendering the turn without its last call: the same text
        means that call is not rendered; templates that render no calls at all (Phi-4) are left
        alone, the sequence keeps the calls as sampled."""
        assistant = history[-1]
        calls = assistant.get("tool_calls") or []
        if len(calls) < 2:
            return
        fewer = self.render([*history[:-1], {**assistant, "tool_calls": calls[:-1]}], tools, generation_prompt=False)
        if fewer != past:
            return
        none = {k: v for k, v in assistant.items() if k != "tool_calls"}
        if self.render([*history[:-1], none], tools, generation_prompt=False) == past:
            return
        raise EpisodeInputError(
            f"{self.template_name} does not render every tool call of a turn ({len(calls)} calls: "
            f"{', '.join(c['function']['name'] for c in calls)}), so the results that follow would be attributed "
            "to the wrong calls; use a template that renders every call of a turn, or have the model make one "
            "call per turn"
        )

    def _note_history_change(self) -> None:
        if not self._warned:
            self._warned = True
            limits = f" ({self.options.limits})" if self.options.limits else ""
            logger.info(
                "%s renders earlier turns differently once later ones follow%s; the token sequence keeps what "
                "the policy saw, so it differs from a fresh render of the conversation there",
                self.template_name,
                limits,
            )

    # -- setup ----------------------------------------------------------------------------------

    def _single_token(self, text: str, field: str) -> tuple[str, int]:
        ids = self.encode(text)
        if len(ids) != 1:
            raise UsageError(
                f"{field} entry {text!r} is not a single token of this tokenizer (it encodes to {len(ids)} ids); "
                "give the special tokens this tokenizer ends assistant turns with, or another family"
            )
        return text, ids[0]

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
            "(e.g. '<|im_end|>' or '<|eot_id|>') or a family"
        )


def _content_probe(index: int) -> str:
    """The probe text standing in for new message ``index``'s content (none is a part of another)."""
    return f"{_CONTENT_PROBE}{index}X"


def _probed(messages: list[Message], index: int) -> list[Message]:
    """``messages`` with a probe text inserted in the middle of message ``index``'s content."""
    out = list(messages)
    content = out[index].get("content") or ""
    half = len(content) // 2
    probe = next(p for p in _PROBES if not content[half:].startswith(p[0]))
    out[index] = {**out[index], "content": content[:half] + probe + content[half:]}
    return out


def _occurrences(text: str, sub: str, start: int, end: int) -> list[int]:
    """Where ``sub`` starts in ``text[start:end]`` (whole occurrences only)."""
    found, at = [], text.find(sub, start, end)
    while at >= 0:
        found.append(at)
        at = text.find(sub, at + 1, end)
    return found


def _json_arguments(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        return call
    return {**call, "function": {**fn, "arguments": json.dumps(args if args is not None else {}, ensure_ascii=False)}}


def _roles(messages: list[Message]) -> str:
    return "/".join(dict.fromkeys(m["role"] for m in messages))
