"""Wall time to held-out accuracy 0.8: aworld-trl vs TRL 1.16's own tool calling, with tools that take time.

What a TRL user would pick instead of aworld-trl is ``GRPOTrainer(tools=[calc])``: TRL generates
with ``model.generate``, parses tool calls with the tokenizer's response template, calls the
Python function and generates again. Both sides here start from the same warm-started demo model
(``runs/cpu-grpo-demo/model``, copied; built when absent), train on the same problems with the
same reward (exact product), the same calculator logic (``aworld_cpu_grpo_demo.calculator.calculate``;
over MCP on our side, a Python callable on TRL's), and the same budget (steps, prompts x
generations, lr and schedule, sampling, ``max_completion_length`` covering sampled and tool
tokens, two tool rounds then an answer). One process, one run after the other.

**Tool latency** (``--latencies 0,50,300,1000,gaia300``): every tool call takes that long on both
sides, drawn from the same distribution (``aworld_cpu_grpo_demo.calculator.ToolLatency``: ``N``
fixed milliseconds, ``gaiaN`` log-normal with median N ms and a long tail, the shape of GAIA's
search / page / sandbox calls). On our side the MCP tool sleeps (``asyncio.sleep`` in the server);
TRL gets a sync tool that sleeps (``time.sleep``, side ``trl``) and an async one (``await
asyncio.sleep``, side ``trl-async``, TRL's ``async def`` tool support). TRL 1.16's
``_tool_call_loop`` calls a sync tool in a Python loop over the batch's completions, and gathers
async tools only within one completion before blocking on the result, so both run the batch's
calls one completion after another; our episodes run concurrently over MCP. Side ``aworld-async``
is ours with asynchronous GRPO (``aworld.async_rollout``, staleness ``--async-staleness``): the next
step's episodes, tool waits included, run while a step trains.

Every ``--eval-every`` steps the live policy's weights are copied (milliseconds, excluded from
training time); after training every copy is measured by one function: greedy, the full tool
loop (the demo's agent over the real MCP calculator), the same held-out problems. So training is
never interrupted and both sides are measured alike. ``--max-side-s`` caps one run's training
wall time (slow tools make TRL-native's steps long): a capped run reports its seconds per step
and, when it did not reach 0.8, a *projected* time = its s/step x the step at which the same
side reached 0.8 without latency (marked ``proj.``). Prints tables; never a test.

TRL cannot parse the demo's tool calls on its own: ``add_response_schema`` knows only the chat
templates of named model families and raises "Unrecognized chat template, failed to add response
schema" for the demo's. As TRL's error says, the tokenizer gets a response template by hand: TRL's
own Qwen3 one (``<tool_call>{json}</tool_call>`` then content up to ``<|im_end|>``), which
matches what the demo's template renders. Nothing else about TRL is changed.

    .venv/bin/python benchmarks/trl_native_vs_aworld.py [--latencies 0,50,300,1000] [--steps 40]
        [--sides aworld,trl] [--trl-async-at 300] [--max-side-s 900] [--eval-every 10] [--eval-n 100]
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
OUR_SIDES = ("aworld", "aworld-async")  # ours: synchronous (the default) and asynchronous GRPO


def calc(expr: str) -> str:
    """Evaluate an arithmetic expression of two whole numbers, such as 1234*5678.

    Args:
        expr: two whole numbers joined by one of * + -
    """
    from aworld_cpu_grpo_demo.calculator import calculate

    return calculate(expr)  # a ValueError becomes TRL's {"error": ...} tool result, as MCP's tool error


def trl_tool(latency: Any, kind: str) -> Any:
    """TRL's ``calc`` tool taking ``latency`` per call: a sync function (``time.sleep``) or an
    ``async def`` (``await asyncio.sleep``); same name, docstring and schema as :func:`calc`."""
    import asyncio

    if not latency:
        return calc
    if kind == "sync":

        def slow(expr: str) -> str:
            time.sleep(latency.draw_s())
            return calc(expr)
    else:

        async def slow(expr: str) -> str:  # type: ignore[misc]
            await asyncio.sleep(latency.draw_s())
            return calc(expr)

    slow.__name__ = slow.__qualname__ = "calc"
    slow.__doc__ = calc.__doc__
    return slow


def parse_latency(text: str) -> tuple[float, str]:
    """``300`` -> (300, fixed); ``gaia300`` -> (300, gaia)."""
    text = text.strip()
    kind = "gaia" if text.startswith("gaia") else "fixed"
    try:
        ms = float(text[4:] if kind == "gaia" else text)
    except ValueError:
        raise SystemExit(f"--latencies: {text!r} is neither N (fixed ms) nor gaiaN (log-normal, median N ms)") from None
    if ms < 0:
        raise SystemExit(f"--latencies: {text!r} is negative")
    return ms, kind


def latency_label(ms: float, kind: str) -> str:
    return f"{ms:g} ms" if kind == "fixed" else f"gaia {ms:g} ms"


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
    """The demo's MCP calculator as a process on 127.0.0.1 (what the job's environment starts),
    each call taking ``latency_ms`` (``kind``: fixed or gaia)."""

    def __init__(self, latency_ms: float = 0.0, kind: str = "fixed"):
        self.args = ["--latency-ms", f"{latency_ms:g}", "--latency-dist", kind]

    def __enter__(self) -> Calculator:
        import signal

        from aworld_core.offline import OFFLINE_ENV

        # stopped with SIGTERM (a timeout, a kill), the run still stops its server
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

        self.proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator", *self.args],
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, **OFFLINE_ENV})
        info = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
        self.url, self.token = f"http://127.0.0.1:{info['port']}/mcp", info["token"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def mcp_config(self) -> dict[str, Any]:
        from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers

        config, _ = get_agent_tool_env_and_servers(self.url, self.token, name="calculator", release_workspace=False)
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


def eval_callback(every: int, name: str, max_s: float | None) -> Any:
    """Copies the weights every ``every`` steps (and at the end), keeping (step, training seconds,
    weights); stops training after ``max_s`` seconds. Evaluated after training (:func:`evaluate_points`)."""
    from transformers import TrainerCallback

    class PeriodicSnapshot(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.snapshots: list[tuple[int, float, dict[str, Any]]] = []
            self.points: list[tuple[int, float, float]] = []
            self.copy_s = 0.0
            self.logs: list[dict[str, float]] = []
            self.capped = False
            self.steps = 0
            self.train_s = 0.0
            self.cpu_s = 0.0  # this process's CPU over training (all threads): the work, less the machine's load

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            keys = ("reward", "tools/call_frequency", "aworld/tool_call_rate", "aworld/rollout_s",
                    "aworld/staleness_mean")
            if logs and "reward" in logs:
                self.logs.append({k: float(logs[k]) for k in keys if isinstance(logs.get(k), (int, float))})

        def _snapshot(self, model: Any, step: int, train_s: float) -> None:
            began = time.perf_counter()
            self.snapshots.append((step, train_s, {k: v.detach().clone() for k, v in model.state_dict().items()}))
            self.copy_s += time.perf_counter() - began

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            self._snapshot(model, 0, 0.0)
            self.started = time.perf_counter()
            self.cpu_started = time.process_time()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            step = state.global_step
            train_s = time.perf_counter() - self.started - self.copy_s
            self.steps, self.train_s = step, train_s
            self.cpu_s = time.process_time() - self.cpu_started
            if max_s is not None and train_s > max_s and step != state.max_steps:
                self.capped = True
                control.should_training_stop = True
            if step % every and step != state.max_steps and not self.capped:
                return
            self._snapshot(model, step, train_s)
            print(f"  {name:10s} step {step:4d}: {train_s:6.1f}s training", flush=True)

    return PeriodicSnapshot()


def evaluate_points(callback: Any, evaluate: Any, model_dir: Path, name: str) -> None:
    """Held-out accuracy of every snapshot the callback kept (one model object, weights loaded in turn)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    for step, train_s, weights in callback.snapshots:
        model.load_state_dict(weights)
        accuracy = evaluate(model, f"{name}-{step}")
        callback.points.append((step, train_s, accuracy))
        print(f"  {name:10s} step {step:4d}: {train_s:6.1f}s training, held-out accuracy {accuracy:.2f}", flush=True)
    callback.snapshots.clear()


