"""What a client asked of one turn beyond the messages: tool choice, one call at most, strict
tool schemas, and tokens handed over as they are sampled.

OpenAI clients constrain turns (``tool_choice: "required"`` or a named function,
``parallel_tool_calls: false``, ``tools[].function.strict``) and stream them. Each is made to take
effect on the token path, or refused; none is ignored:

* **A forced call** (``required`` / a named function) is a *forced prefix*: the template's own
  text of an assistant turn that calls a function, up to the name (``required``: up to where the
  name begins), found by rendering the conversation with a probe call. Its ids go into the
  sequence as env tokens (mask 0: the policy did not sample them) and the model samples the rest
  (mask 1, with its logprobs). The agent sees the whole turn, forced text and all.
* **One call at most** (``parallel_tool_calls: false``, and a named function) stops the turn on
  the token that closes a call (``</tool_call>``): the template's terminator follows as env on the
  next turn, as for any turn the model did not close.
* **No call** (``tool_choice: "none"``) bans the token that opens a call (logit bias -100), so it
  needs an engine with ``logit_bias``.
* **Strict schemas**: a call of a ``strict`` tool whose arguments do not validate against its
  schema is reported as a malformed call (``ToolCall.error``): a client never gets a strict call
  that breaks its schema, and the tokens stay in the episode for the reward to judge.

A family whose call format cannot be cut this way (no single-token call opener or closer, a
template that renders calls elsewhere) refuses the option with a ``TurnRefused`` naming it.

The ``TurnRequest`` travels to ``TokenLLM``'s hooks in a context variable set by ``chat(turn=)``,
so the token path's signatures stay those of the ``LLMClient`` protocol.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aworld_core.errors import UsageError
from aworld_core.schemas import Message, SamplingParams, ToolCall
from aworld_core.tokens.engine import (
    FREQUENCY_PENALTY,
    LOGIT_BIAS,
    PRESENCE_PENALTY,
    STOP_TOKEN_IDS,
    STREAM,
    STRUCTURED_OUTPUT,
    TOP_LOGPROBS,
    TokenOutput,
    engine_features,
)

if TYPE_CHECKING:
    from aworld_core.tokens.llm import TokenLLM

# ``SamplingParams.extra`` key: stop ids the turn stops on but keeps as part of the text (a call's
# closing token); engines see them in ``stop_token_ids`` and ignore this key
KEPT_STOP_IDS = "kept_stop_ids"
BAN = -100.0  # OpenAI's lowest logit bias: the token is never drawn

_PROBE_NAME = "aworldprobefunction"
_PROBE_ID = "a1b2c3d4e"  # nine letters and digits: every family's id format takes it
_INHERENT = -1  # "a call ends the turn": one call at most needs no stop

Sink = Callable[[TokenOutput, bool], None]


class TurnRefused(UsageError):
    """A turn option this engine or template cannot honour; ``param`` is the request field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass
class TurnRequest:
    """One call's options (set by the caller) and what the token path did with them (set by it).

    ``tool_choice``: ``None`` / ``"auto"``, ``"none"``, ``"required"`` or a function name.
    ``parallel_tool_calls``: ``False`` stops the turn after its first call.
    ``sink(chunk, sampled)``: called with the forced ids (``sampled=False``) and then each piece
    of the generation as the engine hands it over (``sampled=True``), before the call returns.
    """

    tool_choice: str | None = None
    function: str | None = None  # the named function of tool_choice, when one is named
    parallel_tool_calls: bool = True
    sink: Sink | None = None
    # filled in by TokenLLM
    forced_ids: list[int] = field(default_factory=list)
    output: TokenOutput | None = None  # the engine's output for the turn (top logprobs and all)


_current: contextvars.ContextVar[TurnRequest | None] = contextvars.ContextVar("aworld_turn", default=None)


def current_turn() -> TurnRequest | None:
    return _current.get()


def set_turn(turn: TurnRequest | None) -> contextvars.Token[TurnRequest | None]:
    return _current.set(turn)


