"""The LLM protocol every agent talks through.

Two implementations: ``aworld_core.llm.openai_http.OpenAICompatibleLLM`` (any served model:
vLLM, SGLang, a hosted API) and the token-level client in ``aworld_core.tokens`` (a TokenEngine
under the model being trained). A call returns the assistant message plus, on the token-level
path, the exact sampled tokens (``token_data``), so the runtime never has to re-tokenize.

``session_id`` identifies the episode: token-level clients keep one token sequence per session
(and engines may route a session to one server to reuse its KV cache).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aworld_core.schemas import LLMCall, Message, SamplingParams, TokenData, ToolCall


@dataclass
class LLMResponse:
    """The assistant's turn: text, tool calls, why it stopped, and token data when known.

    A tool call the model wrote but that could not be parsed is kept in ``tool_calls`` with
    ``error`` set; the runtime answers it with a tool error message instead of executing it.
    """

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    model: str | None = None
    token_data: TokenData | None = None
    duration_s: float | None = None

    def message(self) -> Message:
        """The assistant message to append to the conversation (OpenAI format).

        Calls that failed to parse are kept too: the runtime answers every call with a tool message,
        and each must answer a call of this message, or a template that heads a result with the
        call's name (gpt-oss) would head the error with another call's name or refuse it. Their
        arguments are ``"{}"`` unless the model wrote a JSON object (templates and servers parse
        them); the sampled tokens, not this message, keep what the model wrote.
        """
        msg: Message = {"role": "assistant", "content": self.content}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _wire_arguments(c)}}
                for c in self.tool_calls
            ]
        return msg

    def to_record(self) -> LLMCall:
        return LLMCall(
            model=self.model,
            content=self.content,
            reasoning=self.reasoning,
            tool_calls=list(self.tool_calls),
            finish_reason=self.finish_reason,
            usage=self.usage,
            duration_s=self.duration_s,
            token_data=self.token_data,
        )


def _wire_arguments(call: ToolCall) -> str:
    """A call's arguments as JSON object text: an errored call's raw text only when it is one."""
    if call.error is None:
        return call.arguments
    try:
        return call.arguments if isinstance(json.loads(call.arguments), dict) else "{}"
    except (TypeError, ValueError):
        return "{}"


@runtime_checkable
class LLMClient(Protocol):
    """What the agent runtime needs from a model."""

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
        *,
        session_id: str | None = None,
    ) -> LLMResponse:
        """Answer the conversation ``messages`` (OpenAI format) offering ``tools`` (OpenAI tool
        schemas). Raises ``aworld_core.errors.LLMError`` after retries are exhausted."""
        ...

    async def aclose(self) -> None:
        """Release connections. Safe to call twice."""
        ...