def quiet(trainer: Any) -> Any:
    from transformers import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def run_aworld(job: Any, model_dir: Path, every: int, loop: Any, *, name: str = "aworld",
               max_s: float | None = None, async_rollout: dict[str, Any] | None = None) -> Any:
    """The demo's training path (``aworld_trl.trainer.TrlRun``'s parts) with the periodic snapshots;
    ``async_rollout``: asynchronous GRPO (``aworld_trl.async_grpo``) with these settings."""
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
    common = dict(loop=loop, engine=engine, placeholder_id=tokenizer.eos_token_id, sampling=trl_sampling(args),
                  trajectory_every=0,
                  failed_steps=FailedSteps(job.rollout.max_failed_steps, setting="rollout.max_failed_steps"))
    if async_rollout is None:
        rollout: Any = AworldRollout(runner, samples, torch_threads=options.rollout_torch_threads, **common)
        cls = trainer_class()
    else:
        from aworld_trl.async_grpo import AsyncRollout, async_trainer_class

        rollout = AsyncRollout(runner, samples, **common, **async_rollout)
        cls = async_trainer_class()
    callback = eval_callback(every, name, max_s)
    trainer = cls(model=model, reward_funcs=[make_reward_func("exact_answer")], args=args,
                  train_dataset=Dataset.from_list(rollout.dataset_rows()), processing_class=tokenizer,
                  rollout_func=rollout, callbacks=[callback])
    quiet(trainer).train()
    rollout.sync_weights(model, trainer.state.global_step)
    callback.rollout = rollout
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


