"""Context compaction: an agent option that keeps its conversation within a token budget.

Long-horizon agents outgrow their context. Before a call whose context would pass
``max_context_tokens``, the agent compacts its conversation, by one of three strategies:

* ``truncate_tool_results``: tool results older than the newest ``keep_last_results`` are cut to
  ``truncate_chars`` characters (with a marker saying so);
* ``drop_tool_results``: those results are replaced by a one-line marker;
* ``summary``: the policy itself is asked (``summary_prompt``, as a user turn after the history)
  to summarize what it has done and learned; the conversation becomes the task with that summary
  appended to its last user message. The summary is **sampled by the policy and trained like any
  other turn** (it ends the segment it was asked in), so the episode's reward teaches the policy to
  write summaries that let it finish the task.

The compacted conversation is not a prefix of what the policy saw, so the token client begins a new
training segment from a fresh render of it (``TokenLLM.note_compaction`` marks it ``compaction``);
the episode continues in the new segment and every segment trains (``aworld_core.worker.credit``).

The context of the next call is measured exactly when the client can (``TokenLLM.context_tokens``:
the session's tokens plus the template's render of the new messages), else estimated from the last
call's reported usage plus the new messages' characters (4 per token).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aworld_core.schemas import Message

DEFAULT_SUMMARY_PROMPT = (
    "Your context is full. Summarize the task, what you have done so far, the tool results you still "
    "need and what remains to do, in a few sentences. Write only the summary; call no tool."
)
SUMMARY_HEADER = "Summary of your progress so far (your earlier turns were compacted):"
DROPPED = "[tool result dropped to save context]"
TRUNCATED = " [... truncated to save context]"
CHARS_PER_TOKEN = 4  # the estimate when the client cannot count tokens


class CompactionConfig(BaseModel):
    """``AgentConfig.compaction`` (job config: ``agent.compaction``)."""

    model_config = ConfigDict(extra="forbid")

    strategy: Literal["truncate_tool_results", "drop_tool_results", "summary"] = Field(
        description="truncate or drop old tool results, or have the policy write a summary that replaces the history"
    )
    max_context_tokens: int = Field(
        ge=16, description="compact before a call whose context (prompt tokens) would pass this"
    )
    keep_last_results: int = Field(default=1, ge=0, description="truncate/drop: the newest tool results kept whole")
    truncate_chars: int = Field(default=200, ge=0, description="truncate_tool_results: characters kept of each")
    summary_prompt: str = Field(default=DEFAULT_SUMMARY_PROMPT, min_length=1)
    summary_max_tokens: int | None = Field(default=None, ge=1, description="summary: tokens of the summary turn")
    max_compactions: int = Field(default=8, ge=1, description="per conversation; then the context is left to grow")

    @model_validator(mode="after")
    def _summary_fields(self) -> CompactionConfig:
        if self.strategy != "summary" and self.summary_max_tokens is not None:
            raise ValueError("summary_max_tokens applies to strategy 'summary' only")
        return self


def estimated_tokens(messages: list[Message]) -> int:
    """A rough token count of ``messages`` (``CHARS_PER_TOKEN`` characters a token, 4 per message)."""
    total = 0
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else str(content or "")
        for call in message.get("tool_calls") or []:
            text += str(call.get("function", {}))
        total += len(text) // CHARS_PER_TOKEN + 4
    return total


def context_tokens(
    client: Any, session_id: str | None, messages: list[Message], tools: Any, last_usage: dict[str, int] | None,
    counted: int,
) -> int:
    """The next call's context: exact when ``client`` counts it (``context_tokens``), else the last
    call's ``total_tokens`` plus an estimate of the ``messages`` after the first ``counted``."""
    exact = getattr(client, "context_tokens", None)
    if exact is not None and session_id is not None:
        value = exact(session_id, messages, tools)
        if value is not None:
            return int(value)
    base = int((last_usage or {}).get("total_tokens") or 0)
    return base + estimated_tokens(messages[counted:]) if base else estimated_tokens(messages)


def compact_tool_results(messages: list[Message], config: CompactionConfig) -> list[Message] | None:
    """``messages`` with the older tool results truncated or dropped; ``None`` when nothing changes
    (no tool result older than the newest ``keep_last_results``, or all already compacted)."""
    positions = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    older = positions[: max(0, len(positions) - config.keep_last_results)]
    out = [dict(m) for m in messages]
    changed = False
    for i in older:
        content = out[i].get("content")
        text = content if isinstance(content, str) else str(content or "")
        if config.strategy == "drop_tool_results":
            new = DROPPED
        else:
            new = text if len(text) <= config.truncate_chars or text.endswith(TRUNCATED) else (
                text[: config.truncate_chars] + TRUNCATED)
        if new != text:
            out[i]["content"] = new
            changed = True
    return out if changed else None


def summary_request(messages: list[Message], config: CompactionConfig) -> list[Message]:
    """What the policy is asked to summarize: the conversation, then the summary prompt as a user turn."""
    return [*messages, {"role": "user", "content": config.summary_prompt}]


def with_summary(first: list[Message], summary: str) -> list[Message]:
    """The compacted conversation: the conversation's first messages (system and task) with the
    summary appended to the last user message (one user turn: templates that require alternating
    roles accept it)."""
    out = [dict(m) for m in first]
    for message in reversed(out):
        if message.get("role") == "user":
            content = message.get("content")
            text = content if isinstance(content, str) else str(content or "")
            message["content"] = f"{text}\n\n{SUMMARY_HEADER}\n{summary.strip()}"
            return out
    out.append({"role": "user", "content": f"{SUMMARY_HEADER}\n{summary.strip()}"})
    return out
