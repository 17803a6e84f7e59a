"""Wall time to held-out accuracy 0.8: aworld-trl vs TRL 1.16's own tool calling, on the demo's task.

What a TRL user would pick instead of aworld-trl is ``GRPOTrainer(tools=[calc])``: TRL generates
with ``model.generate``, parses tool calls with the tokenizer's response template, calls the
Python function and generates again. Both sides here start from the same warm-started demo model
(``runs/cpu-grpo-demo/model``, copied; built when absent), train on the same problems with the
same reward (exact product), the same calculator logic (``aworld_cpu_grpo_demo.calculator.calculate``;
over MCP on our side, a Python callable on TRL's), and the same budget (steps, prompts x
generations, lr and schedule, sampling, ``max_completion_length`` covering sampled and tool
tokens, two tool rounds then an answer). One process, one side after the other (``--first``).

Every ``--eval-every`` steps both are measured by one function: the live policy's weights,
greedy, the full tool loop (the demo's agent over the real MCP calculator), on the same held-out
problems. Training wall time excludes those evaluations. Prints a table; never a test.

TRL cannot parse the demo's tool calls on its own: ``add_response_schema`` knows only the chat
templates of named model families and raises "Unrecognized chat template, failed to add response
schema" for the demo's. As TRL's error says, the tokenizer gets a response template by hand: TRL's
own Qwen3 one (``<tool_call>{json}</tool_call>`` then content up to ``<|im_end|>``), which
matches what the demo's template renders. Nothing else about TRL is changed.

    .venv/bin/python benchmarks/trl_native_vs_aworld.py [--steps 100] [--eval-every 10] [--eval-n 100] [--first trl]
    .venv/bin/python benchmarks/trl_native_vs_aworld.py --quick      # smoke test, tiny model, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / "runs" / "cpu-grpo-demo" / "model"
TARGET = 0.8


def calc(expr: str) -> str:
    """Evaluate an arithmetic expression of two whole numbers, such as 1234*5678.

    Args:
        expr: two whole numbers joined by one of * + -
    """
    from aworld_cpu_grpo_demo.calculator import calculate

    return calculate(expr)  # a ValueError becomes TRL's {"error": ...} tool result, as MCP's tool error


def exact_reward(completions: list[Any], ground_truth: list[str], **kwargs: Any) -> list[float]:
    """The demo's ``exact_answer`` on the last assistant message (the answer turn)."""
    from aworld_cpu_grpo_demo.reward import exact_answer

    def answer_text(completion: Any) -> str:
        if isinstance(completion, str):
            return completion
        turns = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
        return turns[-1] if turns else ""

    return [exact_answer("arith", answer_text(c), g, {}) for c, g in zip(completions, ground_truth, strict=True)]


