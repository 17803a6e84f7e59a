"""The same job through each backend on this machine, side by side in one run (printed, never asserted).

The job is the CPU GRPO demo (``examples/cpu_grpo_demo/job.yaml``: its task, model, reward and
batch of 8 prompts x 8 episodes), with one step budget for every backend. Each backend runs its
documented command in its own environment (``python -m aworld_core.run --backend <name> --config
...``), one after the other, so they never share the CPU. While a run goes, the script watches the
metrics file the backend writes live and stamps each training step as it lands:

* ``start-up s``: from the command's start to the end of its first training step, minus that
  step (imports, model load, held-out evaluation before training, servers, Ray, ...);
* ``s/step``: median time between consecutive steps;
* the reward curve (mean training reward per step), and the steps and seconds (from the command's
  start) until the mean reward of the last ``--window`` steps first reaches ``--target``;
* held-out accuracy after training (the backend's greedy evaluation of its trained checkpoint).

Rows: one function per backend (``BACKENDS``); a later backend adds its function and its entry.
AReaL has two rows: its default staleness bound (``max_head_offpolicyness: 2``, rollouts run ahead of
the trained policy) and ``areal-s0`` (0: none do), side by side.

    .venv/bin/python benchmarks/backends_e2e.py                    # every backend (BACKENDS), 30 steps each
    .venv/bin/python benchmarks/backends_e2e.py --steps 40 --backends verl --heldout 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEMO_JOB = REPO / "examples" / "cpu_grpo_demo" / "job.yaml"
PYTHONS = {"trl": REPO / ".venv" / "bin" / "python", "verl": REPO / ".venvs" / "verl" / "bin" / "python",
           "swift": REPO / ".venvs" / "swift-vllm" / "bin" / "python",
           "areal": REPO / ".venvs" / "areal" / "bin" / "python"}
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"


@dataclass
class Row:
    backend: str
    wall_s: float = 0.0
    startup_s: float | None = None
    s_per_step: float | None = None
    rewards: list[float] = field(default_factory=list)
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    heldout_before: float | None = None
    heldout_after: float | None = None
    error: str | None = None


@dataclass
class Context:
    model: Path
    out: Path
    steps: int
    heldout: int
    target: float
    window: int


class StepWatch:
    """Stamps each new step row of a JSONL metrics file (polled) with the seconds since ``t0``."""

    def __init__(self, path: Path, parse: Callable[[dict[str, Any]], tuple[int, float] | None], t0: float):
        self.path, self.parse, self.t0 = path, parse, t0
        self.stamps: dict[int, tuple[float, float]] = {}  # step -> (seconds, reward)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(0.25):
            self.poll()
        self.poll()

    def poll(self) -> None:
        if not self.path.is_file():
            return
        now = time.perf_counter() - self.t0
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                parsed = self.parse(json.loads(line))
            except (ValueError, TypeError):
                continue
            if parsed is not None and parsed[0] not in self.stamps:
                self.stamps[parsed[0]] = (now, parsed[1])

    def __enter__(self) -> StepWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)


def _run(backend: str, ctx: Context, overrides: dict[str, Any], metrics_file: str,
         parse: Callable[[dict[str, Any]], tuple[int, float] | None], name: str | None = None) -> Row:
    """Run the demo job through ``backend`` with ``overrides``; fill a row (``name``: the row's and
    its output's name, default the backend's) from the live metrics."""
    name = name or backend
    out = ctx.out / name
    row = Row(name)
    args = [str(PYTHONS[backend]), "-m", "aworld_core.run", "--backend", backend, "--config", str(DEMO_JOB),
            f"output_dir={out}", f"model.path={ctx.model}", f"test_dataset.options.n={ctx.heldout}",
            *[f"{k}={v}" for k, v in overrides.items()]]
    t0 = time.perf_counter()
    with StepWatch(out / metrics_file, parse, t0) as watch, open(ctx.out / f"{name}.log", "w") as log:
        proc = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row.wall_s = time.perf_counter() - t0
    if proc.returncode != 0:
        row.error = f"exit {proc.returncode} (log: {ctx.out / f'{name}.log'})"
    steps = sorted(watch.stamps)
    times = [watch.stamps[s][0] for s in steps]
    row.rewards = [watch.stamps[s][1] for s in steps]
    if len(times) >= 2:
        row.s_per_step = statistics.median(b - a for a, b in zip(times, times[1:], strict=False))
        row.startup_s = times[0] - row.s_per_step
    for i in range(len(row.rewards)):
        recent = row.rewards[max(0, i + 1 - ctx.window): i + 1]
        if i + 1 >= ctx.window and sum(recent) / len(recent) >= ctx.target:
            row.steps_to_target, row.seconds_to_target = steps[i], times[i]
            break
    summary = out / "summary.json"
    if summary.is_file():
        metrics = json.loads(summary.read_text())["metrics"]
        row.heldout_before = metrics.get("eval_before/accuracy")
        row.heldout_after = metrics.get("eval_after/accuracy")
    return row


# -- one function per backend --------------------------------------------------------------------


def run_trl(ctx: Context) -> Row:
    """aworld-trl: TRL's GRPOTrainer in one process, rollouts on the HF engine over the live policy."""
    return _run("trl", ctx, {"backends.trl.max_steps": ctx.steps, "backends.trl.aworld.targets": "null",
                             "backends.trl.aworld.progress": "false"},
                "metrics.jsonl", lambda r: (int(r["step"]), float(r["reward"])) if "reward" in r else None)


