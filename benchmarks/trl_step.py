"""GRPO step time on TRL: our ``rollout_func`` (episodes through the core) vs TRL's own generation.

Same single-turn task (the demo's "What is A * B?" without tools), same tiny model (the demo's
tokenizer, random weights, so both sides always generate the full ``max_completion_length``),
same sampling, same batch, in one process, alternating A/B rounds so machine load hits both.
Prints per-step medians and the ratio (target: aworld / trl <= 1.15). With ``--vllm`` (in
.venvs/vllm) also our rollouts sampled by vLLM, weights synced every step (target: <= 0.6 x the
HF-engine step). Never a test.

    .venv/bin/python benchmarks/trl_step.py [--steps 6] [--rounds 2] [--batch 64] [--generations 8]
    .venvs/vllm/bin/python benchmarks/trl_step.py --vllm
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def build_model_dir(path: Path) -> Path:
    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(seed=0, corpus_size=600)
    model = new_model(tokenizer, seed=0)
    model.save_pretrained(path)
    save_tokenizer(tokenizer, path)
    return path


def step_timer() -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.times.append(time.perf_counter() - self._start)

    return StepTimer()


def quiet(trainer: Any) -> Any:
    """No per-step log dicts or bars from transformers: the figures are printed at the end."""
    from transformers import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def grpo_args(out: Path, steps: int, batch: int, generations: int, length: int) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch, num_generations=generations,
        max_completion_length=length, learning_rate=1e-5, beta=0.0, temperature=1.0, top_k=0, top_p=1.0,
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False, disable_tqdm=True,
    )


def exact_reward(completions: list[Any], ground_truth: list[str], **kwargs: Any) -> list[float]:
    from aworld_cpu_grpo_demo.reward import exact_answer

    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [exact_answer("arith", t, g, {}) for t, g in zip(texts, ground_truth, strict=True)]


def run_trl(model_dir: Path, rows: list[dict[str, Any]], args: Any) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    from aworld_core.tokens.llm import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    timer = step_timer()
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(str(model_dir)), reward_funcs=[exact_reward],
                          args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          callbacks=[timer])
    quiet(trainer).train()
    return timer.times


def run_aworld(model_dir: Path, samples: list[Any], args: Any, concurrency: int, engine_kind: str = "hf") -> list[float]:
    from transformers import AutoModelForCausalLM

    from aworld_core.agents.agent import Agent
    from aworld_core.runtime.loop_thread import LoopThread
    from aworld_core.tokens.hf_engine import HFTokenEngine
    from aworld_core.tokens.llm import TokenLLM, load_tokenizer
    from aworld_core.worker import EpisodeRunner
    from aworld_trl.grpo import trainer_class
    from aworld_trl.rollout import AworldRollout, make_reward_func, trl_sampling

    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    if engine_kind == "vllm":  # what backends.trl.use_vllm builds: weights synced into it every step
        from aworld_core.tokens.vllm_engine import VLLMTokenEngine

        engine = VLLMTokenEngine(model_dir, dtype="float32", max_model_len=256, gpu_memory_utilization=0.05,
                                 enforce_eager=True, max_new_tokens=args.max_completion_length)
    else:
        engine = HFTokenEngine(model, tokenizer, max_new_tokens=args.max_completion_length,
                               max_batch_size=concurrency)
    llm = TokenLLM(engine, tokenizer, max_response_tokens=args.max_completion_length)
    runner = EpisodeRunner(Agent(name="bench", conf={"max_steps": 1}), llm,
                           reward="aworld_cpu_grpo_demo.reward:exact_answer", concurrency=concurrency)
    timer = step_timer()
    with LoopThread() as loop:
        if engine_kind == "vllm":
            loop.run(engine.start())
        rollout = AworldRollout(runner, samples, loop=loop, engine=engine, placeholder_id=tokenizer.eos_token_id,
                                sampling=trl_sampling(args), trajectory_every=0)
        from datasets import Dataset

        trainer = trainer_class()(model=model, reward_funcs=[make_reward_func("exact_answer")], args=args,
                                  train_dataset=Dataset.from_list(rollout.dataset_rows()),
                                  processing_class=tokenizer, rollout_func=rollout, callbacks=[timer])
        try:
            quiet(trainer).train()
        finally:
            if engine_kind == "vllm":
                loop.run(engine.aclose())
    return timer.times


def main(argv: list[str] | None = None) -> int:
    from aworld_core.offline import apply_offline_env

    apply_offline_env()  # telemetry and hub lookups off here and in every process this starts
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per round (the first is dropped)")
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds")
    parser.add_argument("--batch", type=int, default=64, help="completions per step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--length", type=int, default=48, help="max_completion_length")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--vllm", action="store_true",
                        help="also aworld rollouts on vLLM (needs .venvs/vllm); target: <= 0.6 x the HF-engine step")
    opts = parser.parse_args(argv)

    import torch

    from aworld_cpu_grpo_demo.tasks import load_arith

    torch.set_num_threads(opts.threads)
    samples = load_arith(n=opts.steps * opts.batch, seed=0)
    rows = [{"prompt": s.prompt, "ground_truth": s.ground_truth} for s in samples]
    trl_times: list[float] = []
    aworld_times: list[float] = []
    vllm_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model_dir(Path(tmp) / "model")
        args = grpo_args(Path(tmp) / "out", opts.steps, opts.batch, opts.generations, opts.length)
        for round_no in range(opts.rounds):
            trl_times += run_trl(model_dir, rows, args)[1:]
            aworld_times += run_aworld(model_dir, samples, args, concurrency=opts.batch)[1:]
            if opts.vllm:
                vllm_times += run_aworld(model_dir, samples, args, concurrency=opts.batch, engine_kind="vllm")[1:]
            print(f"round {round_no + 1}: trl {statistics.median(trl_times):.3f}s/step, "
                  f"aworld {statistics.median(aworld_times):.3f}s/step"
                  + (f", aworld+vLLM {statistics.median(vllm_times):.3f}s/step" if vllm_times else ""), flush=True)
    trl_med, aw_med = statistics.median(trl_times), statistics.median(aworld_times)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"GRPO step, {opts.batch} completions of {opts.length} tokens, {opts.threads} torch thread(s), "
          f"load average {load:.1f} on {os.cpu_count()} CPUs:")
    print(f"  TRL's own generation : median {trl_med:.3f} s/step over {len(trl_times)} steps")
    print(f"  aworld rollout_func  : median {aw_med:.3f} s/step over {len(aworld_times)} steps")
    print(f"  ratio aworld / trl   : {aw_med / trl_med:.2f}  (target <= 1.15)")
    if vllm_times:
        vl_med = statistics.median(vllm_times)
        print(f"  aworld, vLLM rollouts: median {vl_med:.3f} s/step over {len(vllm_times)} steps "
              f"(weights synced into vLLM every step)")
        print(f"  ratio vLLM / HF engine: {vl_med / aw_med:.2f}  (target <= 0.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
