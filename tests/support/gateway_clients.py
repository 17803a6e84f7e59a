"""Shared pieces of the tests where real third-party clients drive the gateway.

* ``ToolPolicy``: a scripted policy for the ``qwen2_5`` template that calls the tools of its plan,
  one turn each, then answers; it continues whatever prefix the gateway forced (``tool_choice``
  required or named), so it behaves like a model trained on the template.
* ``RecordingEngine``: wraps a real engine (the HF tiny model) and records every call, so an
  episode's segments can be checked against what was sampled (``check_segments``).
* ``gateway_for``: a running gateway over a ``TokenLLM`` (stopped by the fixture that made it).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aworld_core.gateway import Gateway, GatewayServer
from aworld_core.testing import assistant_turn_text, load_template
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM, TokenOutput
from aworld_core.tokens.engine import engine_features

GEN_PROMPT = "<|im_start|>assistant\n"


@dataclass
class ToolPolicy:
    """Turn ``k`` of a session calls ``plan[k]`` (a list of ``(name, arguments)``); after the plan
    it answers ``answer``. A forced prefix in the prompt is continued: a named function is called
    with ``arguments[name]`` (default ``{}``), ``required`` calls the turn's planned function."""

    tokenizer: Any
    plan: list[list[tuple[str, dict[str, Any]]]]
    answer: str = "The answer is 5."
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    content: str = ""  # text before the calls of a call turn
    turns: dict[str, int] = field(default_factory=dict)

    def turn_text(self, message: dict[str, Any]) -> str:
        return assistant_turn_text(self.tokenizer, load_template("qwen2_5"), message)

    def __call__(self, prompt_ids: list[int], sampling: Any, request_id: str) -> list[int]:
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        forced = text[text.rfind(GEN_PROMPT) + len(GEN_PROMPT) :]
        k = self.turns.get(request_id, 0)
        self.turns[request_id] = k + 1
        if forced:
            named = forced.rsplit('{"name": "', 1)[-1]
            if named:  # a named function: call it
                calls = [(named, self.arguments.get(named, {}))]
            else:  # required: the planned call, else the first planned one
                calls = self.plan[min(k, len(self.plan) - 1)][:1]
            message = {"role": "assistant", "content": "", "tool_calls": _calls(calls)}
        elif k < len(self.plan):
            message = {"role": "assistant", "content": self.content, "tool_calls": _calls(self.plan[k])}
        else:
            message = {"role": "assistant", "content": self.answer}
        full = self.turn_text(message)
        if not full.startswith(forced):
            raise AssertionError(f"the forced prefix {forced!r} is not how {full!r} begins")
        return self.tokenizer.encode(full[len(forced) :], add_special_tokens=False)


def _calls(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls)
    ]


class RecordingEngine:
    """A real engine with every call recorded as ``(prompt_ids, TokenOutput)`` per request id."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.features = engine_features(engine) - {"stream"}
        self.calls: dict[str, list[tuple[list[int], TokenOutput]]] = {}
        self.samplings: dict[str, list[Any]] = {}  # the SamplingParams of each call
        if callable(getattr(engine, "stream", None)):
            self.stream = self._stream

    async def generate(self, prompt_ids: list[int], sampling: Any, *, request_id: str) -> TokenOutput:
        self.samplings.setdefault(request_id, []).append(sampling)
        out = await self.engine.generate(prompt_ids, sampling, request_id=request_id)
        self.calls.setdefault(request_id, []).append((list(prompt_ids), out))
        return out

    async def _stream(self, prompt_ids: list[int], sampling: Any, *, request_id: str) -> AsyncIterator[TokenOutput]:
        self.samplings.setdefault(request_id, []).append(sampling)
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        reason = None
        async for piece in self.engine.stream(prompt_ids, sampling, request_id=request_id):
            ids += piece.token_ids
            logprobs += piece.logprobs or []
            versions += piece.versions()
            reason = piece.stop_reason or reason
            yield piece
        self.calls.setdefault(request_id, []).append((list(prompt_ids), TokenOutput(ids, logprobs, reason, versions)))


def scripted_calls(engine: ScriptedTokenEngine, session: str) -> list[Any]:
    return [c for c in engine.calls if c.request_id == session]


def tool_schema(name: str, properties: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or name,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }


def start_gateway(llm: TokenLLM) -> GatewayServer:
    return GatewayServer(Gateway(llm)).start()


def qwen_llm(engine: Any, tokenizer: Any, **kwargs: Any) -> TokenLLM:
    return TokenLLM(engine, tokenizer, chat_template=load_template("qwen2_5"), model_name="tiny-policy", **kwargs)


def loads(text: str) -> Any:
    return json.loads(text)