def reset_turn(token: contextvars.Token[TurnRequest | None]) -> None:
    _current.reset(token)


# -- engine features -------------------------------------------------------------------------

_FEATURE_PARAMS = {
    TOP_LOGPROBS: "top_logprobs",
    LOGIT_BIAS: "logit_bias",
    PRESENCE_PENALTY: "presence_penalty",
    FREQUENCY_PENALTY: "frequency_penalty",
    STRUCTURED_OUTPUT: "response_format",
}


def check_features(engine: Any, sampling: SamplingParams) -> None:
    """Refuse sampling options the engine does not honour (``TurnRefused`` naming the field)."""
    features = engine_features(engine)
    for key, param in _FEATURE_PARAMS.items():
        value = sampling.extra.get(key)
        if value is None or key in features:
            continue
        if key in (PRESENCE_PENALTY, FREQUENCY_PENALTY) and not value:
            continue
        raise TurnRefused(
            f"'{param}' is not supported by this token engine ({type(engine).__name__}); it would be "
            f"ignored, so the request is refused: leave '{param}' out"
            + (
                ", or serve with a vLLM engine started with structured_outputs=True"
                if key == STRUCTURED_OUTPUT
                else ""
            ),
            param,
        )


async def generate(
    engine: Any, prompt_ids: list[int], sampling: SamplingParams, request_id: str
) -> TokenOutput:
    """``engine.generate``, or its ``stream`` when the current turn has a sink (each piece handed
    over as it comes; the pieces put together are the output)."""
    turn = current_turn()
    if turn is None or turn.sink is None:
        return await engine.generate(prompt_ids, sampling, request_id=request_id)
    if STREAM not in engine_features(engine):
        out = await engine.generate(prompt_ids, sampling, request_id=request_id)
        turn.sink(out, True)
        return out
    ids: list[int] = []
    logprobs: list[float] | None = []
    versions: list[int] = []
    tops: list[dict[int, float]] | None = []
    reason = None
    async for piece in engine.stream(prompt_ids, sampling, request_id=request_id):
        turn.sink(piece, True)
        ids += piece.token_ids
        versions += piece.versions()
        logprobs = None if logprobs is None or piece.logprobs is None else [*logprobs, *piece.logprobs]
        tops = None if tops is None or piece.top_logprobs is None else [*tops, *piece.top_logprobs]
        reason = piece.stop_reason or reason
    if logprobs is not None and not ids and not logprobs:
        logprobs = []
    return TokenOutput(ids, logprobs, reason, versions, tops if tops and len(tops) == len(ids) else None)


# -- planning a constrained turn ---------------------------------------------------------------


