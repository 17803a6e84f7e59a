"""The TokenEngine protocol: ids in, sampled ids (with logprobs and policy version) out.

Every backend's inference path fits it in a few lines, which is what lets one token-exact
accumulation path (``TokenLLM``) serve all of them:

* verl 0.9: ``out = await server_manager.generate(request_id, prompt_ids=ids, sampling_params=sp)``
  then ``TokenOutput(out.token_ids, out.log_probs, out.stop_reason)``;
* AReaL 1.0: ``resp = await engine.agenerate(ModelRequest(rid=request_id, input_ids=ids, gconfig=g))``
  then ``TokenOutput(resp.output_tokens, resp.output_logprobs, resp.stop_reason, resp.output_versions)``
  (the same ``rid`` for a whole episode keeps its KV cache on one server);
* TRL / ms-swift: the policy being trained, wrapped in ``HFTokenEngine``.

``request_id`` is the episode's session id, so an engine can route an episode to one server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from aworld_core.schemas import SamplingParams

# Why a generation ended. Engines map their own words onto these: verl's "completed" and vLLM's
# "stop" / "eos" are STOP, "length" is LENGTH, an aborted request is ABORT.
STOP = "stop"
LENGTH = "length"
ABORT = "abort"

# ``SamplingParams.extra`` keys TokenLLM sets and engines should honour.
STOP_TOKEN_IDS = "stop_token_ids"  # list[int]: stop after sampling any of these (the id is kept)
LOGPROBS_MODE = "logprobs_mode"  # "raw" | "scaled" | "processed" (see HFTokenEngine)

# ``SamplingParams.extra`` keys for what OpenAI clients may ask of a turn. An engine honours only
# those it lists in its ``features`` (``engine_features``); ``TokenLLM`` refuses a request that
# needs one the engine lacks, naming it, rather than sampling without it.
TOP_LOGPROBS = "top_logprobs"  # int k: TokenOutput.top_logprobs holds the k most likely ids per token
LOGIT_BIAS = "logit_bias"  # dict[int, float]: added to the logits before sampling (OpenAI's -100..100)
PRESENCE_PENALTY = "presence_penalty"  # float: subtracted once from every id sampled so far
FREQUENCY_PENALTY = "frequency_penalty"  # float: subtracted per time an id was sampled so far
STRUCTURED_OUTPUT = "structured_output"  # {"json_schema": schema} | {"json_object": True}: grammar-constrained
STREAM = "stream"  # not a sampling key: the engine has ``stream()`` (tokens as they are sampled)
# Which of the engine's LoRA adapters samples the request (several policies on one base model,
# ``aworld_core.policies``); only engines listing it in ``features`` take it (``AdapterEngine`` checks).
ADAPTER = "adapter"
FEATURES = (TOP_LOGPROBS, LOGIT_BIAS, PRESENCE_PENALTY, FREQUENCY_PENALTY, STRUCTURED_OUTPUT, STREAM)


@dataclass
class TokenOutput:
    """What one generation sampled.

    ``token_ids`` are the sampled ids exactly as the engine produced them, including the stop
    token when the engine stopped on one. ``logprobs`` is aligned with them (``None`` when the
    engine cannot report them). ``version`` is the policy version that sampled them: one int, one
    per token (AReaL may update weights mid-generation), or ``None`` when unknown.
    """

    token_ids: list[int]
    logprobs: list[float] | None = None
    stop_reason: str | None = None
    version: int | list[int] | None = None
    # per sampled token, the ``extra['top_logprobs']`` most likely ids -> logprob (same mode as ``logprobs``)
    top_logprobs: list[dict[int, float]] | None = None

    def versions(self) -> list[int]:
        """The policy version of each token (-1 where unknown)."""
        n = len(self.token_ids)
        if self.version is None:
            return [-1] * n
        if isinstance(self.version, int):
            return [self.version] * n
        if len(self.version) != n:
            raise ValueError(
                f"TokenOutput has {n} token ids but {len(self.version)} versions; "
                "give one version per token, one int for all, or None"
            )
        return [int(v) for v in self.version]

    def check(self) -> None:
        """Raise ``ValueError`` naming the mismatch when the parts are not aligned."""
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"TokenOutput has {len(self.token_ids)} token ids but {len(self.logprobs)} logprobs; "
                "an engine must return one logprob per sampled token"
            )
        if self.top_logprobs is not None and len(self.top_logprobs) != len(self.token_ids):
            raise ValueError(
                f"TokenOutput has {len(self.token_ids)} token ids but {len(self.top_logprobs)} top-logprob "
                "entries; an engine must return one per sampled token"
            )
        self.versions()


@runtime_checkable
class TokenEngine(Protocol):
    """Generates from token ids. Implementations must never re-tokenize: ids in, ids out."""

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str
    ) -> TokenOutput:
        """Sample a continuation of ``prompt_ids``. ``sampling.max_tokens`` caps the new tokens;
        ``sampling.extra['stop_token_ids']`` lists extra ids to stop on (kept in the output)."""
        ...


def engine_features(engine: Any) -> frozenset[str]:
    """What ``engine`` honours beyond the protocol: its ``features`` (keys of ``FEATURES``); an
    engine with a ``stream`` method streams. Adapters that say nothing honour nothing more."""
    features = frozenset(getattr(engine, "features", ()) or ())
    if callable(getattr(engine, "stream", None)):
        features |= {STREAM}
    return features


class StreamingTokenEngine(TokenEngine, Protocol):
    """An engine that also yields its tokens as it samples them."""

    def stream(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> AsyncIterator[TokenOutput]:
        """The generation of ``generate`` in pieces: each yield holds the ids sampled since the last
        (with their logprobs, top logprobs and version); the last one has the ``stop_reason``."""
        ...
