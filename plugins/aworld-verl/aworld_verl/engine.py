"""``VerlTokenEngine``: the core's ``TokenEngine`` over verl's ``server_manager.generate``.

verl 0.9.1 hands each agent loop an ``LLMServerClient`` whose public ``generate(request_id, *,
prompt_ids, sampling_params, **kwargs)`` routes a request to a rollout server (sticky per
``request_id``, so one episode keeps its prefix cache on one server) and returns verl's
``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``, ``num_preempted``,
``extra_fields["global_steps"]``). Upstream called the private ``_choose_server``, which 0.9.1 no
longer has; this engine uses only ``generate``.

An aborted request (a weight sync paused the server: vLLM's ``finish_reason="abort"``, or a
request parked behind a closed gate) comes back with ``stop_reason="aborted"`` and the tokens
sampled so far with their logprobs, or no tokens and ``log_probs=None`` when it was aborted before
the first one. The engine reports it as ``ABORT`` with those tokens (an empty logprob list for
none), and the core's ``TokenLLM`` resumes it from them, as verl's own ``FullyAsyncLLMServerClient``
does: the next request's prompt is the prompt plus the sampled tokens, with the budget left.

Per episode the engine also keeps what verl wants back in ``AgentLoopOutput``: the summed
``num_preempted``, the time spent generating, and the policy versions (``global_steps``) seen.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aworld_core.errors import LLMError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens import ABORT, LENGTH, STOP, STOP_TOKEN_IDS, TokenOutput
from aworld_verl.sampling import verl_sampling_params

# verl's servers say "completed" for both a stop token and max_tokens; vLLM's own words too
_STOP_WORDS = {"completed", "stop", "eos", "finished"}
_ABORT_WORDS = {"aborted", "abort", "cancelled"}
_LENGTH_WORDS = {"length", "max_tokens"}


@dataclass
class EpisodeEngineStats:
    """What the engine saw of one episode (all its sessions): for verl's metrics and staleness tags."""

    calls: int = 0
    generate_s: float = 0.0
    num_preempted: int | None = None
    min_global_steps: int | None = None
    max_global_steps: int | None = None
    priority: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, out: Any, seconds: float) -> None:
        self.calls += 1
        self.generate_s += seconds
        preempted = getattr(out, "num_preempted", None)
        if preempted is not None:
            self.num_preempted = (self.num_preempted or 0) + int(preempted)
        extra = getattr(out, "extra_fields", None) or {}
        for key, pick in (("min_global_steps", min), ("max_global_steps", max)):
            value = extra.get(key, extra.get("global_steps"))
            if value is None:
                continue
            current = getattr(self, key)
            setattr(self, key, int(value) if current is None else pick(current, int(value)))


def _episode_of(request_id: str) -> str:
    """The runtime names an episode's sessions ``<episode_id>``, ``<episode_id>:1``, ..."""
    return request_id.split(":", 1)[0]


class VerlTokenEngine:
    """Ids in, ids out through verl's rollout servers; never re-tokenizes.

    ``server_manager`` is the ``LLMServerClient`` verl passes to agent loops (anything with that
    ``generate`` signature works: a test double, a fully-async client). Logprobs are always
    requested: RL needs the sampling logprobs, whatever ``rollout.calculate_log_probs`` says.
    """

    def __init__(self, server_manager: Any):
        if not callable(getattr(server_manager, "generate", None)):
            raise LLMError(
                f"verl's server manager {type(server_manager).__name__} has no generate(); "
                "AworldAgentLoop needs verl >= 0.9's LLMServerClient"
            )
        self.server_manager = server_manager
        self._episodes: dict[str, EpisodeEngineStats] = {}
        self._lock = threading.Lock()

    # -- per-episode bookkeeping ------------------------------------------------------------

    def begin(self, episode_id: str, priority: int = 0) -> None:
        """Start tracking ``episode_id``; ``priority`` goes to vLLM's scheduler (verl V1 sets it)."""
        with self._lock:
            self._episodes[episode_id] = EpisodeEngineStats(priority=int(priority))

    def end(self, episode_id: str) -> EpisodeEngineStats:
        """Stop tracking ``episode_id`` and return what was recorded."""
        with self._lock:
            return self._episodes.pop(episode_id, None) or EpisodeEngineStats()

    # -- the TokenEngine protocol -----------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        params = verl_sampling_params(sampling)
        with self._lock:
            stats = self._episodes.get(_episode_of(request_id))
        kwargs: dict[str, Any] = {}
        if stats is not None and stats.priority:
            kwargs["priority"] = stats.priority
        started = time.perf_counter()
        out = await self.server_manager.generate(
            request_id, prompt_ids=list(prompt_ids), sampling_params=params, **kwargs
        )
        seconds = time.perf_counter() - started
        if stats is not None:
            stats.record(out, seconds)
        token_ids = [int(t) for t in (getattr(out, "token_ids", None) or [])]
        log_probs = getattr(out, "log_probs", None)
        logprobs = None if log_probs is None else [float(x) for x in log_probs]
        if not token_ids:
            logprobs = []  # nothing sampled (an abort before the first token): zero logprobs, not unknown
        elif logprobs is not None and not logprobs:
            logprobs = None  # an empty list for sampled tokens is "no logprobs", not zero of them
        version = (getattr(out, "extra_fields", None) or {}).get("global_steps")
        return TokenOutput(
            token_ids=token_ids,
            logprobs=logprobs,
            stop_reason=_stop_reason(getattr(out, "stop_reason", None), token_ids, sampling),
            version=None if version is None else int(version),
        )


def _stop_reason(raw: str | None, token_ids: list[int], sampling: SamplingParams) -> str | None:
    """verl's stop reason in the core's words; "completed" at ``max_tokens`` without a stop id is LENGTH."""
    if raw is None:
        return None
    word = str(raw).lower()
    if word in _ABORT_WORDS:
        return ABORT
    if word in _LENGTH_WORDS:
        return LENGTH
    if word in _STOP_WORDS:
        stops = set(sampling.extra.get(STOP_TOKEN_IDS) or [])
        limit = sampling.max_tokens
        if limit is not None and len(token_ids) >= limit and not (token_ids and token_ids[-1] in stops):
            return LENGTH
        return STOP
    return word
