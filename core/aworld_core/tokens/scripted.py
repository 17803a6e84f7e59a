"""``ScriptedTokenEngine``: a real ``TokenEngine`` that returns predetermined ids.

For deterministic tests and demos of the token path without a model: it honours ``max_tokens``
and stop ids like a real engine (cutting the scripted output and reporting ``"length"`` or
``"stop"``), and records every call so a test can compare what was sampled with what was trained.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import LENGTH, STOP, STOP_TOKEN_IDS, TokenOutput

Script = Callable[[list[int], SamplingParams, str], "TokenOutput | list[int]"]


@dataclass
class ScriptedCall:
    """One generation as the engine saw and answered it."""

    request_id: str
    prompt_ids: list[int]
    sampling: SamplingParams
    output: TokenOutput


class ScriptedTokenEngine:
    """Answers from ``script``: a list of outputs used in order, or ``f(prompt_ids, sampling,
    request_id)``. A bare id list gets logprob ``-0.5`` per token and ``version``.

    ``stream()`` hands the planned ids over one at a time, ``token_delay_s`` apart (a test of a
    streaming client sees them arrive). ``features`` declares what else the script honours (a test
    that scripts ``top_logprobs`` says so); by default nothing beyond the protocol."""

    def __init__(
        self,
        script: Script | Iterable[TokenOutput | list[int]],
        *,
        version: int = 0,
        delay_s: float = 0.0,
        token_delay_s: float = 0.0,
        features: Iterable[str] = (),
    ):
        if callable(script):
            self._script: Script = script
        else:
            queue = list(script)

            def pop(prompt_ids: list[int], sampling: SamplingParams, request_id: str) -> TokenOutput | list[int]:
                if not queue:
                    raise UsageError("the scripted engine ran out of scripted outputs")
                return queue.pop(0)

            self._script = pop
        self.version = version
        self.delay_s = delay_s
        self.token_delay_s = token_delay_s
        self.features = frozenset(features)
        self.calls: list[ScriptedCall] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        planned = self._script(list(prompt_ids), sampling, request_id)
        if not isinstance(planned, TokenOutput):
            planned = TokenOutput(list(planned), [-0.5] * len(planned), None, self.version)
        ids = list(planned.token_ids)
        logprobs = None if planned.logprobs is None else list(planned.logprobs)
        versions = planned.versions()
        reason = planned.stop_reason
        stops = set(sampling.extra.get(STOP_TOKEN_IDS) or [])
        cut = next((i + 1 for i, t in enumerate(ids) if t in stops), None)
        if cut is not None and cut < len(ids):
            ids, reason = ids[:cut], STOP
        if sampling.max_tokens is not None and len(ids) > sampling.max_tokens:
            cut = sampling.max_tokens
            ids, reason = ids[:cut], LENGTH
        if reason is None:
            reason = STOP if ids and ids[-1] in stops else LENGTH
        n = len(ids)
        output = TokenOutput(
            ids,
            None if logprobs is None else logprobs[:n],
            reason,
            planned.version if isinstance(planned.version, int) or planned.version is None else versions[:n],
            None if planned.top_logprobs is None else planned.top_logprobs[:n],
        )
        self.calls.append(ScriptedCall(request_id, list(prompt_ids), sampling, output))
        return output

    async def stream(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> AsyncIterator[TokenOutput]:
        output = await self.generate(prompt_ids, sampling, request_id=request_id)
        versions = output.versions()
        n = len(output.token_ids)
        for i in range(n):
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            yield TokenOutput(
                [output.token_ids[i]],
                None if output.logprobs is None else [output.logprobs[i]],
                output.stop_reason if i == n - 1 else None,
                [versions[i]],
                None if output.top_logprobs is None else [output.top_logprobs[i]],
            )
        if n == 0:
            yield TokenOutput([], None if output.logprobs is None else [], output.stop_reason, [], None)
