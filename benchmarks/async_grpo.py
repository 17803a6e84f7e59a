"""Asynchronous vs synchronous GRPO in aworld-trl on the demo's task, with tools that take time.

Both sides train the same warm-started demo model (``runs/cpu-grpo-demo/model``, copied; built
when absent) on the same problems, reward and budget as ``trl_native_vs_aworld.py`` (whose parts
this script reuses), over the demo's real MCP calculator whose every call takes ``--latency``
(``300`` ms fixed by default; ``gaia300``: log-normal, median 300 ms). The synchronous side is
today's ``AworldRollout`` (a step's episodes, then its update); the asynchronous side is
``backends.trl.aworld.async_rollout`` (``aworld_trl.async_grpo``): the next ``max_staleness``
steps' episodes run while a step trains, on a private copy of the weights updated after every
step, stale tokens weighted by the truncated behaviour importance weight.

Reported side by side, one process, one run after the other: wall time (training seconds, the
weights snapshotted every ``--eval-every`` steps and evaluated after training, so evaluation never
overlaps training) to held-out accuracy 0.8, the held-out accuracy at every evaluated step (equal
samples: both sides train 64 episodes per step), seconds per step, the seconds each step waited
for its episodes, and the asynchronous runs' staleness histogram (share of trained tokens sampled
by weights 0, 1, .. updates old). Prints tables; never a test.

    .venv/bin/python benchmarks/async_grpo.py [--latency 300] [--staleness 1] [--steps 100] [--first async]
    .venv/bin/python benchmarks/async_grpo.py --quick      # smoke test, tiny model, seconds
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trl_native_vs_aworld as base  # the shared parts: model, calculator, job, evaluator

TARGET = base.TARGET


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def main(argv: list[str] | None = None) -> int:
    from aworld_core.offline import apply_offline_env

    apply_offline_env()  # telemetry and hub lookups off here and in every process this starts
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", default="300", help="tool latency: N (fixed ms) or gaiaN (log-normal, median N)")
    parser.add_argument("--staleness", default="1", help="max_staleness of the async runs, comma-separated")
    parser.add_argument("--weight-cap", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-n", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--max-side-s", type=float, default=None, help="cap on one run's training seconds")
    parser.add_argument("--model", default=None, help=f"warm-started model directory (default {base.DEMO_MODEL})")
    parser.add_argument("--first", choices=("sync", "async"), default="sync")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, 3 steps, 4 problems")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.steps, opts.prompts, opts.generations, opts.length = 3, 2, 2, 48
        opts.eval_every, opts.eval_n = 1, 4
        if opts.latency == parser.get_default("latency"):
            opts.latency = "20"
    ms, kind = base.parse_latency(opts.latency)
    try:
        staleness = [int(x) for x in opts.staleness.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--staleness: {opts.staleness!r} is not a comma-separated list of integers")
    if not staleness or min(staleness) < 0:
        parser.error("--staleness needs integers >= 0")

    import warnings

    import torch

    from aworld_core.runtime.loop_thread import LoopThread
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.worker import load_job
    from aworld_cpu_grpo_demo.tasks import load_arith

    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
    torch.set_num_threads(opts.threads)
    held_out = load_arith(n=opts.eval_n, seed=0, split="test")
    sides = ["sync", *(f"async-s{s}" for s in staleness)]
    if opts.first == "async":
        sides = sides[1:] + sides[:1]
    runs: dict[str, Any] = {}
    per_step = opts.prompts * opts.generations
    label = base.latency_label(ms, kind)
    with tempfile.TemporaryDirectory() as tmp, LoopThread("bench") as loop, base.Calculator(ms, kind) as calculator:
        model_dir = base.model_for(opts, Path(tmp))
        job = load_job(base.demo_job(model_dir, Path(tmp) / "out", calculator.mcp_config(), opts))
        evaluate = base.Evaluator(job, load_tokenizer(model_dir), held_out, loop, opts.length)
        for side in sides:
            settings = None if side == "sync" else {"max_staleness": int(side[len("async-s"):]),
                                                    "weight_cap": opts.weight_cap}
            first = os.getloadavg()[0]
            print(f"{label}, {side}: training (load average {first:.1f})", flush=True)
            callback = base.run_aworld(job, model_dir, opts.eval_every, loop, name=side, max_s=opts.max_side_s,
                                       async_rollout=settings)
            load = (first, os.getloadavg()[0])
            base.evaluate_points(callback, evaluate, model_dir, side)
            run = base.Run(side, callback, load, per_step)
            run.staleness = dict(getattr(callback.rollout, "staleness", {}) or {})
            run.wait = _mean([row["aworld/rollout_s"] for row in callback.logs if "aworld/rollout_s" in row])
            runs[side] = run
    report(runs, opts, label)
    return 0


def report(runs: dict[str, Any], opts: argparse.Namespace, label: str) -> None:
    print(f"\n{opts.steps} GRPO steps x {opts.prompts} prompts x {opts.generations} generations, lr {opts.lr:g}, "
          f"max {opts.length} tokens, {opts.threads} torch thread(s); tool latency {label}; held-out: {opts.eval_n} "
          f"problems, greedy, every {opts.eval_every} steps; {os.cpu_count()} CPUs")
    print(f"{'side':10s} {'acc@0':>5s} {'final':>5s} {'best':>5s} {'to 0.8':>18s} {'steps':>5s} {'train s':>7s} "
          f"{'s/step':>6s} {'cpu/step':>8s} {'waited/step':>11s} {'ep/s':>5s} {'reward':>10s} {'load avg':>9s}")
    for side, run in runs.items():
        wait = "n/a" if run.wait is None else f"{run.wait:.2f} s"
        print(f"{side:10s} {run.acc0:5.2f} {run.final:5.2f} {run.best:5.2f} {run.to_target():>18s} {run.steps:5d} "
              f"{run.train_s:7.0f} {run.s_per_step:6.2f} {run.cpu_per_step:8.2f} {wait:>11s} {run.eps:5.1f} "
              f"{base._span(run.cb.logs, 'reward'):>10s} {run.load[0]:4.1f}-{run.load[1]:.1f}")
    print("\nheld-out accuracy at equal samples (step: " + ", ".join(runs) + "):")
    steps = sorted({p[0] for run in runs.values() for p in run.cb.points})
    for step in steps:
        cells = []
        for run in runs.values():
            point = next((p for p in run.cb.points if p[0] == step), None)
            cells.append("   -" if point is None else f"{point[2]:.2f}")
        print(f"  step {step:4d}: " + "  ".join(cells))
    for side, run in runs.items():
        if run.staleness:
            total = sum(run.staleness.values())
            shares = ", ".join(f"{k}: {v / total:.2f}" for k, v in sorted(run.staleness.items()))
            print(f"staleness of trained tokens, {side} (updates behind: share): {shares}")
    sync = runs.get("sync")
    for side, run in runs.items():
        if side == "sync" or sync is None:
            continue
        mine, theirs = run.target_s(), sync.target_s()
        ratio = f"{mine / theirs:.2f}" if mine and theirs else "undefined (a side did not reach it)"
        print(f"{side} / sync: time to {TARGET} = {ratio}; s/step = {run.s_per_step / sync.s_per_step:.2f}; "
              f"final accuracy {run.final:.2f} vs {sync.final:.2f} (target: <= 0.6 at +-0.03)")


if __name__ == "__main__":
    sys.exit(main())
