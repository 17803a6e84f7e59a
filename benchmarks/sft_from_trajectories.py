"""From collected trajectories to a better model: the figures of examples/sft_from_trajectories.

    .venv/bin/python benchmarks/sft_from_trajectories.py [--problems 1200] [--attempts 2] [key.path=value ...]

1. collection throughput: the same tasks (``--problems`` x ``--attempts`` teacher episodes)
   collected through 1 task server (the baseline) and through 3, one client each time, for each
   teacher latency in ``--teacher-delay-s`` (0: the scripted teacher at its own, CPU-bound speed;
   0.25 s per reply: as a served model); printed side by side (episodes/s over the whole
   collection, first claim to last result);
2. the example's pipeline on the 3-server collection: trajectories kept, tokens trained, SFT
   steps and time, held-out accuracy before -> after, wall time.

Everything runs on 127.0.0.1 and is written under ``runs/bench-sft-from-trajectories``.
Nothing is asserted; the numbers go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "sft_from_trajectories" / "run.py"


def _example() -> object:
    spec = importlib.util.spec_from_file_location("sft_from_trajectories_run", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    from aworld_core.offline import apply_offline_env

    apply_offline_env()  # telemetry and hub lookups off here and in every process this starts
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=1200)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32, help="tasks per server at once")
    parser.add_argument("--teacher-delay-s", default="0,0.25", help="teacher latencies per reply (comma list); "
                        "the pipeline trains on the last one's 3-server collection")
    parser.add_argument("--run-dir", default=str(REPO / "runs" / "bench-sft-from-trajectories"))
    parser.add_argument("--skip-train", action="store_true", help="collection throughput only")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help="overrides for the SFT job")
    args = parser.parse_args()
    example = _example()
    started = time.perf_counter()
    run_dir = Path(args.run_dir).resolve()
    student = example.build_student(run_dir / "student")
    delays = [float(x) for x in args.teacher_delay_s.split(",")]
    runs: list[tuple[dict, dict]] = []
    for delay in delays:
        pair = tuple(example.collect(student, run_dir / f"collect-{n}-{delay:g}", servers=n, problems=args.problems,
                                     attempts=args.attempts, concurrency=args.concurrency, teacher_delay_s=delay)
                     for n in (1, 3))
        runs.append(pair)
    print(f"\ncollection, {runs[0][0]['episodes']} teacher episodes (concurrency {args.concurrency} per server):")
    print(f"  {'teacher s/reply':<16}{'servers':<9}{'episodes/s':>11}{'seconds':>9}  per server")
    for delay, (one, three) in zip(delays, runs, strict=True):
        for stats in (one, three):
            print(f"  {delay:<16g}{stats['servers']:<9}{stats['episodes_per_s']:>11}{stats['seconds']:>9}  "
                  f"{stats['per_host']}")
        print(f"  {'':<16}3 servers / 1 server: {three['episodes_per_s'] / one['episodes_per_s']:.2f} x")
    one, three = runs[-1]
    if args.skip_train:
        return
    code, result = example.process_and_train(three, run_dir, student, args.overrides, time.perf_counter())
    result["collect_1_server"] = one
    result["benchmark_wall_seconds"] = round(time.perf_counter() - started, 1)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    metrics = result.get("sft", {})
    print("\nfrom trajectories to a better model:")
    print(f"  teacher episodes {three['episodes']} -> kept {result['kept']['episodes']} "
          f"({result['train_episodes']} train, {result['val_episodes']} val); dropped "
          + ", ".join(f"{v['episodes']} {k}" for k, v in result["dropped"].items()))
    print(f"  tokens: {metrics.get('sft/train_tokens')} in the training rows, "
          f"{metrics.get('sft/trained_tokens_per_epoch')} with loss per epoch")
    print(f"  SFT: {metrics.get('steps')} steps, loss {metrics.get('loss/start')} -> {metrics.get('loss/end')}, "
          f"validation {metrics.get('eval_loss/first')} -> {metrics.get('eval_loss/last')}; "
          f"{metrics.get('train_seconds')} s for the SFT job")
    print(f"  held-out accuracy (100 problems, greedy, full tool loop): {metrics.get('eval_before/accuracy')} -> "
          f"{metrics.get('eval_after/accuracy')}")
    print(f"  wall time: example pipeline {result['wall_seconds']} s (3-server collection excluded: "
          f"{three['seconds']} s), benchmark {result['benchmark_wall_seconds']} s; exit code {code}")


if __name__ == "__main__":
    main()
