"""From collected trajectories to a better model, on a CPU in minutes.

    .venv/bin/python examples/sft_from_trajectories/run.py [--problems 1200] [--attempts 2]

1. **student**: a fresh tiny Qwen2 with the CPU demo's tokenizer and random weights
   (``runs/sft-from-trajectories/student``); it cannot even write the answer format.
2. **collect**: the calculator MCP server and three task servers (``python -m aworld_service.serve``,
   each its own SQLite store) run the teacher (``teacher.py``); one ``AworldTaskClient`` with
   ``know_hosts`` of all three submits every training problem ``--attempts`` times, waits, and
   downloads the trajectories (``results.jsonl``, task results with their episodes).
3. **process**: ``python -m aworld_core.trajectories filter`` keeps successful, rewarded (exact
   answer), untruncated episodes with token data, the best one per problem, deduplicated, and
   holds out 5 % of the problems for the validation loss.
4. **fine-tune**: ``python -m aworld_core.run --config job.yaml``: TRL's ``SFTTrainer`` on the
   kept episodes' exact tokens (loss on the teacher's sampled ids only), with held-out accuracy
   (100 fresh problems, greedy, the full tool loop) before and after, the loss curve and
   ``metrics.png``.

Everything is local (loopback, nothing downloaded). ``collect`` is importable for
``benchmarks/sft_from_trajectories.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUN_DIR = REPO / "runs" / "sft-from-trajectories"
TEACHER = HERE / "teacher.py"


def build_student(path: Path, seed: int = 0) -> Path:
    """The demo's tokenizer and a randomly initialised tiny Qwen2 (no warm start)."""
    from transformers.utils import logging as hf_logging

    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer

    hf_logging.disable_progress_bar()
    if (path / "config.json").exists():
        return path
    tokenizer = train_tokenizer(seed)
    model = new_model(tokenizer, seed)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    save_tokenizer(tokenizer, path)
    print(f"student: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, random weights -> {path}")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Calculator:
    """The demo's calculator MCP server (a process; prints its address and token)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator"],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError("the calculator MCP server did not start")
        info = json.loads(line)
        self.url, self.token = f"http://{info['ip']}:{info['port']}/mcp", info["token"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class TaskServer:
    """``python -m aworld_service.serve`` running the teacher, with its own SQLite store."""

    def __init__(self, work: Path, index: int, student: Path, calculator: Calculator, concurrency: int,
                 teacher_delay_s: float = 0.0):
        self.port = _free_port()
        self.log = work / f"server-{index}.log"
        store = work / f"store-{index}.sqlite"
        for old in work.glob(f"store-{index}.sqlite*"):
            old.unlink()
        env = {**os.environ, "AWORLD_SFT_TOKENIZER": str(student), "MCP_SERVER_URL": calculator.url,
               "MCP_SERVER_TOKEN": calculator.token, "MCP_SERVERS": "calculator",
               "AWORLD_SFT_TEACHER_DELAY_S": str(teacher_delay_s)}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aworld_service.serve", "--port", str(self.port), "--log-level", "warning",
                 "--agents", f"teacher={TEACHER}:solve", "--store", f"sqlite:///{store}", "--reward", "exact_answer",
                 "--concurrency", str(concurrency), "--poll-s", "0.05", "--lease-s", "120"],
                env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"task server exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"task server did not start: {self.log.read_text()[-2000:]}")

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _submit_and_download(hosts: list[str], tasks: list[Any], output: Path) -> list[Any]:
    from aworld_service import AworldTaskClient

    async with AworldTaskClient(know_hosts=hosts, batch_size=20) as client:  # small batches spread over hosts
        await client.submit_tasks(tasks)
        states = await client.wait([t.task_id for t in tasks], timeout=1800, poll_s=0.2)
        await client.download_trajectories(output)
    return states


def collect(student: Path, work: Path, *, servers: int = 3, problems: int = 1200, attempts: int = 2,
            concurrency: int = 32, seed: int = 0, teacher_delay_s: float = 0.25) -> dict[str, Any]:
    """Run the teacher on ``problems`` training problems, ``attempts`` each, through ``servers``
    task servers and one client; download to ``work/results.jsonl``. Returns what was measured.

    ``teacher_delay_s``: the teacher waits this long per reply, as a served model would (a real
    teacher's latency is what several servers spread; at 0 the scripted teacher is CPU-bound)."""
    from aworld_core.schemas import AworldTask
    from aworld_cpu_grpo_demo.tasks import load_arith

    work.mkdir(parents=True, exist_ok=True)
    samples = load_arith(n=problems, seed=seed, split="train")
    stamp = time.time_ns()
    tasks = [
        AworldTask(task_id=f"{s.id}-{stamp}-a{k}", agent_id="teacher", agent_input=s.question,
                   ground_truth=s.ground_truth, metadata={"sample_id": s.id, "data_source": s.data_source})
        for s in samples for k in range(attempts)
    ]
    calculator = Calculator()
    running: list[TaskServer] = []
    try:
        running = [TaskServer(work, i, student, calculator, concurrency, teacher_delay_s) for i in range(servers)]
        output = work / "results.jsonl"
        states = asyncio.run(_submit_and_download([s.host for s in running], tasks, output))
    finally:
        for server in running:
            server.stop()
        calculator.stop()
    begin = min(s.started_at for s in states if s.started_at)
    end = max(s.ended_at for s in states if s.ended_at)
    per_host: dict[str, int] = {}
    for state in states:
        per_host[state.host or "?"] = per_host.get(state.host or "?", 0) + 1
    stats = {"servers": servers, "teacher_delay_s": teacher_delay_s, "episodes": len(states), "seconds": round(end - begin, 2),
             "episodes_per_s": round(len(states) / (end - begin), 1), "per_host": sorted(per_host.values()),
             "statuses": {k: sum(1 for s in states if s.status.value == k) for k in {s.status.value for s in states}},
             "results": str(output)}
    print(f"collected {len(states)} episodes with {servers} task server(s), teacher {teacher_delay_s} s per reply, "
          f"in {stats['seconds']} s "
          f"({stats['episodes_per_s']} episodes/s; per server {stats['per_host']}; {stats['statuses']})")
    return stats


def process_and_train(stats: dict[str, Any], run_dir: Path, student: Path, overrides: list[str],
                      started: float) -> tuple[int, dict[str, Any]]:
    """Steps 3 and 4: filter the collected trajectories, fine-tune the student; returns the SFT
    exit code and what the whole run measured (also written to ``run_dir/result.json``)."""
    from aworld_core.run import main as run_job
    from aworld_core.trajectories.cli import main as trajectories

    data = run_dir / "data"
    command = ["filter", stats["results"], "-o", str(data), "--min-reward", "1", "--require-tokens",
               "--best-of-n", "1", "--val-fraction", "0.05"]
    print("$ python -m aworld_core.trajectories " + " ".join(command), flush=True)
    if trajectories(command) != 0:
        return 2, {}
    overrides = [f"output_dir={run_dir / 'sft'}", f"model.path={student}", f"sft.train={data / 'train.jsonl'}",
                 f"sft.val={data / 'val.jsonl'}", *overrides]
    print(f"$ python -m aworld_core.run --config {HERE / 'job.yaml'} " + " ".join(overrides), flush=True)
    code = run_job(["--config", str(HERE / "job.yaml"), *overrides])
    summary = json.loads((run_dir / "sft" / "summary.json").read_text()) if code == 0 else {}
    report = json.loads((data / "report.json").read_text())
    result = {"collect": stats, "kept": report["kept"], "dropped": report["dropped"],
              "train_episodes": report["train_episodes"], "val_episodes": report["val_episodes"],
              "sft": summary.get("metrics", {}), "wall_seconds": round(time.perf_counter() - started, 1)}
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    metrics = result["sft"]
    if metrics:
        print(f"result: {stats['episodes']} teacher episodes -> {report['kept']['episodes']} kept "
              f"({metrics.get('sft/trained_tokens_per_epoch', 0):,} trained tokens per epoch, "
              f"{metrics.get('steps')} SFT steps in {metrics.get('train_seconds')} s); held-out accuracy "
              f"{metrics.get('eval_before/accuracy')} -> {metrics.get('eval_after/accuracy')}; "
              f"{result['wall_seconds']:.0f} s in all -> {run_dir / 'result.json'}", flush=True)
    return code, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=1200, help="training problems to collect")
    parser.add_argument("--attempts", type=int, default=2, help="teacher attempts per problem (best of n)")
    parser.add_argument("--servers", type=int, default=3, help="task servers")
    parser.add_argument("--teacher-delay-s", type=float, default=0.25,
                        help="the teacher's wait per reply, standing for a served model's latency")
    parser.add_argument("--run-dir", default=str(RUN_DIR), help="where everything is written")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help="overrides for job.yaml")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    run_dir = Path(args.run_dir).resolve()
    student = build_student(run_dir / "student")
    stats = collect(student, run_dir / "collect", servers=args.servers, problems=args.problems,
                    attempts=args.attempts, teacher_delay_s=args.teacher_delay_s)
    code, _ = process_and_train(stats, run_dir, student, args.overrides, started)
    return code


if __name__ == "__main__":
    sys.exit(main())
