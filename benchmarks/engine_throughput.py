"""Token engine throughput: the HF engine vs vLLM (CPU build), same model, same requests.

The demo's model shape and tokenizer (random weights), prompts of the demo's length, N
concurrent requests (one per episode: 1, 16, 64), each sampling ``--tokens`` new tokens at
temperature 1 with no stop id, so both engines do the same work. Prints tokens/s and the
per-request latency (median, p90) per engine and concurrency; the first round of each engine is
a warm-up and not counted. Never a test. Run in .venvs/vllm (the HF engine runs there too):

    .venvs/vllm/bin/python benchmarks/engine_throughput.py [--rounds 3] [--tokens 48] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONCURRENCY = (1, 16, 64)


def build_model_dir(path: Path) -> Path:
    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(seed=0, corpus_size=600)
    new_model(tokenizer, seed=0).save_pretrained(path)
    save_tokenizer(tokenizer, path)
    return path


def prompts(model_dir: Path, n: int) -> list[list[int]]:
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_cpu_grpo_demo.tasks import load_arith

    tok = load_tokenizer(model_dir)
    return [tok.apply_chat_template(s.prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
            for s in load_arith(n=n, seed=0)]


async def measure(engine: Any, batch: list[list[int]], tokens: int, tag: str) -> tuple[float, list[float], int]:
    from aworld_core.schemas import SamplingParams

    sampling = SamplingParams(temperature=1.0, max_tokens=tokens)
    latencies: list[float] = []

    async def one(i: int, ids: list[int]) -> int:
        started = time.perf_counter()
        out = await engine.generate(ids, sampling, request_id=f"{tag}-{i}")
        latencies.append(time.perf_counter() - started)
        return len(out.token_ids)

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(batch)))
    return time.perf_counter() - started, latencies, sum(counts)


async def run_engine(engine: Any, all_prompts: list[list[int]], rounds: int, tokens: int, name: str) -> dict:
    results = {}
    await measure(engine, all_prompts[:64], tokens, f"{name}-warm")
    for n in CONCURRENCY:
        wall, latencies, produced = 0.0, [], 0
        for r in range(rounds):
            w, lat, count = await measure(engine, all_prompts[r * n:(r + 1) * n] or all_prompts[:n], tokens,
                                          f"{name}-{n}-{r}")
            wall, produced = wall + w, produced + count
            latencies += lat
        latencies.sort()
        results[n] = (produced / wall, statistics.median(latencies), latencies[int(0.9 * (len(latencies) - 1))])
    return results


def main(argv: list[str] | None = None) -> int:
    from aworld_core.offline import apply_offline_env

    apply_offline_env()  # telemetry and hub lookups off here and in every process this starts
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the HF engine")
    opts = parser.parse_args(argv)

    import torch

    from aworld_core.tokens.hf_engine import HFTokenEngine
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.tokens.vllm_engine import VLLMTokenEngine

    torch.set_num_threads(opts.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model_dir(Path(tmp) / "model")
        all_prompts = prompts(model_dir, 64 * opts.rounds)
        tok = load_tokenizer(model_dir)
        hf = HFTokenEngine.from_pretrained(model_dir, tokenizer=tok, max_batch_size=64, batch_window_s=0.005,
                                           stop_token_ids=[])
        hf.stop_token_ids = set()  # no stop: both engines sample the full budget
        hf_results = asyncio.run(run_engine(hf, all_prompts, opts.rounds, opts.tokens, "hf"))

        async def vllm_side() -> tuple[dict, float]:
            engine = VLLMTokenEngine(model_dir, dtype="float32", max_model_len=256, gpu_memory_utilization=0.05,
                                     enforce_eager=True)
            engine.stop_token_ids = set()
            started = time.perf_counter()
            await engine.start()
            start_s = time.perf_counter() - started
            try:
                return await run_engine(engine, all_prompts, opts.rounds, opts.tokens, "vllm"), start_s
            finally:
                await engine.aclose()

        vllm_results, start_s = asyncio.run(vllm_side())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"token engines, {opts.tokens} new tokens per request, HF torch threads {opts.threads}, "
          f"load average {load:.1f} on {os.cpu_count()} CPUs (vLLM start-up {start_s:.1f} s, not counted):")
    print(f"  {'concurrent':>10}  {'HF tok/s':>9}  {'vLLM tok/s':>10}  {'speed-up':>8}  "
          f"{'HF p50/p90 s':>13}  {'vLLM p50/p90 s':>15}")
    for n in CONCURRENCY:
        h, v = hf_results[n], vllm_results[n]
        print(f"  {n:>10}  {h[0]:>9.0f}  {v[0]:>10.0f}  {v[0] / h[0]:>7.1f}x  {h[1]:>6.3f}/{h[2]:<6.3f}  "
              f"{v[1]:>7.3f}/{v[2]:<7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
