"""One episode's token sequences: segments of a prompt, then sampled tokens (mask 1) and env
tokens (mask 0).

A segment only ever grows by appending what the engine sampled, exactly, or what the chat template
renders for new messages; nothing already in it is re-rendered or re-tokenized. So the prompt of
every call is a prefix of its segment, and the training view is what the policy actually saw and
sampled. When the conversation stops being a prefix of what the policy saw (the client rewrote or
compacted its history, or the template re-rendered earlier turns), the segment is closed as it is
and a new one begins from a fresh render of the conversation the client sent (``restart``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import SEGMENT_FIRST, Message, TrainingSegment, TrainingView

ENV_LOGPROB = 0.0
ENV_VERSION = -1


@dataclass
class TokenSession:
    """Token state of one episode (``session_id``) inside a ``TokenLLM``."""

    session_id: str
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    history: list[Message]
    # the template's render the last sampled turn followed (its prompt, generation prompt included)
    rendered: str | None = None
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    response_versions: list[int] = field(default_factory=list)
    num_turns: int = 0  # sampled turns of the open segment
    turns: int = 0  # sampled turns of the whole episode (tool-call ids are numbered by it)
    truncated: bool = False
    history_rewritten: bool = False
    # turns after which the template rendered earlier turns differently (the sequence kept them)
    template_rewrites: int = 0
    # set when the response budget is spent: later calls answer finish_reason "length" at once
    exhausted: bool = False
    # the last sampled id, to tell whether the model closed its turn itself
    last_sampled_id: int | None = None
    # the last request and its answer, to answer a client's retry without sampling again
    last_request: list[Message] | None = None
    last_response: LLMResponse | None = None
    # ids of sampled calls that failed to parse (in the history message; a client's echo may omit them)
    unparsed_calls: set[str] = field(default_factory=set)
    # the segments closed by a restart, in order; the open segment is the fields above
    closed: list[TrainingSegment] = field(default_factory=list)
    # why the open segment began (schemas.SEGMENT_STARTS)
    start: str = SEGMENT_FIRST
    # the agent announced a compaction: the next restart begins a "compaction" segment
    compaction_pending: bool = False

    # -- growth -------------------------------------------------------------------------------

    def sequence(self) -> list[int]:
        return [*self.prompt_ids, *self.response_ids]

    def append_env(self, ids: list[int]) -> None:
        self.response_ids.extend(ids)
        self.response_mask.extend([0] * len(ids))
        self.response_logprobs.extend([ENV_LOGPROB] * len(ids))
        self.response_versions.extend([ENV_VERSION] * len(ids))

    def append_sampled(self, ids: list[int], logprobs: list[float], versions: list[int]) -> None:
        self.response_ids.extend(ids)
        self.response_mask.extend([1] * len(ids))
        self.response_logprobs.extend(float(x) for x in logprobs)
        self.response_versions.extend(versions)
        self.num_turns += 1
        self.turns += 1
        if ids:
            self.last_sampled_id = ids[-1]
        else:
            self.last_sampled_id = None

    def truncate(self, budget: int) -> None:
        """Cut the response to ``budget`` tokens: ids, mask, logprobs and versions together."""
        if len(self.response_ids) > budget:
            del self.response_ids[budget:]
            del self.response_mask[budget:]
            del self.response_logprobs[budget:]
            del self.response_versions[budget:]
        self.truncated = True
        self.exhausted = True

    def restart(self, prompt_ids: list[int], history: list[Message], rendered: str | None, start: str) -> None:
        """Close the open segment as it is and begin a new one at ``prompt_ids`` (a fresh render of
        the conversation the client sent); ``start`` says why (``rewrite``, ``template``, ...)."""
        self.closed.append(self.segment())
        self.history_rewritten = True
        self.start = start
        self.prompt_ids = prompt_ids
        self.history = history
        self.rendered = rendered
        self.response_ids, self.response_mask = [], []
        self.response_logprobs, self.response_versions = [], []
        self.num_turns = 0
        self.last_sampled_id = None

    @property
    def segment_index(self) -> int:
        """The open segment's position in the episode (0: the first)."""
        return len(self.closed)

    # -- output -------------------------------------------------------------------------------

    def segment(self) -> TrainingSegment:
        """The open segment as it stands."""
        return TrainingSegment(
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.response_ids),
            response_mask=list(self.response_mask),
            response_logprobs=list(self.response_logprobs),
            response_versions=list(self.response_versions),
            num_turns=self.num_turns,
            truncated=self.truncated,
            start=self.start,
        )

    def view(self) -> TrainingView:
        """The trainable view: every segment, in order (one unless history was rewritten)."""
        return TrainingView.of_segments([*self.closed, self.segment()])
