"""The one-GPU path, measured: the embedded default (backend ``trl``, HF engine) on CUDA with a
locally built model of a realistic size, bf16 and LoRA; prints step time, tokens/s, peak memory.

    python scripts/gpu_check.py                    # CUDA: a 0.36 B Qwen2 (Qwen2.5-0.5B's body), ~5 min
    python scripts/gpu_check.py --cpu-tiny         # the same path on the CPU with a tiny model (~1 min; a test runs it)
    python scripts/gpu_check.py --steps 30 --shape 0.36b --no-lora --out /tmp/gpu-check

What runs is ``python -m aworld_core.run --config examples/cpu_grpo_demo/job.yaml`` (the demo's job:
the calculator MCP server started as the job's environment, 8 prompts x 8 episodes per GRPO step,
TRL's ``GRPOTrainer`` with aworld-core's rollouts on the HF engine) with overrides: ``model.path``
= the model built here, ``max_steps``, ``bf16: true`` and ``aworld.lora`` (r 16, all linear
layers) on CUDA, no held-out evaluation, no checkpoint. The model: the demo's tokenizer (built
here, nothing downloaded) and a Qwen2 with random weights of the chosen shape, saved in bf16 on
CUDA; ``--warm-start-steps`` supervised steps on the demo's traces first (a few, so that episodes
call the tool and stop like a trained model's; 0: random weights, every episode one long turn).

The figures come from the run's ``metrics.jsonl`` and ``summary.json`` (steps after the first,
which includes warm-up): TRL's ``step_time``, ``aworld/rollout_s`` (sampling the 64 episodes),
sampled tokens per second (``completions/mean_length`` x episodes / rollout seconds), trained
tokens per second (``num_tokens`` growth / step time), and the trainer process's peak memory
(``cuda_peak_allocated_gib`` from ``torch.cuda.max_memory_allocated()``; ``peak_rss_gib``).

On a machine without this project's environment: ``--wheelhouse DIR`` writes the project's three
wheels and TRL's, mcp's, aiohttp's, uvicorn's, datasets', pydantic's, httpx2's and pyyaml's, without
their own dependencies (5.5 MiB for Python 3.11 here); ``pip install --no-index --find-links DIR
aworld-trl aworld-cpu-grpo-demo`` there names whatever else the host lacks. With every dependency
except what a torch + transformers + peft host has, the set is ~105 MiB, half of it pyarrow
(datasets', which TRL needs): over a 64 MiB carry limit unless the host has datasets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "examples" / "cpu_grpo_demo" / "job.yaml"

# Qwen2.5-0.5B's transformer body (its 151k-token embedding is the demo's ~320 tokens here): 0.36 B parameters
SHAPES: dict[str, dict[str, Any]] = {
    "0.36b": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
              "intermediate_size": 4864, "max_position_embeddings": 512},
    "1.2b": {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
             "intermediate_size": 8960, "max_position_embeddings": 512},
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 192, "max_position_embeddings": 256},
}


def build(path: Path, shape: str, device: str, warm_steps: int, bf16: bool) -> tuple[int, float]:
    """The model directory: the demo's tokenizer and a Qwen2 of ``shape``; returns (parameters, seconds)."""
    import torch

    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer
    from aworld_cpu_grpo_demo.warm_start import warm_start

    started = time.perf_counter()
    tokenizer = train_tokenizer(seed=0, corpus_size=600)
    model = new_model(tokenizer, seed=0, **SHAPES[shape])
    model.to(device)
    if warm_steps:
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            warm_start(model, tokenizer, steps=warm_steps, batch_size=16, lr=5e-3 if shape == "tiny" else 5e-4,
                       progress=False, tool_first_share=1.0, copy_rate=1.0)
    if bf16:
        model.to(torch.bfloat16)
    model.save_pretrained(path)
    save_tokenizer(tokenizer, path)
    params = sum(p.numel() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return params, time.perf_counter() - started


def overrides(model: Path, out: Path, steps: int, cuda: bool, lora: bool) -> list[str]:
    items = [
        f"model.path={model}", f"output_dir={out}", f"backends.trl.max_steps={steps}",
        "backends.trl.aworld.eval_before=false", "backends.trl.aworld.eval_after=false",
        "backends.trl.aworld.save_checkpoint=false", "backends.trl.aworld.plot=false",
        "backends.trl.aworld.progress=false", "backends.trl.aworld.trajectory_every=0",
        "backends.trl.aworld.targets=null", "backends.trl.aworld.print_every=1",
    ]
    if cuda:
        items.append("backends.trl.bf16=true")
    if lora:
        items.append('backends.trl.aworld.lora={"r": 16, "alpha": 32, "target_modules": "all-linear"}')
    return items


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(out: Path, episodes: int) -> dict[str, Any]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    later = rows[1:] or rows  # the first step includes warm-up (kernels, allocator, MCP session)
    steps = [r["step_time"] for r in later if isinstance(r.get("step_time"), (int, float))]
    rollouts = [r["aworld/rollout_s"] for r in later if isinstance(r.get("aworld/rollout_s"), (int, float))]
    sampled = [r["completions/mean_length"] * episodes / r["aworld/rollout_s"] for r in later
               if r.get("aworld/rollout_s") and isinstance(r.get("completions/mean_length"), (int, float))]
    tokens = [r.get("num_tokens") for r in rows]
    trained = [(b - a) / r["step_time"] for a, b, r in zip(tokens, tokens[1:], rows[1:], strict=False)
               if isinstance(a, (int, float)) and isinstance(b, (int, float)) and r.get("step_time")]
    return {
        "steps": len(rows),
        "step_time_s": _median(steps),
        "step_time_max_s": max(steps) if steps else None,
        "rollout_s": _median(rollouts),
        "sampled_tokens_per_s": _median(sampled),
        "trained_tokens_per_s": _median(trained),
        "sampled_tokens_per_episode": _median([r["completions/mean_length"] for r in later
                                               if isinstance(r.get("completions/mean_length"), (int, float))]),
        "tool_call_rate": _median([r["aworld/tool_call_rate"] for r in later
                                   if isinstance(r.get("aworld/tool_call_rate"), (int, float))]),
        **{k: summary.get(k) for k in ("cuda_device", "cuda_peak_allocated_gib", "cuda_peak_reserved_gib",
                                      "peak_rss_gib", "process_seconds")},
    }


def wheelhouse(target: Path) -> int:
    """The project's wheels and TRL's (with what they need beyond torch, transformers, peft), for a
    machine that has those three and no network."""
    target.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    local = [str(REPO / "core"), str(REPO / "plugins" / "aworld-trl"), str(REPO / "examples" / "cpu_grpo_demo")]
    done = subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(target), *local])
    if done.returncode:
        return done.returncode
    # their dependencies, except what the GPU machine has (torch, transformers, peft and theirs)
    done = subprocess.run([*pip, "download", "-q", "-d", str(target), "trl==1.16.0", "mcp", "httpx2", "aiohttp",
                           "uvicorn", "pyyaml", "pydantic", "datasets", "--no-deps"])
    size = sum(f.stat().st_size for f in target.iterdir()) / 2**20
    print(f"wheelhouse {target}: {size:.1f} MiB ({len(list(target.iterdir()))} files); on the GPU machine: "
          f"pip install --no-index --find-links {target} aworld-trl aworld-cpu-grpo-demo", flush=True)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-tiny", action="store_true",
                        help="the same path on the CPU: tiny model, 2 steps, fp32, LoRA (what the test runs)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.36b")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps (the first is left out of the figures)")
    parser.add_argument("--warm-start-steps", type=int, default=40)
    parser.add_argument("--no-lora", action="store_true", help="train every weight instead of LoRA adapters")
    parser.add_argument("--out", default=None, help="run directory (default: a new temporary one, kept)")
    parser.add_argument("--wheelhouse", default=None, metavar="DIR", help="only write the wheels to carry to a GPU host")
    opts = parser.parse_args(argv)
    if opts.wheelhouse:
        return wheelhouse(Path(opts.wheelhouse))
    if opts.cpu_tiny:
        opts.device, opts.shape, opts.steps, opts.warm_start_steps = "cpu", "tiny", 2, 20
    if opts.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out of the figures)")

    import tempfile

    import torch

    cuda = opts.device == "cuda"
    if not cuda:
        torch.set_num_threads(1)  # a tiny model on a shared CPU: more threads only wait for cores
    if cuda and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine, or "
              "--cpu-tiny for the same path on the CPU", file=sys.stderr)
        return 2
    from aworld_core.offline import OFFLINE_ENV

    out = Path(opts.out) if opts.out else Path(tempfile.mkdtemp(prefix="aworld-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    model_dir = out / "model"
    bf16 = cuda and torch.cuda.is_bf16_supported()
    if cuda:
        print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda})",
              flush=True)
    params, build_s = build(model_dir, opts.shape, opts.device, opts.warm_start_steps, bf16)
    print(f"model: Qwen2 {opts.shape}, {params / 1e6:.1f} M parameters, {'bf16' if bf16 else 'fp32'}, random weights "
          f"+ {opts.warm_start_steps} warm-start steps, built in {build_s:.0f} s", flush=True)
    run_dir = out / "run"
    command = [sys.executable, "-m", "aworld_core.run", "--config", str(JOB),
               *overrides(model_dir, run_dir, opts.steps, cuda, not opts.no_lora)]
    env = {**os.environ, **OFFLINE_ENV}
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path even on a machine with a GPU
    print("running: " + " ".join(command), flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode:
        print(f"gpu_check: the job failed (exit {done.returncode}); its output is above", file=sys.stderr)
        return done.returncode
    figures = summarize(run_dir, episodes=64)
    figures.update({"device": torch.cuda.get_device_name() if cuda else "cpu", "shape": opts.shape,
                    "parameters_m": round(params / 1e6, 1), "dtype": "bf16" if bf16 else "fp32",
                    "lora": not opts.no_lora, "job_wall_s": round(wall, 1), "build_s": round(build_s, 1)})
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=2))

    def fmt(value: Any, spec: str = ".2f") -> str:
        return "n/a" if value is None else format(value, spec)

    print(f"\ngpu_check on {figures['device']}: Qwen2 {opts.shape} ({figures['parameters_m']} M), {figures['dtype']}, "
          f"{'LoRA r16' if figures['lora'] else 'full'}; {figures['steps']} GRPO steps of 64 episodes (8 x 8)")
    print(f"  step time (median, steps 2..):  {fmt(figures['step_time_s'])} s (max {fmt(figures['step_time_max_s'])})")
    print(f"  rollout (64 episodes):          {fmt(figures['rollout_s'])} s; "
          f"{fmt(figures['sampled_tokens_per_episode'], '.1f')} sampled tokens per episode; "
          f"tool-call rate {fmt(figures['tool_call_rate'])}")
    print(f"  sampled tokens/s:               {fmt(figures['sampled_tokens_per_s'], '.0f')}")
    print(f"  trained tokens/s (prompt+completion per step time): {fmt(figures['trained_tokens_per_s'], '.0f')}")
    if cuda:
        print(f"  peak GPU memory:                {fmt(figures['cuda_peak_allocated_gib'])} GiB allocated, "
              f"{fmt(figures['cuda_peak_reserved_gib'])} GiB reserved")
    print(f"  peak process memory (RSS):      {fmt(figures['peak_rss_gib'])} GiB")
    print(f"  job wall time:                  {wall:.0f} s (model build {build_s:.0f} s before it)")
    print(f"  figures: {out / 'gpu_check.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