def plan_turn(
    llm: TokenLLM,
    rendered: str | None,
    conversation: list[Message],
    tools: list[dict[str, Any]] | None,
    sampling: SamplingParams,
) -> tuple[list[int], SamplingParams]:
    """The forced ids of the current turn and its sampling settings (bans, stops) for ``llm``.

    ``rendered`` is the template's render (generation prompt included) the turn samples after,
    ``conversation`` the messages it renders, ``tools`` the session's tools."""
    turn = current_turn()
    if turn is None:
        return [], sampling
    choice = turn.tool_choice
    forced: list[int] = []
    extra = dict(sampling.extra)
    one_call = not turn.parallel_tool_calls or turn.function is not None
    if choice in (None, "auto") and not one_call:
        turn.forced_ids = []
        return [], sampling
    names = _tool_names(tools)
    if choice == "none":
        if names:
            openers = _openers(llm, rendered, conversation, tools)
            extra[LOGIT_BIAS] = {**(extra.get(LOGIT_BIAS) or {}), **{i: BAN for i in openers}}
            if LOGIT_BIAS not in engine_features(llm.engine):
                raise TurnRefused(
                    "tool_choice 'none' bans the token that opens a tool call, which needs an engine with "
                    f"logit_bias ({type(llm.engine).__name__} has none); leave 'tools' out of the request instead",
                    "tool_choice",
                )
        one_call = False
    elif choice == "required" or turn.function is not None:
        if not names:
            raise TurnRefused(f"tool_choice {choice!r} needs 'tools'", "tool_choice")
        if turn.function is not None and turn.function not in names:
            raise TurnRefused(
                f"tool_choice names function {turn.function!r}, which is not among the tools ({', '.join(names)})",
                "tool_choice",
            )
        body = _call_turn_text(llm, rendered, conversation, tools, turn.function or _PROBE_NAME)
        name = turn.function or _PROBE_NAME
        at = body.find(name)
        prefix = body[: at + len(name)] if turn.function is not None else body[:at]
        if at < 0:  # the template does not render calls (Gemma-3, Phi-4): nothing to force
            raise TurnRefused(
                f"tool_choice {choice!r}: {llm.renderer.template_name} does not render a tool call as a prefix "
                "the model can continue; leave tool_choice out",
                "tool_choice",
            )
        forced = llm.renderer.encode(prefix)
    if one_call and names:
        closer = _closer(llm, rendered, conversation, tools)
        if closer == _INHERENT:  # a call ends the turn in this family (gpt-oss's <|call|>)
            turn.forced_ids = forced
            return forced, sampling.model_copy(update={"extra": extra})
        if closer is None:
            param = "parallel_tool_calls" if not turn.parallel_tool_calls else "tool_choice"
            raise TurnRefused(
                f"'{param}' asks for one tool call at most, and {llm.renderer.template_name}'s call format has no "
                "single token that closes a call to stop on; leave it out",
                param,
            )
        extra[STOP_TOKEN_IDS] = [*(extra.get(STOP_TOKEN_IDS) or []), closer]
        extra[KEPT_STOP_IDS] = [*(extra.get(KEPT_STOP_IDS) or []), closer]
    turn.forced_ids = forced
    return forced, sampling.model_copy(update={"extra": extra})


def _tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    names = []
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def _special_ids(llm: TokenLLM) -> set[int]:
    tok = llm.tokenizer
    ids = set(getattr(tok, "all_special_ids", []) or [])
    ids.update(int(i) for i in (getattr(tok, "added_tokens_decoder", None) or {}))
    return ids


def _openers(
    llm: TokenLLM, rendered: str | None, conversation: list[Message], tools: list[dict[str, Any]] | None
) -> list[int]:
    """The special ids that open a tool call in this family: those a call turn has before the
    function's name and a plain answer does not (Qwen3's empty think block is in both)."""
    call = _call_turn_text(llm, rendered, conversation, tools, _PROBE_NAME)
    head = call[: call.find(_PROBE_NAME)] if _PROBE_NAME in call else ""
    plain = _turn_text(llm, rendered, conversation, tools, {"role": "assistant", "content": "aworldprobecontent"})
    special = _special_ids(llm)
    openers = {i for i in llm.renderer.encode(head) if i in special} - set(llm.renderer.encode(plain))
    if not openers:
        raise TurnRefused(
            "tool_choice 'none': this family's tool calls do not open with a special token that could be banned "
            "(its calls are plain text); leave 'tools' out of the request instead",
            "tool_choice",
        )
    return sorted(openers)


def _call_turn_text(
    llm: TokenLLM, rendered: str | None, conversation: list[Message], tools: list[dict[str, Any]] | None, name: str
) -> str:
    """The template's text of an assistant turn calling ``name`` (no content, no arguments) after
    ``rendered``: what the model would sample for such a turn."""
    probe: Message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": _PROBE_ID, "type": "function", "function": {"name": name, "arguments": {}}}],
    }
    return _turn_text(llm, rendered, conversation, tools, probe)


