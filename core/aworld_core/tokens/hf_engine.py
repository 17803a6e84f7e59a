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

What OpenAI clients may ask of a turn (``sampling.extra``, see ``aworld_core.tokens.engine``):
``logit_bias`` (added to the logits), ``presence_penalty`` / ``frequency_penalty`` (OpenAI's
definition: over the ids this generation sampled so far) change the distribution drawn from, so
they count as processing: ``"processed"`` logprobs include them, ``"scaled"`` and ``"raw"`` (the
policy the trainer recomputes) do not. ``top_logprobs`` (k) reports the k most likely ids per
sampled token from the same table as ``logprobs``. ``stream()`` yields tokens as they are sampled.

Several LoRA adapters of one base model (several policies, ``aworld_core.policies``): when the model
is a ``peft.PeftModel``, ``sampling.extra['adapter']`` names the adapter that samples the request
(``"__base__"``: the base model without adapters). Requests naming adapters are batched together,
each row through its own adapter (peft's mixed-adapter forward, ``adapter_names``: the base layer
on the whole batch, each adapter on its rows); requests naming none are batched apart, through the
model as it is. Each adapter has its own policy version (``set_version(v, adapter=name)``).

Concurrent requests arriving within ``batch_window_s`` with the same temperature, top-p, top-k and
logprobs mode are left-padded and generated together; each row keeps its own ``max_tokens``,
stop ids, stop strings and seed. A seeded request draws from its own ``torch.Generator``, so it
repeats exactly when run alone; batched with others its numerics may differ in the last bits.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import (
    ABORT,
    ADAPTER,
    FREQUENCY_PENALTY,
    LENGTH,
    LOGIT_BIAS,
    LOGPROBS_MODE,
    PRESENCE_PENALTY,
    STOP,
    STOP_TOKEN_IDS,
    TOP_LOGPROBS,
    TokenOutput,
)

LOGPROBS_MODES = ("scaled", "raw", "processed")


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[TokenOutput]
    stop_ids: set[int] = field(default_factory=set)
    # called from the decode thread with (id, logprob, top logprobs or None, version) per sampled token
    sink: Callable[[int, float, dict[int, float] | None, int], None] | None = None