def run_trl_native(job: Any, model_dir: Path, every: int, opts: argparse.Namespace, *, name: str = "trl",
                   tool: Any = calc, max_s: float | None = None) -> Any:
    """``GRPOTrainer(tools=[tool])`` with the same GRPO settings as the aworld side."""
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
    callback = eval_callback(every, name, max_s)
    trainer = GRPOTrainer(model=model, reward_funcs=[exact_reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=trl_tokenizer(model_dir), tools=[tool], callbacks=[callback])
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


class Run:
    """One side's training at one latency: its points and what it measured."""

    def __init__(self, side: str, callback: Any, load: tuple[float, float], episodes_per_step: int):
        self.side, self.cb, self.load = side, callback, load
        pts = callback.points
        self.acc0 = pts[0][2]
        self.final = pts[-1][2]
        self.best = max(p[2] for p in pts)
        self.hit = reached(pts[1:])
        self.steps = callback.steps or pts[-1][0]
        self.train_s = callback.train_s or pts[-1][1]
        self.s_per_step = self.train_s / max(1, self.steps)
        self.cpu_per_step = callback.cpu_s / max(1, self.steps)
        self.eps = self.steps * episodes_per_step / self.train_s if self.train_s else 0.0
        self.capped = callback.capped
        self.projected: float | None = None

    def to_target(self) -> str:
        if self.hit:
            return f"{self.hit[1]:.0f} s (step {self.hit[0]})"
        if self.projected is not None:
            return f"proj. {self.projected:.0f} s"
        return "not reached"

    def target_s(self) -> float | None:
        return self.hit[1] if self.hit else self.projected


def project(results: dict[str, dict[str, Run]]) -> None:
    """A capped run that did not reach 0.8: its s/step x the step at which the same side reached 0.8
    at the lowest latency measured (else the step aworld needed at this latency)."""
    labels = list(results)
    for label in labels:
        for side, run in results[label].items():
            if run.hit or not run.capped:
                continue
            base = next((results[other][side].hit for other in labels if side in results[other]
                         and results[other][side].hit), None)
            if base is None and "aworld" in results[label] and results[label]["aworld"].hit:
                base = results[label]["aworld"].hit
            if base is not None:
                run.projected = run.s_per_step * base[0]


def table(results: dict[str, dict[str, Run]], opts: argparse.Namespace) -> None:
    print(f"\n{opts.steps} GRPO steps x {opts.prompts} prompts x {opts.generations} generations, lr {opts.lr:g}, "
          f"max {opts.length} tokens, {opts.threads} torch thread(s); held-out: {opts.eval_n} problems, greedy, "
          f"every {opts.eval_every} steps; training capped at {opts.max_side_s:g} s per run; {os.cpu_count()} CPUs")
    print(f"{'tool latency':14s} {'side':12s} {'acc@0':>5s} {'final':>5s} {'best':>5s} {'to 0.8':>18s} {'steps':>5s} "
          f"{'train s':>7s} {'s/step':>6s} {'cpu/step':>8s} {'ep/s':>6s} {'reward':>10s} {'tool calls':>10s} "
          f"{'load avg':>9s}")
    for label, runs in results.items():
        for side, run in runs.items():
            print(f"{label:14s} {side:12s} {run.acc0:5.2f} {run.final:5.2f} {run.best:5.2f} {run.to_target():>18s} "
                  f"{run.steps:5d}{'*' if run.capped else ' '}{run.train_s:7.0f} {run.s_per_step:6.2f} "
                  f"{run.cpu_per_step:8.2f} {run.eps:6.1f} "
                  f"{_span(run.cb.logs, 'reward'):>10s} "
                  f"{_span(run.cb.logs, 'tools/call_frequency', 'aworld/tool_call_rate'):>10s} "
                  f"{run.load[0]:4.1f}-{run.load[1]:.1f}")
    print("  cpu/step: this process's CPU seconds per step, all threads (the MCP server's process not counted): the "
          "work a step took, which the machine's load inflates far less than its wall time")
    if any(run.capped for runs in results.values() for run in runs.values()):
        print("  * capped at --max-side-s: trained fewer steps; 'proj.' = s/step x the step the same side reached "
              f"{TARGET} at the lowest latency")
    print(f"\ntime to held-out {TARGET} (training seconds) and episodes/s, side by side:")
    ours = [s for s in OUR_SIDES if any(s in runs for runs in results.values())]
    others = [s for s in ("trl", "trl-async") if any(s in runs for runs in results.values())]
    pairs = [(mine, theirs) for mine in ours for theirs in others]
    head = f"{'tool latency':14s} " + " ".join(f"{s:>18s}" for s in [*ours, *others])
    head += " " + " ".join(f"{m + '/' + t:>22s}" for m, t in pairs) + " " + \
        " ".join(f"{'ep/s ' + s:>17s}" for s in [*ours, *others]) + f" {'final acc':>18s}"
    print(head)
    for label, runs in results.items():
        if not any(s in runs for s in ours):
            continue
        cols = [f"{runs[s].to_target() if s in runs else '-':>18s}" for s in [*ours, *others]]
        ratios = []
        for m, t in pairs:
            mine, theirs = (runs[m].target_s() if m in runs else None), (runs[t].target_s() if t in runs else None)
            ratios.append(f"{mine / theirs:22.2f}" if mine and theirs else f"{'-':>22s}")
        eps = [f"{runs[s].eps if s in runs else float('nan'):17.1f}" for s in [*ours, *others]]
        finals = "/".join(f"{runs[s].final:.2f}" if s in runs else "-" for s in [*ours, *others])
        print(f"{label:14s} {' '.join(cols)} {' '.join(ratios)} {' '.join(eps)} {finals:>18s}")
    print(f"target at 300 ms: aworld reaches {TARGET} in <= 0.2 x TRL-native's time at the same accuracy")


def run_side(side: str, job: Any, model_dir: Path, loop: Any, opts: argparse.Namespace, latency: Any) -> Any:
    if side == "aworld":
        return run_aworld(job, model_dir, opts.eval_every, loop, max_s=opts.max_side_s)
    if side == "aworld-async":  # our opt-in asynchronous GRPO (aworld.async_rollout, docs/backend-trl.md)
        return run_aworld(job, model_dir, opts.eval_every, loop, name=side, max_s=opts.max_side_s,
                          async_rollout={"max_staleness": opts.async_staleness, "weight_cap": 2.0})
    kind = "async" if side == "trl-async" else "sync"
    return run_trl_native(job, model_dir, opts.eval_every, opts, name=side, max_s=opts.max_side_s,
                          tool=trl_tool(latency, kind))


def main(argv: list[str] | None = None) -> int:
    from aworld_core.offline import apply_offline_env

    apply_offline_env()  # telemetry and hub lookups off here and in every process this starts
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latencies", default="0,50,300,1000",
                        help="tool latencies, comma-separated: N = fixed N ms, gaiaN = log-normal with median N ms")
    parser.add_argument("--sides", default="aworld,trl",
                        help="at every latency: aworld, aworld-async (aworld.async_rollout), trl (sync tool), "
                             "trl-async (async tool)")
    parser.add_argument("--async-staleness", type=int, default=1,
                        help="max_staleness of the aworld-async side")
    parser.add_argument("--trl-async-at", default="300",
                        help="latencies (as in --latencies) at which TRL also runs with an async tool; '' for none")
    parser.add_argument("--steps", type=int, default=100, help="GRPO steps per run (the demo's 100)")
    parser.add_argument("--max-side-s", type=float, default=900.0, help="cap on one run's training seconds")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--length", type=int, default=64, help="max_completion_length (sampled + tool tokens)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-n", type=int, default=100, help="held-out problems (the demo's test split)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--model", default=None, help=f"warm-started model directory (default {DEMO_MODEL})")
    parser.add_argument("--first", choices=("aworld", "trl"), default="aworld",
                        help="which side trains first at each latency (the machine's load drifts: run both orders)")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, 2 steps, 4 problems")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.steps, opts.prompts, opts.generations, opts.length = 2, 2, 2, 48
        opts.eval_every, opts.eval_n = 1, 4
        if opts.latencies == parser.get_default("latencies"):
            opts.latencies, opts.trl_async_at = "gaia20", "gaia20"
        if opts.sides == parser.get_default("sides"):
            opts.sides = "aworld,aworld-async,trl"
    latencies = [parse_latency(x) for x in opts.latencies.split(",") if x.strip()]
    async_at = {parse_latency(x) for x in opts.trl_async_at.split(",") if x.strip()}
    sides = [s.strip() for s in opts.sides.split(",") if s.strip()]
    unknown = set(sides) - {*OUR_SIDES, "trl", "trl-async"}
    if unknown:
        parser.error(f"--sides: unknown {sorted(unknown)}; choose from aworld, aworld-async, trl, trl-async")

    import warnings

    import torch

    from aworld_core.runtime.loop_thread import LoopThread
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.worker import load_job
    from aworld_cpu_grpo_demo.calculator import ToolLatency
    from aworld_cpu_grpo_demo.tasks import load_arith

    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
    torch.set_num_threads(opts.threads)
    held_out = load_arith(n=opts.eval_n, seed=0, split="test")
    results: dict[str, dict[str, Run]] = {}
    per_step = opts.prompts * opts.generations
    with tempfile.TemporaryDirectory() as tmp, LoopThread("bench") as loop:
        model_dir = model_for(opts, Path(tmp))
        for ms, kind in latencies:
            label = latency_label(ms, kind)
            results[label] = {}
            with Calculator(ms, kind) as calculator:
                job = load_job(demo_job(model_dir, Path(tmp) / "out", calculator.mcp_config(), opts))
                evaluate = Evaluator(job, load_tokenizer(model_dir), held_out, loop, opts.length)
                order = list(sides)
                if (ms, kind) in async_at and "trl-async" not in order:
                    order.append("trl-async")
                if opts.first == "trl":
                    order.sort(key=lambda s: s in OUR_SIDES)
                for side in order:
                    first = os.getloadavg()[0]
                    print(f"{label}, {side}: training (load average {first:.1f})", flush=True)
                    callback = run_side(side, job, model_dir, loop, opts, ToolLatency(ms, kind))
                    load = (first, os.getloadavg()[0])
                    evaluate_points(callback, evaluate, model_dir, side)
                    results[label][side] = Run(side, callback, load, per_step)
    project(results)
    table(results, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