def _turn_text(
    llm: TokenLLM,
    rendered: str | None,
    conversation: list[Message],
    tools: list[dict[str, Any]] | None,
    message: Message,
) -> str:
    if rendered is None:
        rendered = llm.renderer.render(conversation, tools, generation_prompt=True)
    try:
        full = llm.renderer.render([*conversation, message], tools, generation_prompt=False)
    except UsageError as exc:
        raise TurnRefused(f"{llm.renderer.template_name} cannot render the constrained turn: {exc}", "tool_choice") from exc
    if not full.startswith(rendered):
        raise TurnRefused(
            f"{llm.renderer.template_name} renders the conversation differently once an assistant turn follows, "
            "so a constrained turn has no place to go; leave tool_choice / parallel_tool_calls out",
            "tool_choice",
        )
    return full[len(rendered) :]


def _closer(
    llm: TokenLLM, rendered: str | None, conversation: list[Message], tools: list[dict[str, Any]] | None
) -> int | None:
    """The special id that closes one call in this family's turns (``</tool_call>``): the first
    special token between a first call's arguments and a second call's name. ``_INHERENT`` when the
    family's turns hold one call and a call ends the turn with its own token (gpt-oss's ``<|call|>``);
    ``None`` when nothing closes a call on its own (calls as plain text: Mistral's JSON list,
    Llama-3's JSON)."""
    special = _special_ids(llm)
    second = "aworldprobesecond"
    calls = [
        {"id": _PROBE_ID, "type": "function", "function": {"name": _PROBE_NAME, "arguments": {}}},
        {"id": "f6g7h8i9j", "type": "function", "function": {"name": second, "arguments": {}}},
    ]
    try:
        body = _turn_text(llm, rendered, conversation, tools, {"role": "assistant", "content": "", "tool_calls": calls})
    except TurnRefused:
        body = ""
    if _PROBE_NAME in body and second in body:
        between = body[body.find(_PROBE_NAME) + len(_PROBE_NAME) : body.find(second)]
        if "{}" in between:  # the first call's arguments: it closes after them
            between = between[between.find("{}") + 2 :]
        found = [t for t in llm.renderer.encode(between) if t in special]
        head = body[: body.find(_PROBE_NAME)]
        opens = {t for t in llm.renderer.encode(head) if t in special}
        # a token that also opens a call (Mistral v11's [TOOL_CALLS]) would leave a stub call behind
        return found[0] if found and found[0] not in opens else None
    # one call per turn: it needs no stop when the call ends the turn with a token of its own and the
    # parser reads one call per message (harmony's <|call|>); a JSON call (Llama-3) may be followed by
    # '; {...}' before the turn ends, so there it is refused
    if "harmony" not in type(llm.tool_parser).__name__.lower():
        return None
    body = _call_turn_text(llm, rendered, conversation, tools, _PROBE_NAME)
    after = body[body.find(_PROBE_NAME) + len(_PROBE_NAME) :]
    plain = _turn_text(llm, rendered, conversation, tools, {"role": "assistant", "content": "aworldprobecontent"})
    ends = set(llm.renderer.stop_ids) - set(llm.renderer.encode(plain))
    return _INHERENT if any(t in ends for t in llm.renderer.encode(after)) else None


def kept_stop_ids(sampling: SamplingParams | None) -> set[int]:
    return set((sampling.extra.get(KEPT_STOP_IDS) if sampling else None) or [])


def check_calls(calls: list[ToolCall], tools: list[dict[str, Any]] | None) -> list[ToolCall]:
    """Calls of ``strict`` tools whose arguments break the tool's schema, marked malformed."""
    strict = {}
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("strict") is True:
            strict[fn.get("name")] = fn.get("parameters") or {"type": "object"}
    if not strict:
        return calls
    import jsonschema

    out = []
    for call in calls:
        schema = strict.get(call.name)
        if call.error is None and schema is not None:
            try:
                jsonschema.validate(json.loads(call.arguments), schema)
            except (ValueError, jsonschema.ValidationError) as exc:
                message = exc.message if isinstance(exc, jsonschema.ValidationError) else str(exc)
                call = call.model_copy(
                    update={
                        "error": f"the arguments do not match the strict schema of {call.name!r}: {message}"
                    }
                )
        out.append(call)
    return out
