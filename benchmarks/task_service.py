"""Task service throughput: submissions and collected episodes per second. Prints figures.

    .venv/bin/python benchmarks/task_service.py                  # both parts, defaults below
    .venv/bin/python benchmarks/task_service.py --part submit --tasks 10000
    .venv/bin/python benchmarks/task_service.py --part collect --store postgres

Part 1 (submit): one server (a separate process, SQLite store) with a no-op agent; the client
submits ``--tasks`` tasks one request each, ``--in-flight`` at a time, and then the same number
in batches; reports submits/s and the p50/p99 latency of a submission. The server runs the tasks
meanwhile, as it would in use.

Part 2 (collect): a real Agent (one Python tool, two LLM calls per episode) against the
loopback OpenAI stub answering after a fixed ``--llm-latency``; episodes/s with 1 and with 3
server processes (each ``--concurrency``), from the first claim to the last result as the store
recorded them: overall, and in the steady state (between the 10th and 90th percentile of
completion times, leaving out the fill at the start and the last partial round). With the LLM as
the bottleneck, as in real use, 3 hosts should collect about 3x.

Servers are real processes on 127.0.0.1; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
THIS_FILE = Path(__file__).resolve()


# --- what the servers run (imported by file path in the server processes) ---------------------


async def noop(task: Any) -> str:
    return "ok"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def calc_agent() -> Any:
    from aworld_core import Agent, AgentConfig

    return Agent(
        "calc",
        system_prompt="Add the numbers with the add tool, then answer.",
        conf=AgentConfig(llm_base_url=os.environ["BENCH_LLM_URL"], llm_model_name="stub-model", llm_retries=0),
        tools=[add],
    )


def stub_script(body: dict[str, Any]) -> Any:
    from support.openai_stub import reply, tool_call

    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"<answer>{last['content']}</answer>"
    a, b = (int(n) for n in re.findall(r"\d+", body["messages"][-1]["content"])[-2:])
    return reply(tool_calls=[tool_call("add", {"a": a, "b": b})])


# --- harness ----------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.port = free_port()
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aworld_service.serve", "--port", str(self.port), "--log-level", "warning", *args],
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def part_submit(args: argparse.Namespace, work: Path) -> None:
    from aworld_core.schemas import AworldTask
    from aworld_service.client import AworldTaskClient

    server = Server(
        ["--agents", f"noop={THIS_FILE}:noop", "--store", f"sqlite:///{work / 'submit.sqlite'}",
         "--concurrency", "64", "--max-queue", str(10 * args.tasks)],
        {}, work / "submit.log",
    )  # fmt: skip
    try:
        async with AworldTaskClient(know_hosts=[server.host]) as client:
            await client.submit_task(AworldTask(task_id="warmup", agent_id="noop", agent_input="x"))
            tasks = [AworldTask(task_id=f"s{i}", agent_id="noop", agent_input=f"q{i}") for i in range(args.tasks)]
            latencies: list[float] = []
            gate = asyncio.Semaphore(args.in_flight)

            async def one(task: AworldTask) -> None:
                async with gate:
                    start = time.perf_counter()
                    await client.submit_task(task)
                    latencies.append(time.perf_counter() - start)

            start = time.perf_counter()
            await asyncio.gather(*(one(t) for t in tasks))
            wall = time.perf_counter() - start
            print(
                f"submit, one task per request ({args.tasks} tasks, {args.in_flight} in flight): "
                f"{args.tasks / wall:,.0f} submits/s; latency p50 {1000 * statistics.median(latencies):.1f} ms, "
                f"p99 {1000 * percentile(latencies, 0.99):.1f} ms"
            )

            batched = [AworldTask(task_id=f"b{i}", agent_id="noop", agent_input=f"q{i}") for i in range(args.tasks)]
            client.batch_size = 500
            start = time.perf_counter()
            await client.submit_tasks(batched)
            wall = time.perf_counter() - start
            print(f"submit, batches of 500 ({args.tasks} tasks): {args.tasks / wall:,.0f} submits/s")
            start = time.perf_counter()
            await client.wait([t.task_id for t in tasks + batched], poll_s=0.2)
            print(f"  (the no-op agent then finished all {2 * args.tasks} in {time.perf_counter() - start:.1f} s more)")
    finally:
        server.stop()


async def collect(hosts: int, args: argparse.Namespace, work: Path, llm_url: str, store: str | None) -> float:
    from aworld_core.schemas import AworldTask
    from aworld_service.client import AworldTaskClient

    servers = []
    try:
        for i in range(hosts):
            url = store or f"sqlite:///{work / f'collect-{hosts}-{i}.sqlite'}"
            servers.append(
                Server(
                    ["--agents", f"calc={THIS_FILE}:calc_agent", "--store", url,
                     "--concurrency", str(args.concurrency), "--poll-s", "0.05"],
                    {"BENCH_LLM_URL": llm_url, "PYTHONPATH": str(REPO / "tests")},
                    work / f"collect-{hosts}-{i}.log",
                )
            )  # fmt: skip
        prefix = f"h{hosts}-{time.time_ns()}-"
        tasks = [
            AworldTask(task_id=f"{prefix}{i}", agent_id="calc", agent_input=f"add {i} and {i + 1}")
            for i in range(args.episodes)
        ]
        async with AworldTaskClient(know_hosts=[s.host for s in servers], batch_size=5) as client:
            await client.submit_tasks(tasks)
            states = await client.wait([t.task_id for t in tasks], poll_s=0.2)
        failed = [s for s in states if s.status.value != "success"]
        if failed:
            raise RuntimeError(f"{len(failed)} episodes did not succeed, e.g. {failed[0]}")
        begin = min(s.started_at for s in states if s.started_at)
        ends = sorted(s.ended_at for s in states if s.ended_at)
        overall = len(states) / (ends[-1] - begin)
        # steady state: episodes finished between the 10th and 90th percentile of completion
        # times (leaves out filling the hosts at the start and the last partial round)
        low, high = int(0.1 * len(ends)), int(0.9 * len(ends))
        steady = (high - low) / (ends[high] - ends[low])
        per_host: dict[str, int] = {}
        for s in states:
            per_host[s.host or "?"] = per_host.get(s.host or "?", 0) + 1
        print(
            f"collect with {hosts} host(s) x concurrency {args.concurrency}: {steady:,.1f} episodes/s steady "
            f"({overall:,.1f} overall: {len(states)} episodes in {ends[-1] - begin:.2f} s; "
            f"per host {sorted(per_host.values())})"
        )
        return steady
    finally:
        for server in servers:
            server.stop()


def postgres_url() -> str:
    url = os.environ.get("AWORLD_TEST_POSTGRES_URL")
    if url:
        return url
    done = subprocess.run(["bash", str(REPO / "scripts" / "postgres-for-tests.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"PostgreSQL did not start: {done.stderr[-1000:]}")
    return done.stdout.strip().splitlines()[-1]


async def part_collect(args: argparse.Namespace, work: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from support.openai_stub import OpenAIStub

    stub = OpenAIStub(stub_script, latency_s=args.llm_latency).start()
    try:
        store = None
        if args.store == "postgres":
            import psycopg

            base = postgres_url()
            name = f"aworld_bench_{os.getpid()}"
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name}")
                conn.execute(f"CREATE DATABASE {name}")
            store = base.rsplit("/", 1)[0] + f"/{name}"
        print(f"LLM stub latency {args.llm_latency * 1000:.0f} ms per call, 2 calls per episode; store: {args.store}")
        one = await collect(1, args, work, stub.base_url, store)
        three = await collect(3, args, work, stub.base_url, store)
        print(f"3 hosts / 1 host = {three / one:.2f}x steady-state episodes/s (target >= 2.7x)")
    finally:
        stub.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["all", "submit", "collect"], default="all")
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks submitted in part 1")
    parser.add_argument("--in-flight", type=int, default=64, help="concurrent submissions in part 1")
    parser.add_argument("--episodes", type=int, default=300, help="episodes collected per run in part 2")
    parser.add_argument("--concurrency", type=int, default=8, help="episodes each host runs at once")
    parser.add_argument("--llm-latency", type=float, default=0.25, help="seconds the stub takes per LLM call")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite",
                        help="part 2: one SQLite file per host, or one shared PostgreSQL queue")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aworld-bench-") as tmp:
        work = Path(tmp)
        if args.part in ("all", "submit"):
            asyncio.run(part_submit(args, work))
        if args.part in ("all", "collect"):
            asyncio.run(part_collect(args, work))


if __name__ == "__main__":
    main()
