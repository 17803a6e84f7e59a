"""``ArealTokenEngine``: the core's ``TokenEngine`` over AReaL's ``InferenceEngine.agenerate``.

Every LLM call of an episode goes through ``engine.agenerate``, so AReaL sees each request: its
weight-update pauses hold them, its staleness control counts them, and each sampled token comes
back stamped with the policy version that produced it (``output_versions``; a request interrupted
by a weight update carries two versions). The request id is the episode's session id, so AReaL
keeps a whole episode on one server and reuses its KV cache.

Sampling comes from AReaL's ``gconfig`` (temperature, top-p, top-k, greedy): the actor
recomputes logprobs with the same settings, so the agent's own sampling fields are ignored
during training. What an LLM call adds is per call: a tighter ``max_tokens`` (the episode's
remaining budget), extra stop token ids (the chat template's end of turn) and stop strings.
"""

from __future__ import annotations

from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens import ABORT, LENGTH, STOP, STOP_TOKEN_IDS, TokenOutput

# AReaL's stop reasons -> the core's. "tool_calls" is SGLang's word for a stop on a tool parser.
_STOP_REASONS = {"stop": STOP, "tool_calls": STOP, "length": LENGTH, "abort": ABORT}


def as_gconfig(gconfig: Any) -> Any:
    """AReaL ``GenerationHyperparameters`` from an instance or a plain dict (as in YAML)."""
    from areal.api.cli_args import GenerationHyperparameters

    if isinstance(gconfig, GenerationHyperparameters):
        return gconfig
    if gconfig is None:
        return GenerationHyperparameters()
    if isinstance(gconfig, dict):
        try:
            return GenerationHyperparameters(**gconfig)
        except TypeError as exc:
            raise UsageError(f"gconfig {gconfig!r} is not valid for AReaL's GenerationHyperparameters: {exc}") from None
    raise UsageError(f"gconfig must be AReaL's GenerationHyperparameters or a dict, got {type(gconfig).__name__}")


class ArealTokenEngine:
    """Ids in, sampled ids out, through an AReaL engine (``RemoteSGLangEngine``, ``RemotevLLMEngine``,
    or anything with ``agenerate(ModelRequest) -> ModelResponse``)."""

    def __init__(self, engine: Any, gconfig: Any, tokenizer: Any = None):
        if not callable(getattr(engine, "agenerate", None)):
            raise UsageError(
                f"engine {type(engine).__name__} has no agenerate(); pass the InferenceEngine AReaL "
                "hands to RolloutWorkflow.arun_episode"
            )
        self.engine = engine
        self.gconfig = as_gconfig(gconfig)
        self.tokenizer = tokenizer

    def request_gconfig(self, sampling: SamplingParams) -> Any:
        """This call's ``GenerationHyperparameters``: ``n_samples=1`` (AReaL's engines sample one
        sequence per request; each of a group's ``gconfig.n_samples`` members is its own episode),
        the per-call limits and stops added."""
        g = self.gconfig.new(n_samples=1)
        if sampling.max_tokens is not None:
            g.max_new_tokens = min(g.max_new_tokens, sampling.max_tokens)
        extra_ids = [int(i) for i in sampling.extra.get(STOP_TOKEN_IDS) or []]
        g.stop_token_ids = list(dict.fromkeys([*g.stop_token_ids, *extra_ids]))
        if sampling.stop:
            g.stop = list(dict.fromkeys([*(g.stop or []), *sampling.stop]))
        return g

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        from areal.api.io_struct import ModelRequest

        g = self.request_gconfig(sampling)
        room = min(g.max_new_tokens, g.max_tokens - len(prompt_ids))
        if room <= 0:
            # the context (gconfig.max_tokens) is full: end the episode as cut by length
            # instead of letting agenerate raise on a non-positive budget
            return TokenOutput([], [], LENGTH, [])
        request = ModelRequest(rid=request_id, input_ids=list(prompt_ids), gconfig=g, tokenizer=self.tokenizer)
        response = await self.engine.agenerate(request)
        tokens = [int(t) for t in response.output_tokens]
        versions = [int(v) for v in response.output_versions]
        if len(versions) != len(tokens):
            raise ValueError(
                f"AReaL returned {len(tokens)} output tokens but {len(versions)} output_versions for "
                f"request {request_id!r}"
            )
        return TokenOutput(
            tokens,
            [float(x) for x in response.output_logprobs],
            _STOP_REASONS.get(response.stop_reason, STOP),
            versions,
        )
