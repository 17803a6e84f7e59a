"""``TokenLLM``: the ``LLMClient`` protocol at the token level, over any ``TokenEngine``.

One token sequence per ``session_id`` (episode): the first prompt rendered by the chat template,
then per turn the sampled ids exactly as the engine returned them (mask 1, with logprobs and
policy version), then only the new messages rendered as a suffix delta (mask 0). Sampled text is
decoded only to show the agent its content and tool calls; it is never tokenized again.

The runtime calls ``chat(..., session_id=episode.id)`` per step and ``finish_session(episode.id)``
at the end, storing the returned ``TrainingView`` in ``episode.training``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from aworld_core.errors import LLMError, UsageError
from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import (
    SEGMENT_COMPACTION,
    SEGMENT_REWRITE,
    SEGMENT_TEMPLATE,
    Message,
    SamplingParams,
    TokenData,
    TrainingView,
)
from aworld_core.tokens.chat_template import ChatRenderer
from aworld_core.tokens.engine import ABORT, LENGTH, STOP_TOKEN_IDS, TokenEngine, TokenOutput
from aworld_core.tokens.families import TemplateOptions, resolve_options
from aworld_core.tokens.messages import extends, first_difference, normalize_messages
from aworld_core.tokens.parsers import ParsedText, ToolParser, get_tool_parser, split_reasoning
from aworld_core.tokens.session import TokenSession
from aworld_core.tokens.turn import (
    TurnRequest,
    check_calls,
    check_features,
    current_turn,
    kept_stop_ids,
    plan_turn,
    reset_turn,
    set_turn,
)
from aworld_core.tokens.turn import generate as generate_turn

logger = logging.getLogger(__name__)


class SessionBusyError(LLMError):
    """A call in a session that already has one in flight (a client mistake: the gateway answers 409)."""


class SessionFinishedError(LLMError):
    """A call in a session that was finished (a client mistake: the gateway answers 410)."""


class PromptTooLongError(LLMError):
    """A prompt over ``max_prompt_tokens`` (the gateway answers 400 ``context_length_exceeded``, as
    OpenAI does, and counts it as a failure of the episode)."""


def load_tokenizer(path: str | Path) -> Any:
    """A tokenizer from a directory, keeping the ids of its own ``tokenizer.json``.

    A directory whose config names ``PreTrainedTokenizerFast`` is loaded with exactly that class:
    in transformers 5 ``AutoTokenizer`` may substitute the model family's tokenizer class, whose
    pre-tokenizer can differ from the saved one.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(path) / "tokenizer_config.json"
    if config.is_file():
        cls = json.loads(config.read_text()).get("tokenizer_class")
        if cls == "PreTrainedTokenizerFast":
            return PreTrainedTokenizerFast.from_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path))


#: the files a tokenizer directory holds (HF's names), copied beside a checkpoint by :func:`copy_tokenizer_files`
TOKENIZER_FILES = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "chat_template*", "vocab.*",
                   "merges.txt")


def copy_tokenizer_files(source: str | Path, target: str | Path) -> None:
    """Put the tokenizer's own files (:data:`TOKENIZER_FILES` in ``source``) into ``target``, byte for byte.

    Why not save the loaded tokenizer again: that records the class transformers loaded it as, and a
    later ``AutoTokenizer`` may then swap in another pre-tokenizer; the original files keep the class
    (and so the ids) the model was trained with, as :func:`load_tokenizer` does when loading.
    """
    import shutil

    target = Path(target)
    for pattern in TOKENIZER_FILES:
        for path in Path(source).glob(pattern):
            if path.is_file():
                shutil.copy2(path, target / path.name)