class HFTokenEngine:
    """Samples from a ``transformers`` causal LM, token ids in and out, with logprobs."""

    features = frozenset({TOP_LOGPROBS, LOGIT_BIAS, PRESENCE_PENALTY, FREQUENCY_PENALTY, ADAPTER})

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
        self.adapter_versions: dict[str, int] = {}  # per LoRA adapter; one not here has ``version``
        self.stop_token_ids = set(stop_token_ids or []) | _default_stops(model, tokenizer)
        config = model.config
        self.vocab_size = int(getattr(config, "vocab_size", 0) or 0)
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 0) or None
        pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
        self.pad_id = pad if pad is not None else (min(self.stop_token_ids) if self.stop_token_ids else 0)
        # held while the model runs; a trainer sharing the model holds it while it changes weights
        self.weights_lock = threading.Lock()
        # set by whoever is about to change the weights (then waits for weights_lock): the running
        # decode ends its unfinished rows after the current token with stop_reason "abort", keeping
        # what they sampled (TokenLLM resumes them on the new weights, as it does vLLM's aborts)
        self.abort_requested = False
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

    def set_version(self, version: int, adapter: str | None = None) -> None:
        """The policy version stamped on tokens sampled from now on (a trainer bumps it per update);
        ``adapter``: only on what that LoRA adapter samples (each policy counts its own updates)."""
        if adapter is None:
            self.version = version
        else:
            self.adapter_versions[adapter] = version

    def adapters(self) -> list[str]:
        """The LoRA adapters a request may name (the model's, when it is a ``peft.PeftModel``)."""
        if not _is_peft_model(self.model):
            return []
        return sorted(self.model.peft_config)

    # -- TokenEngine --------------------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        return await self._submit(prompt_ids, sampling, None)

    async def stream(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> AsyncIterator[TokenOutput]:
        """``generate`` token by token: each yield is the ids sampled since the last one; the last
        yield carries the stop reason (and whatever the decode thread sampled after the last hand-over)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, float, dict[int, float] | None, int]] = asyncio.Queue()

        def sink(token: int, logprob: float, top: dict[int, float] | None, version: int) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (token, logprob, top, version))

        result = asyncio.ensure_future(self._submit(prompt_ids, sampling, sink))
        sent = 0
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, result}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    token, logprob, top, version = getter.result()
                    sent += 1
                    yield TokenOutput([token], [logprob], None, version, None if top is None else [top])
                    continue
                getter.cancel()
                final = result.result()  # the whole generation: the rest of it is what was not handed over
                rest = final.token_ids[sent:]
                yield TokenOutput(
                    rest,
                    None if final.logprobs is None else final.logprobs[sent:],
                    final.stop_reason,
                    final.version,
                    None if final.top_logprobs is None else final.top_logprobs[sent:],
                )
                return
        finally:
            if not result.done():  # the consumer left early: the batch finishes the row on its own
                result.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _submit(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        sink: Callable[[int, float, dict[int, float] | None, int], None] | None,
    ) -> TokenOutput:
        self._check(prompt_ids, sampling)
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), sampling, loop.create_future(), sink=sink)
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
        return (sampling.temperature, sampling.top_p, sampling.top_k, mode, sampling.extra.get(ADAPTER) is not None)

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
        top = sampling.extra.get(TOP_LOGPROBS)
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20):
            raise UsageError(f"top_logprobs must be an int in [0, 20], got {top!r}")
        for key in (PRESENCE_PENALTY, FREQUENCY_PENALTY):
            value = sampling.extra.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise UsageError(f"{key} must be a number, got {value!r}")
        adapter = sampling.extra.get(ADAPTER)
        if adapter is not None and adapter != _BASE:
            known = self.adapters()
            if adapter not in known:
                raise UsageError(
                    f"adapter {adapter!r} is not one of this engine's LoRA adapters ("
                    + (", ".join(known) if known else "the model is not a peft.PeftModel: it has none")
                    + "); add it to the model (PeftModel.add_adapter / load_adapter) or name one it has"
                )
        bias = sampling.extra.get(LOGIT_BIAS)
        if bias is not None:
            if not isinstance(bias, dict):
                raise UsageError(f"logit_bias must map token ids to numbers, got {type(bias).__name__}")
            outside = [t for t in bias if not isinstance(t, int) or t < 0 or (self.vocab_size and t >= self.vocab_size)]
            if outside:
                raise UsageError(f"logit_bias names ids outside the model's vocabulary of {self.vocab_size}: {outside[:5]}")

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
        names = [r.sampling.extra.get(ADAPTER) for r in batch]
        adapters: dict[str, Any] = {}
        if names[0] is not None:  # the batch key keeps requests with and without adapters apart
            if self.model.training:
                raise UsageError(
                    "the engine's model is in training mode, where peft refuses per-row adapters; put it in "
                    "eval mode while it samples (model.eval(); the trl rollout does)"
                )
            adapters["adapter_names"] = names
        versions = [self.version if n is None else self.adapter_versions.get(n, self.version) for n in names]

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
        tops: list[list[dict[int, float]]] = [[] for _ in batch]
        top_k = [int(r.sampling.extra.get(TOP_LOGPROBS) or 0) for r in batch]
        wants_top = [r.sampling.extra.get(TOP_LOGPROBS) is not None for r in batch]
        adjust = _Adjustments.of(batch, device)
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
                **adapters,
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            chosen, chosen_logprobs, table = self._sample(
                logits, temperature, first.top_p, first.top_k, mode, generators, adjust
            )
            # one transfer to Python per step, not one tensor index per row
            chosen_list, logprob_list = chosen.tolist(), chosen_logprobs.tolist()
            top_lists = _top_entries(table, max(top_k)) if any(wants_top) else None
            if adjust is not None:
                adjust.count(chosen, done)
            for i, request in enumerate(batch):
                if done[i]:
                    continue
                token = chosen_list[i]
                tokens[i].append(token)
                logprobs[i].append(logprob_list[i])
                top = None
                if top_lists is not None and wants_top[i]:
                    top = dict(top_lists[i][: top_k[i]])
                    tops[i].append(top)
                if request.sink is not None:
                    request.sink(token, logprob_list[i], top, versions[i])
                if token in request.stop_ids or self._hit_stop_string(request, tokens[i]):
                    done[i], reasons[i] = True, STOP
                elif len(tokens[i]) >= limits[i]:
                    done[i], reasons[i] = True, LENGTH
            if all(done):
                break
            if self.abort_requested:  # new weights are waiting: hand back what was sampled so far
                for i in range(size):
                    if not done[i]:
                        done[i], reasons[i] = True, ABORT
                break
            step_ids = torch.tensor(
                [[tokens[i][-1] if tokens[i] else self.pad_id] for i in range(size)], dtype=torch.long, device=device
            )
            attention = torch.cat([attention, torch.ones((size, 1), dtype=attention.dtype, device=device)], dim=-1)
            positions = positions[:, -1:] + 1
        return [
            TokenOutput(tokens[i], logprobs[i], reasons[i], versions[i], tops[i] if wants_top[i] else None)
            for i in range(size)
        ]

    def _sample(
        self,
        logits: Any,
        temperature: float,
        top_p: float | None,
        top_k: int | None,
        mode: str,
        generators: list[Any],
        adjust: _Adjustments | None = None,
    ) -> tuple[Any, Any, Any]:
        """The sampled ids, their logprobs in ``mode`` and the table those logprobs come from.

        ``adjust`` (logit bias, penalties) changes what is drawn from; the ``"raw"`` and ``"scaled"``
        tables stay the policy's own (what a trainer recomputes), ``"processed"`` includes it."""
        import torch

        raw = torch.log_softmax(logits, dim=-1)
        drawn = logits if adjust is None else adjust.apply(logits)
        if temperature == 0:
            chosen = drawn.argmax(dim=-1)
            picked = raw.gather(-1, chosen[:, None]).squeeze(-1)
            if mode == "processed":
                certain = torch.full_like(raw, float("-inf")).scatter(-1, chosen[:, None], 0.0)
                return chosen, torch.zeros_like(picked), certain
            return chosen, picked, raw
        scaled = logits / temperature
        filtered = drawn / temperature
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
        return chosen, table.gather(-1, chosen[:, None]).squeeze(-1), table

    def _hit_stop_string(self, request: _Request, tokens: list[int]) -> bool:
        stops = request.sampling.stop
        if not stops:
            return False
        window = max(len(s) for s in stops) * 4 + 1  # a character is at most 4 byte-level tokens
        text = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(s and s in text for s in stops)


class _Adjustments:
    """Per-row logit bias and presence / frequency penalties of one batch (OpenAI's definitions:
    ``logits[j] += bias[j] - presence * (count[j] > 0) - frequency * count[j]``, counts over the
    ids this generation sampled so far). Tensors are made at the first step, as wide as the logits."""

    def __init__(self, biases: list[dict[int, float]], presence: list[float], frequency: list[float], device: Any):
        self.biases, self.presence_list, self.frequency_list, self.device = biases, presence, frequency, device
        self.bias: Any = None
        self.counts: Any = None
        self.presence: Any = None
        self.frequency: Any = None

    @classmethod
    def of(cls, batch: list[_Request], device: Any) -> _Adjustments | None:
        biases = [{int(t): float(v) for t, v in (r.sampling.extra.get(LOGIT_BIAS) or {}).items()} for r in batch]
        presence = [float(r.sampling.extra.get(PRESENCE_PENALTY) or 0.0) for r in batch]
        frequency = [float(r.sampling.extra.get(FREQUENCY_PENALTY) or 0.0) for r in batch]
        if not any(biases) and not any(presence) and not any(frequency):
            return None
        return cls(biases, presence, frequency, device)

    def _build(self, width: int) -> None:
        import torch

        if any(self.biases):
            self.bias = torch.zeros((len(self.biases), width), dtype=torch.float32)
            for i, row in enumerate(self.biases):
                for token, value in row.items():
                    self.bias[i, token] = value
            self.bias = self.bias.to(self.device)
        if any(self.presence_list) or any(self.frequency_list):
            self.presence = torch.tensor(self.presence_list, device=self.device)[:, None]
            self.frequency = torch.tensor(self.frequency_list, device=self.device)[:, None]
            self.counts = torch.zeros((len(self.biases), width), dtype=torch.float32, device=self.device)

    def apply(self, logits: Any) -> Any:
        if self.bias is None and self.counts is None:
            self._build(logits.shape[-1])
        out = logits
        if self.bias is not None:
            out = out + self.bias
        if self.counts is not None:
            out = out - self.presence * (self.counts > 0).float() - self.frequency * self.counts
        return out

    def count(self, chosen: Any, done: list[bool]) -> None:
        if self.counts is None:
            return
        import torch

        live = torch.tensor([not d for d in done], dtype=torch.float32, device=chosen.device)
        self.counts.scatter_add_(-1, chosen[:, None], live[:, None])


def _top_entries(table: Any, k: int) -> list[list[tuple[int, float]]]:
    """The ``k`` most likely ids of each row of a logprob table, as (id, logprob) pairs."""
    import torch

    if k <= 0:
        return [[] for _ in range(table.shape[0])]
    values, ids = torch.topk(table, min(k, table.shape[-1]), dim=-1)
    return [list(zip(row_ids, row_values, strict=True)) for row_ids, row_values in zip(ids.tolist(), values.tolist(), strict=True)]


_BASE = "__base__"  # peft's name for the base model in a mixed-adapter batch


def _is_peft_model(model: Any) -> bool:
    """A ``peft.PeftModel`` (it takes ``adapter_names`` per row); checked without importing peft."""
    return isinstance(getattr(model, "peft_config", None), dict) and hasattr(model, "base_model") and hasattr(
        model, "_enable_peft_forward_hooks")


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