def run_verl(ctx: Context) -> Row:
    """aworld-verl: verl's main_ppo (Ray, V1 sync trainer, FSDP2 actor) with vLLM's CPU build as the
    rollout server (weights synced in place every step)."""
    def parse(record: dict[str, Any]) -> tuple[int, float] | None:  # verl's file logger, written live
        data = record.get("data") or {}
        return (int(record["step"]), float(data["critic/score/mean"])) if "critic/score/mean" in data else None

    return _run("verl", ctx, {"backends.verl.trainer.total_training_steps": ctx.steps,
                              "backends.verl.trainer.save_freq": ctx.steps,
                              "backends.verl.aworld.rollout_server.python": str(VLLM_PYTHON)},
                "verl/metrics_raw.jsonl", parse)


def run_swift(ctx: Context) -> Row:
    """aworld-swift in ms-swift's server mode: ``swift rollout`` (vLLM's CPU build, the episodes) started
    by the launch, ``swift rlhf --vllm_mode server`` syncing weights to it over TCP every step
    (benchmarks/_swift_server_row.py: the settings, and held-out accuracy from ms-swift's evaluation)."""
    import _swift_server_row as swift

    row = _run("swift", ctx, swift.overrides(ctx.steps), swift.METRICS_FILE, swift.parse)
    row.heldout_before, row.heldout_after = swift.heldout(ctx.out / "swift" / swift.METRICS_FILE)
    return row


def _areal(ctx: Context, name: str, offpolicyness: int | None) -> Row:
    overrides: dict[str, Any] = {"backends.areal.total_train_steps": ctx.steps,
                                 "backends.areal.vllm_server.python": str(VLLM_PYTHON)}
    if offpolicyness is not None:
        overrides["backends.areal.rollout.max_head_offpolicyness"] = offpolicyness

    def parse(record: dict[str, Any]) -> tuple[int, float] | None:  # aworld_areal.run's file, AReaL's stats
        reward = record.get("ppo_actor/task_reward/avg")  # the reward of the rows the step trained
        return (int(record["step"]), float(reward)) if reward is not None else None

    return _run("areal", ctx, overrides, "metrics.jsonl", parse, name=name)


def run_areal(ctx: Context) -> Row:
    """aworld-areal: AReaL's own PPOTrainer (SPMD, FSDP on gloo, asynchronous with its default
    max_head_offpolicyness 2) with plain vLLM's CPU build as the rollout server, disk weight
    updates every step (docs/backend-areal.md, "On a CPU")."""
    return _areal(ctx, "areal", None)


