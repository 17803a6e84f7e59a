"""``HFTokenEngine``: a ``TokenEngine`` over a local HuggingFace causal LM (CPU or one GPU).

The reference engine for tests, the demo and single-machine backends (the TRL backend wraps the
model it trains in one). torch and transformers are imported lazily.

Logprobs (``logprobs_mode``, also per request as ``sampling.extra['logprobs_mode']``):

* ``"scaled"`` (default): ``log_softmax(logits / temperature)`` of the sampled token, without
  top-k / top-p truncation. This is the quantity verl, TRL and AReaL recompute for the policy
  (their actors divide logits by the rollout temperature, no truncation), so importance ratios
  between rollout and trainer start at 1. At temperature 1 it equals ``"raw"``.
* ``"raw"``: ``log_softmax(logits)``, the policy at temperature 1, whatever the sampling settings.
* ``"processed"``: the log-probability under the distribution the token was really drawn from
  (temperature, then top-k and top-p, renormalized).

Greedy decoding (temperature 0) reports ``"raw"`` logprobs in the first two modes and 0.0 in
``"processed"`` (the draw was certain).

Concurrent requests arriving within ``batch_window_s`` with the same temperature, top-p, top-k and
logprobs mode are left-padded and generated together; each row keeps its own ``max_tokens``,
stop ids, stop strings and seed. A seeded request draws from its own ``torch.Generator``, so it
repeats exactly when run alone; batched with others its numerics may differ in the last bits.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import LENGTH, LOGPROBS_MODE, STOP, STOP_TOKEN_IDS, TokenOutput

LOGPROBS_MODES = ("scaled", "raw", "processed")


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[TokenOutput]
    stop_ids: set[int] = field(default_factory=set)


class HFTokenEngine:
    """Samples from a ``transformers`` causal LM, token ids in and out, with logprobs."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        stop_token_ids: list[int] | None = None,
        max_new_tokens: int = 512,
        logprobs_mode: str = "scaled",
        batch_window_s: float = 0.003,
        max_batch_size: int = 16,
        version: int = 0,
    ):
        if logprobs_mode not in LOGPROBS_MODES:
            raise UsageError(f"logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {logprobs_mode!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.logprobs_mode = logprobs_mode
        self.batch_window_s = batch_window_s
        self.max_batch_size = max(1, max_batch_size)
        self.version = version
        self.stop_token_ids = set(stop_token_ids or []) | _default_stops(model, tokenizer)
        config = model.config
        self.vocab_size = int(getattr(config, "vocab_size", 0) or 0)
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 0) or None
        pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
        self.pad_id = pad if pad is not None else (min(self.stop_token_ids) if self.stop_token_ids else 0)
        # held while the model runs; a trainer sharing the model holds it while it changes weights
        self.weights_lock = threading.Lock()
        self._pending: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, list[_Request]]] = (
            weakref.WeakKeyDictionary()
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches_run = 0  # how many forward batches ran (for tests and benchmarks)
        self.largest_batch = 0

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, tokenizer: Any = None, device: str = "cpu", dtype: Any = None, **kwargs: Any
    ) -> HFTokenEngine:
        """Load a model directory (and its tokenizer unless given) onto ``device``."""
        from transformers import AutoModelForCausalLM

        from aworld_core.tokens.llm import load_tokenizer

        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype) if dtype else (
            AutoModelForCausalLM.from_pretrained(str(path))
        )
        model.to(device)
        model.eval()
        return cls(model, tokenizer if tokenizer is not None else load_tokenizer(path), **kwargs)

    def set_version(self, version: int) -> None:
        """The policy version stamped on tokens sampled from now on (a trainer bumps it per update)."""
        self.version = version

    # -- TokenEngine --------------------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        self._check(prompt_ids, sampling)
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), sampling, loop.create_future())
        request.stop_ids = self.stop_token_ids | set(sampling.extra.get(STOP_TOKEN_IDS) or [])
        key = self._batch_key(sampling)
        pending = self._pending.setdefault(loop, {})
        batch = pending.get(key)
        if batch is None:
            batch = pending[key] = []
            if self.batch_window_s > 0 and self.max_batch_size > 1:
                loop.call_later(self.batch_window_s, self._launch, loop, key)
            else:
                loop.call_soon(self._launch, loop, key)
        batch.append(request)
        if len(batch) >= self.max_batch_size:
            self._launch(loop, key)
        return await request.future

    def _batch_key(self, sampling: SamplingParams) -> tuple:
        mode = sampling.extra.get(LOGPROBS_MODE, self.logprobs_mode)
        return (sampling.temperature, sampling.top_p, sampling.top_k, mode)

    def _check(self, prompt_ids: list[int], sampling: SamplingParams) -> None:
        if not prompt_ids:
            raise UsageError("prompt_ids is empty; a generation needs at least one prompt token")
        bad = [t for t in prompt_ids if not isinstance(t, int) or t < 0 or (self.vocab_size and t >= self.vocab_size)]
        if bad:
            raise UsageError(f"prompt_ids has ids outside the model's vocabulary of {self.vocab_size}: {bad[:5]}")
        if self.max_positions is not None and len(prompt_ids) >= self.max_positions:
            raise UsageError(
                f"the prompt is {len(prompt_ids)} tokens; the model's context is {self.max_positions} positions"
            )
        mode = sampling.extra.get(LOGPROBS_MODE, self.logprobs_mode)
        if mode not in LOGPROBS_MODES:
            raise UsageError(f"logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {mode!r}")
        if sampling.stop and self.tokenizer is None:
            raise UsageError("stop strings need the engine's tokenizer; pass tokenizer= to HFTokenEngine")
        if sampling.temperature is not None and sampling.temperature < 0:
            raise UsageError(f"temperature must be >= 0, got {sampling.temperature}")
        if sampling.top_p is not None and not 0 < sampling.top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {sampling.top_p}")

    def _launch(self, loop: asyncio.AbstractEventLoop, key: tuple) -> None:
        batch = self._pending.get(loop, {}).pop(key, None)
        if not batch:
            return
        task = loop.create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Request]) -> None:
        try:
            outputs = await asyncio.to_thread(self._generate_batch, batch)
        except BaseException as exc:  # every waiter must hear about the failure
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for request, output in zip(batch, outputs, strict=True):
            if not request.future.done():
                request.future.set_result(output)

    # -- the decode loop ----------------------------------------------------------------------

    def _generate_batch(self, batch: list[_Request]) -> list[TokenOutput]:
        """Generate every request of ``batch`` together (blocking; run in a worker thread)."""
        import torch

        with self.weights_lock, torch.no_grad():
            return self._decode(batch)

    def _decode(self, batch: list[_Request]) -> list[TokenOutput]:
        import torch

        device = next(self.model.parameters()).device
        size = len(batch)
        self.batches_run += 1
        self.largest_batch = max(self.largest_batch, size)
        first = batch[0].sampling
        mode = first.extra.get(LOGPROBS_MODE, self.logprobs_mode)
        temperature = 1.0 if first.temperature is None else float(first.temperature)
        version = self.version

        lengths = [len(r.prompt_ids) for r in batch]
        width = max(lengths)
        input_ids = torch.full((size, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((size, width), dtype=torch.long)
        for i, request in enumerate(batch):
            input_ids[i, width - lengths[i] :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention[i, width - lengths[i] :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        limits = []
        for request, length in zip(batch, lengths, strict=True):
            limit = request.sampling.max_tokens or self.max_new_tokens
            if self.max_positions is not None:
                limit = min(limit, self.max_positions - length)
            limits.append(max(0, limit))
        generators = []
        for request in batch:
            seed = request.sampling.seed
            generators.append(None if seed is None else torch.Generator(device=device).manual_seed(int(seed)))

        tokens: list[list[int]] = [[] for _ in batch]
        logprobs: list[list[float]] = [[] for _ in batch]
        reasons: list[str | None] = [None] * size
        done = [limit == 0 for limit in limits]
        for i in range(size):
            if done[i]:
                reasons[i] = LENGTH

        step_ids = input_ids.to(device)
        attention = attention.to(device)
        positions = positions.to(device)
        past = None
        while not all(done):
            out = self.model(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            chosen, chosen_logprobs = self._sample(logits, temperature, first.top_p, first.top_k, mode, generators)
            # one transfer to Python per step, not one tensor index per row
            chosen_list, logprob_list = chosen.tolist(), chosen_logprobs.tolist()
            for i, request in enumerate(batch):
                if done[i]:
                    continue
                token = chosen_list[i]
                tokens[i].append(token)
                logprobs[i].append(logprob_list[i])
                if token in request.stop_ids or self._hit_stop_string(request, tokens[i]):
                    done[i], reasons[i] = True, STOP
                elif len(tokens[i]) >= limits[i]:
                    done[i], reasons[i] = True, LENGTH
            if all(done):
                break
            step_ids = torch.tensor(
                [[tokens[i][-1] if tokens[i] else self.pad_id] for i in range(size)], dtype=torch.long, device=device
            )
            attention = torch.cat([attention, torch.ones((size, 1), dtype=attention.dtype, device=device)], dim=-1)
            positions = positions[:, -1:] + 1
        return [TokenOutput(tokens[i], logprobs[i], reasons[i], version) for i in range(size)]

    def _sample(
        self,
        logits: Any,
        temperature: float,
        top_p: float | None,
        top_k: int | None,
        mode: str,
        generators: list[Any],
    ) -> tuple[Any, Any]:
        import torch

        raw = torch.log_softmax(logits, dim=-1)
        if temperature == 0:
            chosen = logits.argmax(dim=-1)
            picked = raw.gather(-1, chosen[:, None]).squeeze(-1)
            return chosen, torch.zeros_like(picked) if mode == "processed" else picked
        scaled = logits / temperature
        filtered = scaled
        if top_k is not None and 0 < top_k < filtered.shape[-1]:
            kth = torch.topk(filtered, top_k, dim=-1).values[:, -1:]
            filtered = filtered.masked_fill(filtered < kth, float("-inf"))
        if top_p is not None and top_p < 1.0:
            ordered, order = torch.sort(filtered, dim=-1, descending=True)
            cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(ordered, dim=-1) >= top_p  # keep the first token past top_p
            ordered = ordered.masked_fill(drop, float("-inf"))
            filtered = torch.full_like(filtered, float("-inf")).scatter(-1, order, ordered)
        probs = torch.softmax(filtered, dim=-1)
        if all(generator is None for generator in generators):
            chosen = torch.multinomial(probs, 1).squeeze(-1)  # the whole batch in one draw
        else:  # a seeded request draws from its own generator (reproducible whatever its batch)
            chosen = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
            for i in range(probs.shape[0]):
                chosen[i] = torch.multinomial(probs[i], 1, generator=generators[i])[0]
        if mode == "raw":
            table = raw
        elif mode == "scaled":
            table = torch.log_softmax(scaled, dim=-1)
        else:
            table = torch.log_softmax(filtered, dim=-1)
        return chosen, table.gather(-1, chosen[:, None]).squeeze(-1)

    def _hit_stop_string(self, request: _Request, tokens: list[int]) -> bool:
        stops = request.sampling.stop
        if not stops:
            return False
        window = max(len(s) for s in stops) * 4 + 1  # a character is at most 4 byte-level tokens
        text = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(s and s in text for s in stops)


def _default_stops(model: Any, tokenizer: Any) -> set[int]:
    """The eos ids of the tokenizer and of the model's generation config."""
    stops: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    if isinstance(eos, int):
        stops.add(eos)
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    if isinstance(eos, int):
        stops.add(eos)
    elif isinstance(eos, list):
        stops.update(int(e) for e in eos)
    return stops
