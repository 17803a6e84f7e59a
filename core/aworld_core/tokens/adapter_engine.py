"""``AdapterEngine``: one policy's view of an engine that serves several LoRA adapters of one base.

A multi-policy job (``aworld_core.policies``) runs one ``TokenLLM`` per policy, each keeping its
own sessions; the policies that are adapters of one base model share one engine (one copy of the
base weights). Each policy's ``TokenLLM`` samples through an ``AdapterEngine`` that names its
adapter on every request (``sampling.extra['adapter']``), so the engine selects it per request and
stamps the tokens with that adapter's own version. Nothing else changes: ids in, ids out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import ADAPTER, TokenOutput, engine_features


class AdapterEngine:
    """``engine`` with every request sampled by its adapter ``adapter``."""

    def __init__(self, engine: Any, adapter: str):
        if ADAPTER not in engine_features(engine):
            raise UsageError(
                f"{type(engine).__name__} cannot select a LoRA adapter per request, which policy {adapter!r} "
                f"needs (several adapters of one base model); serve it with the HF engine over a peft.PeftModel"
            )
        known = getattr(engine, "adapters", None)
        if callable(known) and adapter != "__base__" and adapter not in known():
            raise UsageError(
                f"the engine's model has no LoRA adapter {adapter!r} (it has: {', '.join(known()) or 'none'}); "
                f"add it before sampling"
            )
        self.engine = engine
        self.adapter = adapter
        # what the shared engine honours (stream included), less nothing: the adapter rides along
        self.features = engine_features(engine)

    def __repr__(self) -> str:
        return f"AdapterEngine({type(self.engine).__name__}, adapter={self.adapter!r})"

    def _sampling(self, sampling: SamplingParams) -> SamplingParams:
        given = sampling.extra.get(ADAPTER)
        if given is not None and given != self.adapter:
            raise UsageError(f"a request for adapter {given!r} reached policy {self.adapter!r}'s engine")
        return sampling.model_copy(update={"extra": {**sampling.extra, ADAPTER: self.adapter}})

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        return await self.engine.generate(prompt_ids, self._sampling(sampling), request_id=request_id)

    def stream(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> AsyncIterator[TokenOutput]:
        return self.engine.stream(prompt_ids, self._sampling(sampling), request_id=request_id)

    def set_version(self, version: int) -> None:
        """The version stamped on what this adapter samples from now on."""
        self.engine.set_version(version, adapter=self.adapter)

    async def aclose(self) -> None:
        """The shared engine is closed by whoever made it, not by one policy's client."""
        return None