class TokenLLM:
    """An ``LLMClient`` that keeps the exact token sequence of every episode.

    ``max_response_tokens`` is the backend's response budget (sampled + env tokens after the
    prompt). When a session reaches it the response is cut there (ids, mask, logprobs and
    versions together), the view says ``truncated=True``, the call answers
    ``finish_reason="length"`` and every later call in that session answers the same at once.

    ``family`` names a chat-template preset (``aworld_core.tokens.families``: terminators, parser,
    tool-call id format, argument form, tool role, what to do when the template re-renders history);
    ``template_options`` (a ``TemplateOptions`` or a dict of its fields) overrides its fields, and an
    explicit ``tool_parser`` / ``end_of_turn`` overrides the preset's parser / terminators.

    A finished session's id is refused for ``finished_ttl_s`` seconds (the newest
    ``max_finished`` ids): a late call after ``finish_session`` would otherwise start a new
    sequence nobody ever collects.
    """

    finished_ttl_s: float = 3600.0
    max_finished: int = 100_000

    def __init__(
        self,
        engine: TokenEngine,
        tokenizer: Any,
        chat_template: str | Path | None = None,
        tool_parser: str | ToolParser | None = None,
        max_response_tokens: int | None = None,
        *,
        family: str | None = None,
        template_options: TemplateOptions | dict[str, Any] | None = None,
        max_prompt_tokens: int | None = None,
        end_of_turn: str | int | None = None,
        model_name: str = "aworld-policy",
        default_sampling: SamplingParams | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        parse_reasoning: bool = True,
        require_logprobs: bool = True,
        abort_retries: int = 20,
    ):
        if not isinstance(engine, TokenEngine):
            raise UsageError(f"engine must implement TokenEngine (async generate(...)), got {type(engine).__name__}")
        if max_response_tokens is not None and max_response_tokens < 1:
            raise UsageError(f"max_response_tokens must be at least 1, got {max_response_tokens}")
        if isinstance(tokenizer, (str, Path)):
            tokenizer = load_tokenizer(tokenizer)
        self.engine = engine
        self.tokenizer = tokenizer
        self.options = resolve_options(family, template_options)
        self.renderer = ChatRenderer(
            tokenizer,
            chat_template,
            end_of_turn=end_of_turn,
            template_kwargs=chat_template_kwargs,
            options=self.options,
        )
        self.tool_parser = _build_parser(tool_parser or self.options.tool_parser or "hermes", self.options.tool_call_id)
        self.max_response_tokens = max_response_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.model_name = model_name
        self.default_sampling = default_sampling or SamplingParams()
        self.parse_reasoning = parse_reasoning
        self.require_logprobs = require_logprobs
        if abort_retries < 0:
            raise UsageError(f"abort_retries must be >= 0, got {abort_retries}")
        self.abort_retries = abort_retries
        self._sessions: dict[str, TokenSession] = {}
        self._in_flight: set[str] = set()
        self._dropped: set[str] = set()  # finished while a call was in flight: not stored again
        self._finished: OrderedDict[str, float] = OrderedDict()  # finished ids -> when (monotonic)
        self._lock = threading.Lock()  # sessions are read by backends from other threads

    @property
    def end_of_turn_id(self) -> int:
        return self.renderer.eot_id

    # -- the LLMClient protocol ---------------------------------------------------------------

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
        *,
        session_id: str | None = None,
        turn: TurnRequest | None = None,
    ) -> LLMResponse:
        """One turn. ``turn`` carries what an OpenAI client asked beyond the messages (tool choice,
        one call at most, a streaming sink; ``aworld_core.tokens.turn``); it is honoured or refused."""
        if turn is not None:
            token = set_turn(turn)
            try:
                return await self.chat(messages, tools, sampling, session_id=session_id)
            finally:
                reset_turn(token)
        started = time.perf_counter()
        msgs = normalize_messages(messages)
        sampling = self.default_sampling.merged(sampling)
        check_features(self.engine, sampling)
        if session_id is None:
            return await self._stateless(msgs, tools, sampling, started)

        with self._lock:
            self._check_not_finished(session_id)
            if session_id in self._in_flight:
                raise SessionBusyError(
                    f"session {session_id!r} already has a call in flight; an episode must wait for "
                    "each answer before asking again"
                )
            self._in_flight.add(session_id)
            session = self._sessions.get(session_id)
        try:
            return await self._session_turn(session_id, session, msgs, tools, sampling, started)
        finally:
            with self._lock:
                self._in_flight.discard(session_id)
                self._dropped.discard(session_id)

    async def aclose(self) -> None:
        closer = getattr(self.engine, "aclose", None)
        if closer is not None:
            await closer()

    # -- sessions -----------------------------------------------------------------------------

    def finish_session(self, session_id: str) -> TrainingView | None:
        """The episode's training view, dropping the session (``None`` if it never sampled)."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session_id in self._in_flight:
                self._dropped.add(session_id)
            self._finished[session_id] = time.monotonic()
            self._finished.move_to_end(session_id)
            while len(self._finished) > self.max_finished:
                self._finished.popitem(last=False)
        return None if session is None else session.view()

    def _check_not_finished(self, session_id: str) -> None:
        """Refuse a call for a finished session (caller holds the lock); expired ids are forgotten."""
        now = time.monotonic()
        while self._finished:
            _, at = next(iter(self._finished.items()))
            if now - at <= self.finished_ttl_s:
                break
            self._finished.popitem(last=False)
        if session_id in self._finished:
            raise SessionFinishedError(
                f"session {session_id!r} was finished (finish_session) and its training view collected; a "
                "call after that would start a sequence nobody collects. Use a new session_id for a new "
                "episode, and stop calling the model once the episode ended"
            )

    def training_view(self, session_id: str) -> TrainingView | None:
        """The view so far, keeping the session (for debugging and the gateway's GET)."""
        with self._lock:
            session = self._sessions.get(session_id)
        return None if session is None else session.view()

    def exhausted(self, session_id: str) -> bool:
        """Whether the session spent its response budget (the runtime should end the episode)."""
        session = self.session(session_id)
        return session is not None and session.exhausted

    def session(self, session_id: str) -> TokenSession | None:
        with self._lock:
            return self._sessions.get(session_id)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    # -- one turn -----------------------------------------------------------------------------

    async def _stateless(
        self, msgs: list[Message], tools: list[dict[str, Any]] | None, sampling: SamplingParams, started: float
    ) -> LLMResponse:
        rendered, prompt = self.renderer.prompt(msgs, tools)
        self._check_prompt(prompt, None)
        forced, sampling = plan_turn(self, rendered, msgs, tools, sampling)
        prompt = [*prompt, *forced]
        sampling = self._call_sampling(sampling, None)
        out = await self._generate(prompt, sampling, request_id=f"stateless-{time.monotonic_ns()}")
        return self._response(out, prompt, tools, sampling, "call_0_", started, truncated=False)

    async def _session_turn(
        self,
        session_id: str,
        session: TokenSession | None,
        msgs: list[Message],
        tools: list[dict[str, Any]] | None,
        sampling: SamplingParams,
        started: float,
    ) -> LLMResponse:
        env: list[int] = []
        restart_prompt: list[int] | None = None
        restart_start = SEGMENT_REWRITE  # why a restart begins a new segment
        rendered: str | None = None  # the render the next sampled turn follows
        template_rewrote = False
        continued = False  # msgs extends the recorded history
        if session is None:
            rendered, prompt = self.renderer.prompt(msgs, tools)
            self._check_prompt(prompt, session_id)
            session = TokenSession(session_id=session_id, tools=tools, prompt_ids=prompt, history=msgs)
        elif session.exhausted:
            return self._length_response(started)
        elif session.last_request is not None and session.last_request == msgs and session.last_response:
            return session.last_response  # the client retried the same request
        elif extends(session.history, msgs, frozenset(session.unparsed_calls)):
            continued = True
            session.compaction_pending = False  # a compaction that only cut the new messages: no new segment
            k = len(session.history)
            delta = self.renderer.delta(
                session.history,
                msgs[k:],
                session.tools,
                previous=session.rendered,
                last_sampled=session.last_sampled_id,
            )
            if delta.restart:  # the template re-rendered earlier turns and the family restarts then
                rendered, restart_prompt = self.renderer.prompt(msgs, session.tools)
                self._check_prompt(restart_prompt, session_id)
                restart_start = SEGMENT_TEMPLATE
            else:
                env, rendered, template_rewrote = delta.ids, delta.text, delta.history_changed
        else:
            # the client sent a conversation that does not continue the recorded one: a new segment
            # from a fresh render of what it sent (the closed one stays as the policy saw it)
            rendered, restart_prompt = self.renderer.prompt(msgs, session.tools)
            self._check_prompt(restart_prompt, session_id)
            if session.compaction_pending:
                restart_start = SEGMENT_COMPACTION

        # a constrained turn (tool_choice, one call at most): its forced ids were not sampled (mask 0),
        # the end of a segment's prompt when it is the segment's first turn, else env tokens
        conversation = [*session.history, *msgs[len(session.history) :]] if continued and restart_prompt is None else msgs
        forced, sampling = plan_turn(self, rendered, conversation, session.tools, sampling)
        if restart_prompt is not None:
            restart_prompt = [*restart_prompt, *forced]
        elif not session.response_ids and session.num_turns == 0:  # a new session (stored only on success)
            session.prompt_ids = [*session.prompt_ids, *forced]
        else:
            env = [*env, *forced]

        budget = self.max_response_tokens
        base = session.sequence() if restart_prompt is None else restart_prompt
        used = (len(session.response_ids) if restart_prompt is None else 0) + len(env)
        if budget is not None and used >= budget:
            if restart_prompt is not None:
                self._restart(session, restart_prompt, msgs, rendered, restart_start)
            session.append_env(env)
            session.truncate(budget)
            self._store(session)
            return self._length_response(started)

        call_sampling = self._call_sampling(sampling, None if budget is None else budget - used)
        prompt_ids = [*base, *env]
        out = await self._generate(prompt_ids, call_sampling, request_id=session_id)

        # commit only now: a failed generation leaves the session as it was
        truncated = budget is not None and used + len(out.token_ids) >= budget
        if truncated:
            keep = budget - used  # type: ignore[operator]
            out = TokenOutput(
                out.token_ids[:keep],
                None if out.logprobs is None else out.logprobs[:keep],
                LENGTH,
                out.versions()[:keep],
            )
        if restart_prompt is not None:
            self._restart(session, restart_prompt, msgs, rendered, restart_start)
        session.rendered = rendered
        session.template_rewrites += int(template_rewrote)
        session.append_env(env)
        session.append_sampled(out.token_ids, _logprobs(out), out.versions())
        if truncated:
            session.truncate(budget)  # type: ignore[arg-type]
        response = self._response(
            out,
            prompt_ids,
            session.tools,
            call_sampling,
            _id_prefix(session_id, session.turns - 1),
            started,
            truncated=truncated,
            segment=session.segment_index,
        )
        # the recorded turns stay as recorded (a client's echo may leave out the calls that failed to
        # parse; the template still renders them, so their results keep their calls)
        kept = session.history if continued and restart_prompt is None else []
        session.history = [*kept, *msgs[len(kept) :], *normalize_messages([response.message()])]
        session.unparsed_calls.update(call.id for call in response.tool_calls if call.error is not None)
        session.last_request = msgs
        session.last_response = response
        self._store(session)
        return response

    def _restart(
        self, session: TokenSession, prompt: list[int], msgs: list[Message], rendered: str | None, start: str
    ) -> None:
        """Close the session's segment and begin the next at ``prompt``, with a log line saying why."""
        where = first_difference(session.history, msgs, frozenset(session.unparsed_calls))
        recorded = len(session.history)
        closed = session.segment()
        session.restart(prompt, msgs, rendered, start)
        session.compaction_pending = False
        reason = {
            SEGMENT_TEMPLATE: "the chat template re-rendered earlier turns (history_changes: restart)",
            SEGMENT_COMPACTION: "the agent compacted its context",
        }.get(start, "the client's conversation does not extend the recorded one")
        logger.info(
            "session %s: %s (first differing message: %d of %d sent, %d recorded); segment %d closed with %d "
            "sampled tokens over %d turns; segment %d begins from a fresh render (%d prompt tokens)",
            session.session_id, reason, where, len(msgs), recorded,
            session.segment_index - 1, closed.sampled_tokens, closed.num_turns, session.segment_index, len(prompt),
        )

    def context_tokens(
        self, session_id: str, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """The prompt length a call with ``messages`` would have in ``session_id`` now: the
        session's tokens plus the template's render of the new messages when they extend its
        conversation, else a fresh render (for an agent that keeps its context within a budget)."""
        msgs = normalize_messages(messages)
        session = self.session(session_id)
        if session is None:
            return len(self.renderer.prompt_ids(msgs, tools))
        if extends(session.history, msgs, frozenset(session.unparsed_calls)):
            delta = self.renderer.delta(
                session.history, msgs[len(session.history) :], session.tools,
                previous=session.rendered, last_sampled=session.last_sampled_id,
            )
            if not delta.restart:
                return len(session.sequence()) + len(delta.ids)
        return len(self.renderer.prompt_ids(msgs, session.tools))

    def note_compaction(self, session_id: str) -> None:
        """The agent is about to send a compacted conversation in ``session_id``: the segment that
        restart begins is marked ``compaction`` (else ``rewrite``). Nothing else changes."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is not None:
            session.compaction_pending = True

    def _store(self, session: TokenSession) -> None:
        with self._lock:
            if session.session_id not in self._dropped:
                self._sessions[session.session_id] = session

    def _check_prompt(self, prompt: list[int], session_id: str | None) -> None:
        if self.max_prompt_tokens is not None and len(prompt) > self.max_prompt_tokens:
            raise PromptTooLongError(
                f"the prompt of session {session_id!r} is {len(prompt)} tokens, over max_prompt_tokens="
                f"{self.max_prompt_tokens}; shorten the task or the tool list, or raise the limit"
            )

    def _call_sampling(self, sampling: SamplingParams, remaining: int | None) -> SamplingParams:
        max_tokens = sampling.max_tokens
        if remaining is not None:
            max_tokens = remaining if max_tokens is None else min(max_tokens, remaining)
        stops = list(sampling.extra.get(STOP_TOKEN_IDS) or [])
        stops += [i for i in self.renderer.stop_ids if i not in stops]
        return sampling.model_copy(update={"max_tokens": max_tokens, "extra": {**sampling.extra, STOP_TOKEN_IDS: stops}})

    async def _generate_once(self, prompt_ids: list[int], sampling: SamplingParams, request_id: str) -> TokenOutput:
        try:
            out = await generate_turn(self.engine, prompt_ids, sampling, request_id)  # streamed to the turn's sink
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"the token engine failed for session {request_id!r}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, TokenOutput):
            raise LLMError(f"the token engine returned {type(out).__name__}, expected TokenOutput")
        try:
            out.check()
        except ValueError as exc:
            raise LLMError(str(exc)) from exc
        return out

    async def _generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        """One generation; an aborted one (a weight sync paused the engine) is resumed from the
        tokens it already sampled, as verl's and AReaL's own loops do: the resumed request's prompt
        is the prompt plus those tokens, and the result keeps each token's logprob and version."""
        out = await self._generate_once(prompt_ids, sampling, request_id)
        ids, logprobs, versions = list(out.token_ids), _partial_logprobs(out), out.versions()
        attempt = 0
        while out.stop_reason == ABORT:
            attempt += 1
            left = None if sampling.max_tokens is None else sampling.max_tokens - len(ids)
            if left is not None and left <= 0:
                out = TokenOutput([], [], LENGTH, [])
                break
            if attempt > self.abort_retries:
                raise LLMError(
                    f"the token engine aborted the generation for session {request_id!r} {attempt} times in a "
                    f"row; raise abort_retries or check the engine (is a weight sync stuck?)"
                )
            await asyncio.sleep(min(1.0, 0.05 * attempt))
            resumed = sampling if left is None else sampling.model_copy(update={"max_tokens": left})
            out = await self._generate_once([*prompt_ids, *ids], resumed, request_id)
            ids += out.token_ids
            versions += out.versions()
            if logprobs is not None:
                more = _partial_logprobs(out)
                logprobs = None if more is None else [*logprobs, *more]
        if attempt:
            out = TokenOutput(ids, logprobs, out.stop_reason, versions)
        if out.logprobs is None and self.require_logprobs:
            raise LLMError(
                "the token engine returned no logprobs; RL needs the sampling logprobs (enable them in "
                "the engine, or pass require_logprobs=False to record 0.0)"
            )
        return out

    # -- building the answer ------------------------------------------------------------------

    def _length_response(self, started: float) -> LLMResponse:
        return LLMResponse(
            content=None,
            finish_reason="length",
            model=self.model_name,
            duration_s=time.perf_counter() - started,
        )

    def _response(
        self,
        out: TokenOutput,
        prompt_ids: list[int],
        tools: list[dict[str, Any]] | None,
        sampling: SamplingParams,
        id_prefix: str,
        started: float,
        *,
        truncated: bool,
        segment: int = 0,
    ) -> LLMResponse:
        turn = current_turn()
        forced = turn.forced_ids if turn is not None else []
        if turn is not None:
            turn.output = out
        parsed = self.parse([*forced, *out.token_ids], tools=tools, sampling=sampling, id_prefix=id_prefix)
        parsed.tool_calls = check_calls(parsed.tool_calls, tools)
        if truncated or out.stop_reason == LENGTH:
            finish = "length"
        elif any(call.error is None for call in parsed.tool_calls):
            finish = "tool_calls"
        else:
            finish = "stop"
        return LLMResponse(
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            reasoning=parsed.reasoning,
            finish_reason=finish,
            usage={
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(out.token_ids),
                "total_tokens": len(prompt_ids) + len(out.token_ids),
            },
            model=self.model_name,
            token_data=TokenData(
                prompt_ids=list(prompt_ids),
                response_ids=list(out.token_ids),
                response_logprobs=None if out.logprobs is None else [float(x) for x in out.logprobs],
                versions=out.versions(),
                stop_reason=out.stop_reason,
                segment=segment,
            ),
            duration_s=time.perf_counter() - started,
        )

    def parse(
        self,
        token_ids: list[int],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
        id_prefix: str = "call_",
    ) -> ParsedText:
        """What the agent sees of sampled ids: reasoning, content and tool calls (ids untouched)."""
        ids = list(token_ids)
        stops = set((sampling.extra.get(STOP_TOKEN_IDS) if sampling else None) or []) | set(self.renderer.stop_ids)
        stops -= kept_stop_ids(sampling)  # a call's closing token the turn stopped on is part of the call
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is not None:
            stops.add(eos)
        if ids and ids[-1] in stops:
            ids = ids[:-1]
        text = self.renderer.decode(ids)
        for stop in (sampling.stop if sampling else None) or []:
            if stop and stop in text:
                text = text[: text.index(stop)]
        reasoning = None
        if self.parse_reasoning:
            reasoning, text = split_reasoning(
                text,
                opened_by_prompt=self.options.think_in_prompt,
                call_markers=tuple(getattr(self.tool_parser, "call_markers", ())),
            )
        parsed = self.tool_parser.parse(text, tools=tools, id_prefix=id_prefix)
        if reasoning is not None or not self.parse_reasoning:
            parsed.reasoning = reasoning  # else: what the parser found (harmony's analysis channel)
        return parsed


def _build_parser(spec: str | ToolParser, id_format: str | None) -> ToolParser:
    """The tool parser, told the family's tool-call id format when the family sets one."""
    if id_format is None:
        return get_tool_parser(spec)
    return get_tool_parser(spec, id_format=id_format)


def _logprobs(out: TokenOutput) -> list[float]:
    return [float(x) for x in out.logprobs] if out.logprobs is not None else [0.0] * len(out.token_ids)


def _partial_logprobs(out: TokenOutput) -> list[float] | None:
    """The logprobs of one part of a resumed generation: an aborted request that sampled nothing
    has none to report (vLLM sends ``None`` then), which is an empty list, not "unknown"."""
    if out.logprobs is None and not out.token_ids:
        return []
    return out.logprobs


def _id_prefix(session_id: str, turn: int) -> str:
    """Deterministic tool-call ids: the same session and turn give the same ids on every run."""
    tag = hashlib.sha1(session_id.encode()).hexdigest()[:8]
    return f"call_{tag}_{turn}_"
