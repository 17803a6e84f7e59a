"""One episode's token sequence: the prompt, then sampled tokens (mask 1) and env tokens (mask 0).

The sequence only ever grows by appending what the engine sampled, exactly, or what the chat
template renders for new messages; nothing already in it is re-rendered or re-tokenized. So the
prompt of every call is a prefix of the final sequence, and the training view is what the policy
actually saw and sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import Message, TrainingView

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
    num_turns: int = 0
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
    # the view as it was when the client rewrote history (what stays trainable)
    frozen_view: TrainingView | None = None

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

    def restart(self, prompt_ids: list[int], history: list[Message], rendered: str | None = None) -> None:
        """Begin a new segment after the client (or the template) rewrote history; the old view
        stays frozen."""
        if self.frozen_view is None:
            self.frozen_view = self.view()
        self.history_rewritten = True
        self.prompt_ids = prompt_ids
        self.history = history
        self.rendered = rendered
        self.response_ids, self.response_mask = [], []
        self.response_logprobs, self.response_versions = [], []
        self.last_sampled_id = None

    # -- output -------------------------------------------------------------------------------

    def view(self) -> TrainingView:
        """The trainable view: the segment before any history rewrite, marked when there was one."""
        if self.frozen_view is not None:
            return self.frozen_view.model_copy(update={"history_rewritten": True})
        return TrainingView(
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.response_ids),
            response_mask=list(self.response_mask),
            response_logprobs=list(self.response_logprobs),
            response_versions=list(self.response_versions),
            num_turns=self.num_turns,
            truncated=self.truncated,
            history_rewritten=self.history_rewritten,
        )