class Calculator:
    """The demo's MCP calculator as a process on 127.0.0.1 (what the job's environment starts)."""

    def __enter__(self) -> Calculator:
        self.proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator"],
                                     stdout=subprocess.PIPE, text=True)
        info = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
        self.url, self.token = f"http://127.0.0.1:{info['port']}/mcp", info["token"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def mcp_config(self) -> dict[str, Any]:
        from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers

        config, _ = get_agent_tool_env_and_servers(self.url, self.token, name="calculator")
        return config


def demo_job(model_dir: Path, out: Path, mcp_config: dict[str, Any], opts: argparse.Namespace) -> dict[str, Any]:
    """The demo's job.yaml with this run's budget; the TRL-native side reads its GRPO settings too."""
    return {
        "name": "trl-native-bench", "backend": "trl", "output_dir": str(out),
        "model": {"path": str(model_dir), "tool_parser": "hermes"},
        "agent": {"name": "calculator-agent", "max_steps": 3, "mcp_config": mcp_config},
        "train_dataset": {"name": "arith", "options": {"n": opts.steps * opts.prompts, "seed": 0}},
        "reward": {"name": "exact_answer"},
        "rollout": {"concurrency": opts.prompts * opts.generations, "episode_timeout_s": 120},
        "backends": {"trl": {
            "max_steps": opts.steps, "per_device_train_batch_size": opts.prompts * opts.generations,
            "num_generations": opts.generations, "learning_rate": opts.lr, "lr_scheduler_type": "linear",
            "beta": 0.0, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_completion_length": opts.length,
            "aworld": {"progress": False, "print_every": 0, "torch_threads": opts.threads,
                       "rollout_torch_threads": 1, "engine_batch_window_s": 0.05},
        }},
    }


class Evaluator:
    """Held-out accuracy of a model object: greedy, the demo agent's full tool loop over MCP."""

    def __init__(self, job: Any, tokenizer: Any, samples: list[Any], loop: Any, length: int):
        self.job, self.tokenizer, self.samples, self.loop, self.length = job, tokenizer, samples, loop, length

    def __call__(self, model: Any, tag: str) -> float:
        from aworld_core.rewards.registry import RewardStats
        from aworld_core.tokens.hf_engine import HFTokenEngine
        from aworld_core.worker import EpisodeRunner, build_token_llm
        from aworld_trl.evaluation import evaluate_greedy

        engine = HFTokenEngine(model, self.tokenizer, max_new_tokens=self.length, batch_window_s=0.05,
                               max_batch_size=len(self.samples))
        llm = build_token_llm(engine, self.tokenizer, self.job, max_response_tokens=self.length)
        runner = EpisodeRunner.from_job(self.job, llm, stats=RewardStats(), concurrency=len(self.samples))
        return evaluate_greedy(runner, self.loop, self.samples, tag=tag, model=model).accuracy


def eval_callback(evaluate: Any, every: int, name: str) -> Any:
    """Evaluates every ``every`` steps (and at the end); keeps (step, training seconds, accuracy)."""
    from transformers import TrainerCallback

    class PeriodicEval(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.points: list[tuple[int, float, float]] = []
            self.eval_s = 0.0
            self.logs: list[dict[str, float]] = []

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            keys = ("reward", "tools/call_frequency", "aworld/tool_call_rate")
            if logs and "reward" in logs:
                self.logs.append({k: float(logs[k]) for k in keys if isinstance(logs.get(k), (int, float))})

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            accuracy = evaluate(model, f"{name}-0")
            self.points.append((0, 0.0, accuracy))
            print(f"  {name:7s} step    0: held-out accuracy {accuracy:.2f}", flush=True)
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            step = state.global_step
            if step % every and step != state.max_steps:
                return
            began = time.perf_counter()
            train_s = began - self.started - self.eval_s
            accuracy = evaluate(model, f"{name}-{step}")
            self.eval_s += time.perf_counter() - began
            self.points.append((step, train_s, accuracy))
            print(f"  {name:7s} step {step:4d}: {train_s:6.1f}s training, held-out accuracy {accuracy:.2f}", flush=True)

    return PeriodicEval()


def quiet(trainer: Any) -> Any:
    from transformers import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def run_aworld(job: Any, model_dir: Path, evaluate: Any, every: int, loop: Any) -> Any:
    """The demo's training path (``aworld_trl.trainer.TrlRun``'s parts) with the periodic evaluation."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from aworld_core.datasets import load_dataset_section
    from aworld_core.tokens.hf_engine import HFTokenEngine
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.worker import EpisodeRunner, FailedSteps, build_agent, build_token_llm
    from aworld_trl.grpo import trainer_class
    from aworld_trl.options import grpo_config
    from aworld_trl.rollout import AworldRollout, make_reward_func, trl_sampling

    args, options = grpo_config(job, Path(job.output_dir) / "aworld")
    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    concurrency = job.rollout.concurrency
    engine = HFTokenEngine(model, tokenizer, max_new_tokens=args.max_completion_length,
                           batch_window_s=options.engine_batch_window_s, max_batch_size=concurrency)
    llm = build_token_llm(engine, tokenizer, job, max_response_tokens=args.max_completion_length)
    runner = EpisodeRunner.from_job(job, llm, agent=build_agent(job))
    samples = load_dataset_section(job.train_dataset, job.base_dir)
    rollout = AworldRollout(runner, samples, loop=loop, engine=engine, placeholder_id=tokenizer.eos_token_id,
                            sampling=trl_sampling(args), trajectory_every=0,
                            failed_steps=FailedSteps(job.rollout.max_failed_steps, setting="rollout.max_failed_steps"),
                            torch_threads=options.rollout_torch_threads)
    callback = eval_callback(evaluate, every, "aworld")
    trainer = trainer_class()(model=model, reward_funcs=[make_reward_func("exact_answer")], args=args,
                              train_dataset=Dataset.from_list(rollout.dataset_rows()), processing_class=tokenizer,
                              rollout_func=rollout, callbacks=[callback])
    quiet(trainer).train()
    return callback


def trl_tokenizer(model_dir: Path) -> Any:
    """The demo tokenizer as TRL needs it: TRL's Qwen3 response template set by hand (see the top)."""
    from trl.chat_template_utils import add_response_schema, qwen3_template

    from aworld_core.tokens.llm import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    try:
        add_response_schema(tokenizer)
    except ValueError as exc:
        print(f"  TRL-native: add_response_schema refused the demo template ({str(exc).split('.')[0]}); "
              "using TRL's Qwen3 response template, which matches it", flush=True)
        tokenizer.response_template = qwen3_template
    return tokenizer


def run_trl_native(job: Any, model_dir: Path, evaluate: Any, every: int, opts: argparse.Namespace) -> Any:
    """``GRPOTrainer(tools=[calc])`` with the same GRPO settings as the aworld side."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from aworld_core.datasets import load_dataset_section
    from aworld_trl.options import grpo_config

    ours, _ = grpo_config(job, Path(job.output_dir) / "trl-native")
    fields = {f: getattr(ours, f) for f in (
        "output_dir", "max_steps", "per_device_train_batch_size", "num_generations", "learning_rate",
        "lr_scheduler_type", "beta", "temperature", "top_p", "top_k", "max_completion_length", "seed",
        "logging_steps", "save_strategy", "report_to", "use_cpu", "bf16")}
    # the agent's max_steps 3 = at most two tool rounds, then the answer turn
    args = GRPOConfig(**fields, max_tool_calling_iterations=2, disable_tqdm=True)
    samples = load_dataset_section(job.train_dataset, job.base_dir)
    rows = [{"prompt": s.prompt, "ground_truth": s.ground_truth} for s in samples]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    callback = eval_callback(evaluate, every, "trl")
    trainer = GRPOTrainer(model=model, reward_funcs=[exact_reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=trl_tokenizer(model_dir), tools=[calc], callbacks=[callback])
    quiet(trainer).train()
    return callback


def model_for(opts: argparse.Namespace, tmp: Path) -> Path:
    """A private copy of the demo's warm-started model (built like ``make demo`` when absent);
    ``--quick``: a tiny one warm-started for a few seconds."""
    from aworld_cpu_grpo_demo.build import build_model

    target = tmp / "model"
    if opts.quick:
        return build_model(str(target), warm_start_steps=30, batch_size=16, progress=False, threads=1)
    source = Path(opts.model) if opts.model else DEMO_MODEL
    if not (source / "config.json").exists():
        build_model(str(source), threads=opts.threads)
    shutil.copytree(source, target)
    return target


def reached(points: list[tuple[int, float, float]]) -> tuple[int, float] | None:
    return next(((step, secs) for step, secs, acc in points if acc >= TARGET), None)


def _span(logs: list[dict[str, float]], *keys: str, window: int = 10) -> str:
    """'first -> last' mean over ``window`` logged steps of the first of ``keys`` present."""
    values = [next((row[k] for k in keys if k in row), None) for row in logs]
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    first, last = values[:window], values[-window:]
    return f"{sum(first) / len(first):.2f}->{sum(last) / len(last):.2f}"


def table(results: dict[str, Any], opts: argparse.Namespace, loads: dict[str, tuple[float, float]]) -> None:
    print(f"\n{opts.steps} GRPO steps x {opts.prompts} prompts x {opts.generations} generations, lr {opts.lr:g}, "
          f"max {opts.length} tokens, {opts.threads} torch thread(s); held-out: {opts.eval_n} problems, greedy, "
          f"every {opts.eval_every} steps; {os.cpu_count()} CPUs")
    print(f"{'side':10s} {'acc@0':>6s} {'final':>6s} {'best':>6s} {'to 0.8 (step, s)':>18s} "
          f"{'train s':>8s} {'s/step':>7s} {'reward':>11s} {'tool calls':>11s} {'load avg':>10s}")
    for name in ("aworld", "trl"):
        cb = results[name]
        pts = cb.points
        hit = reached(pts[1:])
        total = pts[-1][1]
        steps = pts[-1][0] or 1
        hit_text = f"{hit[0]}, {hit[1]:.0f}" if hit else "not reached"
        print(f"{name:10s} {pts[0][2]:6.2f} {pts[-1][2]:6.2f} {max(p[2] for p in pts):6.2f} {hit_text:>18s} "
              f"{total:8.0f} {total / steps:7.2f} {_span(cb.logs, 'reward'):>11s} "
              f"{_span(cb.logs, 'tools/call_frequency', 'aworld/tool_call_rate'):>11s} "
              f"{loads[name][0]:4.1f}->{loads[name][1]:.1f}")
    ours, theirs = (reached(results[k].points[1:]) for k in ("aworld", "trl"))
    if ours and theirs:
        print(f"time to {TARGET}: aworld / TRL-native = {ours[1] / theirs[1]:.2f} (target <= 0.5)")
    else:
        print(f"time to {TARGET}: ratio undefined ({'aworld' if not ours else 'TRL-native'} did not reach it)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="GRPO steps per side (the demo's 100)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--length", type=int, default=64, help="max_completion_length (sampled + tool tokens)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-n", type=int, default=100, help="held-out problems (the demo's test split)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--model", default=None, help=f"warm-started model directory (default {DEMO_MODEL})")
    parser.add_argument("--first", choices=("aworld", "trl"), default="aworld",
                        help="which side trains first (the machine's load drifts: run both orders)")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, 2 steps, 4 problems")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.steps, opts.prompts, opts.generations, opts.length = 2, 2, 2, 48
        opts.eval_every, opts.eval_n = 1, 4

    import warnings

    import torch

    from aworld_core.runtime.loop_thread import LoopThread
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.worker import load_job
    from aworld_cpu_grpo_demo.tasks import load_arith

    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
    torch.set_num_threads(opts.threads)
    held_out = load_arith(n=opts.eval_n, seed=0, split="test")
    results: dict[str, Any] = {}
    loads: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, Calculator() as calculator, LoopThread("bench") as loop:
        model_dir = model_for(opts, Path(tmp))
        job = load_job(demo_job(model_dir, Path(tmp) / "out", calculator.mcp_config(), opts))
        evaluate = Evaluator(job, load_tokenizer(model_dir), held_out, loop, opts.length)
        runs = {"aworld": lambda: run_aworld(job, model_dir, evaluate, opts.eval_every, loop),
                "trl": lambda: run_trl_native(job, model_dir, evaluate, opts.eval_every, opts)}
        order = ["aworld", "trl"] if opts.first == "aworld" else ["trl", "aworld"]
        for name, run in ((name, runs[name]) for name in order):
            print(f"{name}: training (load average {os.getloadavg()[0]:.1f})", flush=True)
            first = os.getloadavg()[0]
            results[name] = run()
            loads[name] = (first, os.getloadavg()[0])
    table(results, opts, loads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
