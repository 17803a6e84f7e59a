"""Incremental streaming: the text of a turn handed to the client as its tokens are sampled.

The engine hands the token path its ids as it samples them (``TurnRequest.sink``); ``TextStream``
decodes them and splits what is safe to show now: reasoning (inside ``<think>``) and content (up
to the first tool-call marker). Text that could still turn out to be a marker, a stop string or
whitespace a parser would strip is held back. Tool calls are sent once the turn's text parses,
as OpenAI sends them (a first delta with the id, type, name and empty arguments, then the
arguments). At the end the final parse is the truth: whatever of its content and reasoning was
not streamed yet follows; a streamed piece the final parse does not start with is logged (it
cannot be taken back).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import STOP_TOKEN_IDS, TokenOutput
from aworld_core.tokens.llm import TokenLLM
from aworld_core.tokens.turn import TurnRequest, kept_stop_ids

log = logging.getLogger(__name__)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass
class Piece:
    """What to send for some newly sampled ids: text deltas and the sampled ids' logprobs."""

    content: str = ""
    reasoning: str = ""
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] | None = None


def _held(text: str, markers: list[str]) -> int:
    """How many characters at the end of ``text`` could begin one of ``markers``."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if marker.startswith(text[-n:]):
                best = max(best, n)
                break
    return best


class TextStream:
    """Splits a turn's text, as its ids arrive, into reasoning and content that is safe to send."""

    def __init__(self, llm: TokenLLM, sampling: SamplingParams):
        self.llm = llm
        self.markers = [m for m in getattr(llm.tool_parser, "call_markers", ()) or () if m]
        self.stop_strings = [s for s in (sampling.stop or []) if s]
        self.stops = set(sampling.extra.get(STOP_TOKEN_IDS) or []) | set(llm.renderer.stop_ids)
        eos = getattr(llm.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.stops.add(eos)
        self.stops -= kept_stop_ids(sampling)
        self.think_in_prompt = bool(llm.options.think_in_prompt) and llm.parse_reasoning
        self.ids: list[int] = []
        self.content = ""  # sent so far
        self.reasoning = ""
        self.blocked = False  # a call marker (or a harmony turn) was seen: the rest waits for the parse
        self.harmony = "harmony" in type(llm.tool_parser).__name__.lower()

    def feed(self, ids: list[int]) -> tuple[str, str]:
        """``(reasoning, content)`` deltas after ``ids`` were sampled."""
        self.ids += ids
        if self.blocked or self.harmony:
            return "", ""
        visible = self.ids[:-1] if self.ids and self.ids[-1] in self.stops else self.ids
        text = self.llm.renderer.decode(visible)
        if text.endswith("\ufffd"):  # half a character: wait for the rest
            return "", ""
        reasoning, content = "", text
        if self.llm.parse_reasoning:
            stripped = text.lstrip()
            if self.think_in_prompt or stripped.startswith(THINK_OPEN):
                body = stripped[len(THINK_OPEN) :] if stripped.startswith(THINK_OPEN) else text
                close = body.find(THINK_CLOSE)
                if close < 0:
                    if any(m in body for m in self.markers):
                        self.blocked = True
                        return "", ""
                    if self.think_in_prompt and not stripped.startswith(THINK_OPEN):
                        return "", ""  # the block may never close: only the final parse can tell
                    held = _held(body, [THINK_CLOSE, *self.markers])
                    return self._reasoning_delta(body[: len(body) - held]), ""
                reasoning, content = body[:close], body[close + len(THINK_CLOSE) :]
            elif THINK_OPEN.startswith(stripped):
                return "", ""  # the turn may be opening a think block
        r_delta = self._reasoning_delta(reasoning) if reasoning else ""
        cut = len(content)
        for marker in self.markers:
            at = content.find(marker)
            if at >= 0:
                cut = min(cut, at)
                self.blocked = True
        for stop in self.stop_strings:
            at = content.find(stop)
            if at >= 0:
                cut = min(cut, at)
                self.blocked = True
        shown = content[:cut]
        if not self.blocked:
            shown = shown[: len(shown) - _held(shown, [*self.markers, *self.stop_strings])]
        shown = shown.lstrip() if not self.content else shown
        shown = shown.rstrip()  # parsers strip trailing whitespace; it follows with the next text
        if not shown.startswith(self.content):
            return r_delta, ""
        delta = shown[len(self.content) :]
        self.content = shown
        return r_delta, delta

    def _reasoning_delta(self, reasoning: str) -> str:
        shown = reasoning.lstrip("\n").rstrip("\n")
        if not shown.startswith(self.reasoning):
            return ""
        delta = shown[len(self.reasoning) :]
        self.reasoning = shown
        return delta

    def rest(self, response: LLMResponse) -> tuple[str, str]:
        """What of the final parse was not streamed: ``(reasoning, content)``."""
        return self._rest(response.reasoning or "", self.reasoning, "reasoning"), self._rest(
            response.content or "", self.content, "content"
        )

    @staticmethod
    def _rest(final: str, sent: str, what: str) -> str:
        if final.startswith(sent):
            return final[len(sent) :]
        log.warning(
            "gateway: the streamed %s %r is not how the final parse begins (%r)", what, sent[:80], final[:80]
        )
        return ""


class TurnStream:
    """A turn running in a task, with the pieces of its generation queued as they come."""

    def __init__(self, run: Callable[[TurnRequest], Any], turn: TurnRequest):
        self.queue: asyncio.Queue[tuple[TokenOutput, bool] | None] = asyncio.Queue()
        self.begun = asyncio.Event()

        def sink(piece: TokenOutput, sampled: bool) -> None:
            self.queue.put_nowait((piece, sampled))
            self.begun.set()

        def ended(_: Any) -> None:
            self.queue.put_nowait(None)
            self.begun.set()

        turn.sink = sink
        self.task: asyncio.Task[LLMResponse] = asyncio.ensure_future(run(turn))
        self.task.add_done_callback(ended)

    async def first(self) -> None:
        """Wait for the first piece or the end (so a refused request is an HTTP error, not a stream)."""
        await self.begun.wait()
        if self.task.done() and not self.task.cancelled() and self.task.exception() is not None:
            raise self.task.exception()  # type: ignore[misc]

    async def pieces(self) -> AsyncIterator[tuple[TokenOutput, bool]]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item

    def cancel(self) -> None:
        if not self.task.done():
            self.task.cancel()