def run_areal_sync(ctx: Context) -> Row:
    """The same with ``rollout.max_head_offpolicyness: 0``: no rollout runs ahead of the policy."""
    return _areal(ctx, "areal-s0", 0)


BACKENDS: dict[str, Callable[[Context], Row]] = {"trl": run_trl, "verl": run_verl, "swift": run_swift,
                                                 "areal": run_areal, "areal-s0": run_areal_sync}


# -- the table --------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def print_table(rows: list[Row], ctx: Context) -> None:
    print(f"\nsame job (demo task, model {ctx.model.name}, 8 prompts x 8 episodes, {ctx.steps} steps), one backend "
          f"at a time; load average at the end: {open('/proc/loadavg').read().split()[0]}")
    header = (f"{'backend':<8} {'wall s':>8} {'start-up s':>10} {'s/step':>7} {'reward first':>12} {'reward last':>11} "
              f"{'steps to ' + str(ctx.target):>12} {'s to ' + str(ctx.target):>9} {'held-out before':>15} {'after':>6}")
    print(header)
    print("-" * len(header))
    w = ctx.window
    for row in rows:
        first = sum(row.rewards[:w]) / len(row.rewards[:w]) if row.rewards else None
        last = sum(row.rewards[-w:]) / len(row.rewards[-w:]) if row.rewards else None
        print(f"{row.backend:<8} {_fmt(row.wall_s):>8} {_fmt(row.startup_s):>10} {_fmt(row.s_per_step, '.2f'):>7} "
              f"{_fmt(first, '.3f'):>12} {_fmt(last, '.3f'):>11} {str(row.steps_to_target or 'n/a'):>12} "
              f"{_fmt(row.seconds_to_target, '.0f'):>9} {_fmt(row.heldout_before, '.2f'):>15} "
              f"{_fmt(row.heldout_after, '.2f'):>6}" + (f"  ERROR {row.error}" if row.error else ""))
    ratios = [r for r in rows if r.s_per_step]
    if len(ratios) >= 2:
        base = ratios[0]
        for row in ratios[1:]:
            print(f"s/step {row.backend}/{base.backend}: {row.s_per_step / base.s_per_step:.2f}x; "
                  f"start-up {row.backend}/{base.backend}: "
                  f"{(row.startup_s or 0) / max(base.startup_s or 1e-9, 1e-9):.2f}x")
    print("\nreward curves (mean training reward per step):")
    for row in rows:
        print(f"  {row.backend:<6} " + " ".join(f"{r:.2f}" for r in row.rewards))


def _model(args: argparse.Namespace, out: Path) -> Path:
    if args.model:
        return Path(args.model).resolve()
    demo = REPO / "runs" / "cpu-grpo-demo" / "model"
    if demo.is_dir():
        return demo  # make demo's model (same recipe)
    from aworld_cpu_grpo_demo.build import build_model

    return Path(build_model(str(out / "model")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated, of {sorted(BACKENDS)}")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--heldout", type=int, default=100, help="held-out tasks evaluated before and after")
    parser.add_argument("--target", type=float, default=0.6, help="mean training reward to reach")
    parser.add_argument("--window", type=int, default=5, help="steps averaged for the target and the ends")
    parser.add_argument("--model", help="a demo model directory (default: runs/cpu-grpo-demo/model, else built)")
    parser.add_argument("--out", default=str(REPO / "runs" / "bench-backends-e2e"))
    args = parser.parse_args()
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; known: {sorted(BACKENDS)}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(model=_model(args, out), out=out, steps=args.steps, heldout=args.heldout, target=args.target,
                  window=args.window)
    rows = []
    for name in names:
        print(f"running {name} ({PYTHONS[name.split('-')[0]]}) ...", flush=True)
        rows.append(BACKENDS[name](ctx))
        print(f"  {name}: {rows[-1].wall_s:.0f}s", flush=True)
    print_table(rows, ctx)
    (out / "results.json").write_text(json.dumps([row.__dict__ for row in rows], indent=2))


if __name__ == "__main__":
    sys.exit(main())
