"""Framework overhead per episode, against the ideal and against upstream ``aworld==0.3.2``.

An episode is 2 LLM calls + 1 MCP tool call: a deterministic OpenAI-compatible stub answers the
first call with a call to the ``lookup`` tool and the second with a final answer, each after
``--llm-latency-ms``; ``lookup`` runs on a real MCP server (official SDK, streamable HTTP) and
answers after ``--tool-latency-ms``. The stub and the MCP server are separate processes on
127.0.0.1, so the CPU measured here is the framework's own: the process that runs the episodes
(agent loop, LLM client, MCP client). Their CPU is printed on the side.

    .venv/bin/python benchmarks/rollout_overhead.py                 # default run, ~2-3 minutes
    .venv/bin/python benchmarks/rollout_overhead.py --llm-latency-ms 100 --tool-latency-ms 50 \\
        --concurrency 1,32,256 --rounds 2 --no-upstream

For each concurrency it first runs ``--level-warmup-rounds`` rounds (new connections; printed
on one line), then measures: wall time per episode (mean, p50, p95) against the ideal
(2 x LLM latency + tool latency), framework CPU per episode and per LLM turn, and throughput
against the ideal (concurrency / ideal episode time). Side by side it prints the HTTP floor: the
CPU of the episode's 3 requests sent as bare aiohttp POSTs (LLM stub, MCP ``tools/call``, LLM
stub) at the same concurrency and latency (what merely sending, waiting for and reading 3
answers costs this process on this machine). ``--breakdown`` (on by default) runs the MCP part alone, through aworld-core's toolset
and through the bare SDK (one reused session, and a session per episode), to split the CPU into
the MCP part and the rest of the framework.

Upstream: the same episode runs with ``aworld==0.3.2`` in its own environment
(``.venvs/upstream-aworld``, recipe in ``benchmarks/upstream-env.txt``; created on first use
unless ``--no-upstream``), in a scratch directory (it writes ``./logs``), and the ratios are
printed. Without network the environment cannot be created: the comparison is skipped with a
message saying so.

Figures only; nothing is asserted (benchmarks are not tests).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_procs import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM_ENV = ROOT / ".venvs" / "upstream-aworld"
UPSTREAM_RECIPE = Path(__file__).resolve().parent / "upstream-env.txt"
LLM_TURNS = 2  # per episode: tool call, then final answer


@dataclass
class Level:
    """What one concurrency level measured."""

    concurrency: int
    episodes: int
    wall_s: float
    cpu_s: float
    episode_wall_s: list[float]
    ok: int
    failures: list[str] = field(default_factory=list)
    stub_cpu_s: float | None = None
    mcp_server_cpu_s: float | None = None
    load: tuple[float, float] = (0.0, 0.0)
    mcp_cpu_s: float | None = None  # the MCP part alone, through aworld-core's toolset, per episode
    sdk_cpu_s: float | None = None  # the same calls through the bare SDK, one reused session
    sdk_episode_cpu_s: float | None = None  # ... and through the bare SDK, a session per episode
    floor_cpu_s: float | None = None  # the episode's 3 requests as bare aiohttp POSTs, per episode
    raw_floor_cpu_s: float | None = None  # ... and over a minimal asyncio HTTP/1.1 client (_raw_http)

    @property
    def throughput(self) -> float:
        return self.episodes / self.wall_s if self.wall_s > 0 else 0.0


# -- aworld-core --------------------------------------------------------------------------------


def build_agent(llm_url: str, mcp_url: str) -> Any:
    from aworld_core import Agent, AgentConfig

    return Agent(
        "bench_agent",
        system_prompt="Answer with the lookup tool.",
        conf=AgentConfig(llm_base_url=llm_url, llm_model_name="bench-model", llm_api_key="bench-key", max_steps=4),
        mcp_config={"mcpServers": {"bench": {"type": "streamable-http", "url": mcp_url}}},
    )


async def run_level(agent: Any, concurrency: int, episodes: int) -> Level:
    """``episodes`` episodes, ``concurrency`` at a time, as a backend's rollout loop runs them."""
    from aworld_core import Runners
    from aworld_core.schemas import EpisodeStatus

    walls: list[float] = []
    failures: list[str] = []
    ok = 0
    queue = iter(range(episodes))

    async def worker() -> None:
        nonlocal ok
        for i in queue:
            start = time.perf_counter()
            episode = await Runners.run(f"What is fact number {i}?", agent=agent)
            walls.append(time.perf_counter() - start)
            answer = episode.final_answer or ""
            if episode.status == EpisodeStatus.SUCCESS and "42" in answer and len(episode.steps) == LLM_TURNS:
                ok += 1
            elif len(failures) < 5:
                failures.append(f"{episode.status.value}: {episode.error or answer[:120]}")

    gc.collect()
    load0 = os.getloadavg()[0]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return Level(concurrency, episodes, wall, cpu, walls, ok, failures, load=(load0, os.getloadavg()[0]))


async def mcp_only(mcp_url: str, concurrency: int, episodes: int, *, how: str) -> float:
    """CPU per episode of the episode's MCP part alone: its tools, one call, done.

    ``how``: ``toolset`` (aworld-core: what an episode does), ``sdk`` (the bare SDK with one
    session reused for every call, its default HTTP client) or ``sdk-episode`` (the bare SDK, a
    session per episode as its documentation shows, with aworld-core's TLS context).
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from aworld_core.tools.mcp_client import MCPToolset
    from aworld_core.tools.mcp_config import parse_mcp_config, select_servers
    from aworld_core.tools.mcp_session import ssl_context

    servers = select_servers(parse_mcp_config({"mcpServers": {"bench": {"type": "streamable-http", "url": mcp_url}}}), None)

    async def through_toolset(i: int, _client: Any) -> None:
        toolset = MCPToolset(servers, call_timeout_s=60, headers={"X-Episode-Id": f"ep-{i}"})
        try:
            specs = await toolset.open()
            outcome = await toolset.executor(specs[0])({"query": f"fact {i}"})
            if outcome.is_error:
                raise RuntimeError(outcome.content)
        finally:
            await toolset.aclose()

    async def through_sdk(i: int, client: Any) -> None:
        result = await client.call_tool("lookup", {"query": f"fact {i}"})
        if result.is_error:
            raise RuntimeError(str(result.content))

    async def through_sdk_episode(i: int, _client: Any) -> None:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300), verify=ssl_context()) as http:
            async with Client(streamable_http_client(mcp_url, http_client=http), read_timeout_seconds=60) as client:
                await client.list_tools()
                await through_sdk(i, client)

    one = {"toolset": through_toolset, "sdk": through_sdk, "sdk-episode": through_sdk_episode}[how]
    queue = iter(range(episodes))
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300), limits=limits) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http), read_timeout_seconds=60) as shared:
            await shared.list_tools()

            async def worker() -> None:
                for i in queue:
                    await one(i, shared)

            gc.collect()
            cpu0 = time.process_time()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return (time.process_time() - cpu0) / episodes


async def http_floor(llm_url: str, mcp_url: str, concurrency: int, episodes: int, *, raw: bool = False) -> float:
    """CPU per episode of the episode's 3 requests as bare aiohttp POSTs, in the episode's order
    and at its concurrency: the LLM call to the stub, the ``tools/call`` to the MCP server (with
    the 2026 protocol's headers), the second LLM call. What merely sending, waiting for and
    reading those 3 answers costs this process on this machine (the MCP server's answer comes
    in two TCP segments, headers then body: a wake-up of its own). ``raw``: the same requests over
    a minimal asyncio HTTP/1.1 client instead (``_raw_http``): the floor without aiohttp."""
    import aiohttp
    from _raw_http import RawClient

    body = json.dumps({
        "model": "bench-model",
        "messages": [{"role": "system", "content": "Answer with the lookup tool."},
                     {"role": "user", "content": "What is fact number 1?"}],
        "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look up a fact.",
                   "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}],
    }).encode()  # fmt: skip
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench-key"}
    version = "2026-07-28"
    tool_body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "lookup", "arguments": {"query": "fact 1"},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": version,
                             "io.modelcontextprotocol/clientInfo": {"name": "floor", "version": "0"},
                             "io.modelcontextprotocol/clientCapabilities": {}}},
    }).encode()  # fmt: skip
    tool_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": version, "Mcp-Method": "tools/call", "Mcp-Name": "lookup"}  # fmt: skip
    queue = iter(range(episodes))
    rawclient = RawClient() if raw else None
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post(url: str, data: bytes, sent: dict[str, str]) -> None:
            if rawclient is not None:
                _, content = await rawclient.post(url, data, sent)
                answer = json.loads(content)
            else:
                async with session.post(url, data=data, headers=sent) as response:
                    answer = json.loads(await response.read())
            if "result" not in answer and "choices" not in answer:
                raise RuntimeError(f"floor request to {url} failed: {answer}")

        async def one_episode() -> None:
            await post(f"{llm_url}/chat/completions", body, headers)
            await post(mcp_url, tool_body, tool_headers)
            await post(f"{llm_url}/chat/completions", body, headers)

        async def worker() -> None:
            for _ in queue:
                await one_episode()

        await asyncio.gather(*(one_episode() for _ in range(min(concurrency, 8))))  # connections
        gc.collect()
        cpu0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        spent = (time.process_time() - cpu0) / episodes
    if rawclient is not None:
        rawclient.close()
    return spent


async def run_framework(args: argparse.Namespace, llm: ServerProcess, mcp: ServerProcess) -> list[Level]:
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}/v1", f"http://127.0.0.1:{mcp.port}/mcp"
    agent = build_agent(llm_url, mcp_url)
    levels = []
    try:
        await run_level(agent, 1, args.warmup)  # imports, connection pools
        if args.breakdown:
            for how in ("sdk", "sdk-episode"):
                await mcp_only(mcp_url, 1, 2, how=how)
        for concurrency in args.concurrency:
            if args.level_warmup_rounds:
                cold = await run_level(agent, concurrency, concurrency * args.level_warmup_rounds)
                print_cold(cold, args)
            episodes = max(concurrency * args.rounds, args.min_episodes)
            stub0, server0 = llm.cpu_s(), mcp.cpu_s()
            level = await run_level(agent, concurrency, episodes)
            stub1, server1 = llm.cpu_s(), mcp.cpu_s()
            if stub0 is not None and stub1 is not None:
                level.stub_cpu_s = (stub1 - stub0) / episodes
            if server0 is not None and server1 is not None:
                level.mcp_server_cpu_s = (server1 - server0) / episodes
            n = min(episodes, 256)
            level.floor_cpu_s = min([await http_floor(llm_url, mcp_url, concurrency, n) for _ in range(2)])
            level.raw_floor_cpu_s = min([await http_floor(llm_url, mcp_url, concurrency, n, raw=True)
                                         for _ in range(2)])
            if args.breakdown:
                # alternated and repeated, the minimum of each kept: CPU time on a shared machine
                # only ever reads high (contention), so the least noisy estimate is the lowest
                runs: dict[str, list[float]] = {"toolset": [], "sdk": [], "sdk-episode": []}
                for _ in range(2):
                    for how, values in runs.items():
                        values.append(await mcp_only(mcp_url, concurrency, n, how=how))
                level.mcp_cpu_s = min(runs["toolset"])
                level.sdk_cpu_s = min(runs["sdk"])
                level.sdk_episode_cpu_s = min(runs["sdk-episode"])
            levels.append(level)
            print_level(level, args, "aworld-core")
        if args.profile:
            await profile_level(agent, args.profile, max(args.profile * args.rounds, args.min_episodes))
    finally:
        await agent.aclose()
        from aworld_core.tools.mcp_client import close_shared_sessions

        await close_shared_sessions()
    return levels


# which part of the stack a profiled function belongs to (by top-level package)
GROUPS = {
    "aworld-core": ("aworld_core",),
    "LLM HTTP client (aiohttp)": ("aiohttp", "yarl", "multidict", "frozenlist", "aiosignal", "propcache",
                                  "aiohappyeyeballs"),
    "MCP SDK (mcp, httpx2, httpcore2, h11, anyio, jsonschema, ...)": (
        "mcp", "mcp_types", "httpx2", "httpcore2", "h11", "anyio", "sniffio", "jsonschema", "referencing",
        "rpds", "jsonschema_specifications", "opentelemetry", "httpx_sse", "attr", "attrs", "truststore",
    ),
    "pydantic (both)": ("pydantic", "pydantic_core"),
}  # fmt: skip


def _group(filename: str) -> str | None:
    """The stack part of a profiled function, or None for the standard library and builtins."""
    if "aworld_core" in filename.replace("\\", "/").split("/"):
        return "aworld-core"
    if "site-packages" in filename:
        package = filename.replace("\\", "/").split("site-packages/", 1)[1].split("/", 1)[0]
        for group, packages in GROUPS.items():
            if package in packages:
                return group
        return f"other ({package})"
    return None


async def profile_level(agent: Any, concurrency: int, episodes: int) -> None:
    """Run one level under cProfile (CPU-time clock) and split the CPU by part of the stack.

    Standard-library and builtin functions are charged to the part that called them (one level
    up) when it is a package; what the event loop itself runs stays "asyncio + stdlib".
    Profiling slows everything down evenly, so only the shares are printed.
    """
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    level = await run_level(agent, concurrency, episodes)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, own, _cum, callers) in stats.items():
        group = _group(filename)
        if group is not None:
            shares[group] = shares.get(group, 0.0) + own
            continue
        charged = 0.0
        for (caller_file, _l, _n), caller_times in callers.items():
            caller_group = _group(caller_file)
            if caller_group is not None:
                shares[caller_group] = shares.get(caller_group, 0.0) + caller_times[2]
                charged += caller_times[2]
        shares["asyncio + stdlib (event loop, sockets, json)"] = (
            shares.get("asyncio + stdlib (event loop, sockets, json)", 0.0) + max(own - charged, 0.0)
        )
    total = sum(shares.values()) or 1.0
    print(f"\n[aworld-core] CPU by part of the stack, concurrency {concurrency}, {level.ok}/{episodes} ok (cProfile):")
    for group, value in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * value / total:5.1f}%  {group}")


# -- upstream aworld 0.3.2 ------------------------------------------------------------------------


def upstream_python() -> str | None:
    """The upstream environment's interpreter, creating the environment when missing; None to skip."""
    python = UPSTREAM_ENV / "bin" / "python"
    check = [str(python), "-c", "import importlib.metadata as m; print(m.version('aworld'))"]
    if python.exists():
        found = subprocess.run(check, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == "0.3.2":
            return str(python)
        print(f"upstream: {UPSTREAM_ENV} exists but has no aworld 0.3.2 ({found.stderr.strip()[-200:]}); rebuilding it")
    print(
        f"upstream: creating {UPSTREAM_ENV} from {UPSTREAM_RECIPE.name} (python -m venv, pip install aworld==0.3.2 "
        f"'pydantic<2.14' scipy); this needs the package index and takes a few minutes",
        flush=True,
    )
    steps = [
        [_base_python(), "-m", "venv", "--clear", str(UPSTREAM_ENV)],
        [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "-q", "-r", str(UPSTREAM_RECIPE)],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-800:]
            print(
                f"upstream: skipped, the environment could not be built ({' '.join(step[-3:])} failed with code "
                f"{done.returncode}; no network or no package index?):\n{tail}\n"
                f"Build it by hand with the recipe in {UPSTREAM_RECIPE} and run with --upstream again."
            )
            return None
    found = subprocess.run(check, capture_output=True, text=True)
    if found.returncode != 0:
        print(f"upstream: skipped, aworld does not import in the new environment: {found.stderr.strip()[-800:]}")
        return None
    return str(python)


def _base_python() -> str:
    """The interpreter our venv was made from, so the new venv does not nest in ours."""
    base = getattr(sys, "_base_executable", None)
    return base if base and Path(base).exists() else sys.executable


def run_upstream(python: str, args: argparse.Namespace, llm: ServerProcess, mcp: ServerProcess) -> list[Level]:
    """All upstream levels in one subprocess (its import alone takes seconds)."""
    scratch = Path(tempfile.mkdtemp(prefix="aworld-upstream-bench-"))  # upstream writes ./logs here
    plan = [(c, max(c * args.upstream_rounds, args.upstream_min_episodes)) for c in args.upstream_concurrency]
    command = [
        python,
        str(Path(__file__).resolve().parent / "_upstream_episode.py"),
        "--llm-url", f"http://127.0.0.1:{llm.port}/v1",
        "--mcp-url", f"http://127.0.0.1:{mcp.port}/mcp",
        "--levels", ",".join(f"{c}:{n}" for c, n in plan),
        "--warmup", "1",
    ]  # fmt: skip
    print(f"\nupstream: running {', '.join(f'{n} episodes at concurrency {c}' for c, n in plan)} in {scratch}", flush=True)
    err_path = scratch / "stderr.log"  # a file, not a pipe: nothing reads stderr while it runs
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(command, cwd=scratch, stdout=subprocess.PIPE, stderr=err_file, text=True)
    levels: list[Level] = []
    deadline = time.monotonic() + args.upstream_timeout_s
    stub0, server0, load0 = llm.cpu_s(), mcp.cpu_s(), os.getloadavg()[0]
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("AWORLD_BENCH_IMPORT "):
            print(f"  (import aworld.runner took {float(line.split()[1]):.1f} s; not counted)")
            stub0, server0, load0 = llm.cpu_s(), mcp.cpu_s(), os.getloadavg()[0]
        if not line.startswith("AWORLD_BENCH_RESULT "):
            continue
        data = json.loads(line.split(" ", 1)[1])
        stub1, server1 = llm.cpu_s(), mcp.cpu_s()
        level = Level(
            data["concurrency"],
            data["episodes"],
            data["wall_s"],
            data["cpu_s"],
            data["episode_wall_s"],
            data["ok"],
            data["errors"],
            load=(load0, os.getloadavg()[0]),
        )
        n = data["episodes"] + (1 if not levels else 0)  # the warm-up episode ran in the first window
        if stub0 is not None and stub1 is not None:
            level.stub_cpu_s = (stub1 - stub0) / n
        if server0 is not None and server1 is not None:
            level.mcp_server_cpu_s = (server1 - server0) / n
        stub0, server0, load0 = stub1, server1, os.getloadavg()[0]
        levels.append(level)
        print_level(level, args, "upstream aworld 0.3.2")
        if data["ok"] < data["episodes"]:
            print(f"  upstream sample answer: {data['sample_answer']!r}")
        if time.monotonic() > deadline:
            break
    try:
        proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print(f"upstream: stopped after --upstream-timeout-s {args.upstream_timeout_s:g} s")
    if proc.returncode not in (0, None) or len(levels) < len(plan):
        err = err_path.read_text(errors="replace")
        print(f"upstream: the run ended with code {proc.returncode} after {len(levels)} of {len(plan)} levels:\n"
              f"{err.strip()[-1500:]}")  # fmt: skip
    print(f"  (upstream logs: {scratch / 'logs'})")
    return levels


# -- report -------------------------------------------------------------------------------------


def ideal_s(args: argparse.Namespace) -> float:
    return (LLM_TURNS * args.llm_latency_ms + args.tool_latency_ms) / 1000.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def ms(seconds: float | None) -> str:
    return "   n/a" if seconds is None else f"{seconds * 1000:7.2f}"


def print_level(level: Level, args: argparse.Namespace, who: str) -> None:
    ideal = ideal_s(args)
    walls = level.episode_wall_s
    mean = statistics.fmean(walls) if walls else float("nan")
    cpu_ep = level.cpu_s / level.episodes
    ideal_tp = level.concurrency / ideal
    print(
        f"\n[{who}] concurrency {level.concurrency}: {level.episodes} episodes, {level.ok} ok, "
        f"load avg {level.load[0]:.1f} -> {level.load[1]:.1f}"
    )
    print(
        f"  wall/episode  mean {mean * 1000:8.1f} ms  p50 {pct(walls, 0.5) * 1000:8.1f}  p95 {pct(walls, 0.95) * 1000:8.1f}"
        f"   ideal {ideal * 1000:.0f} ms   mean/ideal {mean / ideal:5.3f}x  (target <= 1.10x)"
    )
    print(
        f"  framework CPU  {ms(cpu_ep)} ms/episode  {ms(cpu_ep / LLM_TURNS)} ms/LLM turn (target <= 2 ms)"
        f"   [stub LLM {ms(level.stub_cpu_s)} ms/ep, MCP server {ms(level.mcp_server_cpu_s)} ms/ep, other processes]"
    )
    print(
        f"  throughput    {level.throughput:8.2f} episodes/s   ideal {ideal_tp:8.2f}   "
        f"{100 * level.throughput / ideal_tp:5.1f}% of ideal (target >= 90% at 256)"
    )
    total_ep = cpu_ep + (level.stub_cpu_s or 0.0) + (level.mcp_server_cpu_s or 0.0)
    cores = os.cpu_count() or 1
    print(
        f"  CPU used      the framework process ran on {level.cpu_s / level.wall_s:5.3f} cores on average; the 3 "
        f"processes need {total_ep * 1000:.1f} ms CPU per episode, so {cores} idle cores would cap throughput at "
        f"{cores / total_ep:7.1f} episodes/s"
    )
    if level.floor_cpu_s is not None:
        print(
            f"  HTTP floor    {ms(level.floor_cpu_s)} ms/episode: the episode's {LLM_TURNS + 1} requests as bare aiohttp POSTs "
            f"(same concurrency and latency); the framework spends {ms(cpu_ep - level.floor_cpu_s)} ms/episode "
            f"({ms((cpu_ep - level.floor_cpu_s) / LLM_TURNS)} ms/LLM turn) beyond it"
        )
    if level.raw_floor_cpu_s is not None:
        print(
            f"  raw floor     {ms(level.raw_floor_cpu_s)} ms/episode ({ms(level.raw_floor_cpu_s / LLM_TURNS)} ms/LLM turn): "
            f"the same requests over a minimal asyncio HTTP/1.1 client (benchmarks/_raw_http.py), no aiohttp"
        )
    if level.mcp_cpu_s is not None and level.sdk_cpu_s is not None:
        rest = cpu_ep - level.mcp_cpu_s
        print(
            f"  CPU split     MCP part {ms(level.mcp_cpu_s)} ms/episode through aworld-core (bare SDK for the same call: "
            f"{ms(level.sdk_cpu_s)} reusing one session, {ms(level.sdk_episode_cpu_s)} with a session per episode) | "
            f"rest of aworld-core (loop, LLM client, records) {ms(rest)} ms/episode, {ms(rest / LLM_TURNS)} ms/LLM turn"
        )
    if level.ok < level.episodes:
        print(f"  WARNING: {level.episodes - level.ok} of {level.episodes} episodes did not finish as planned; "
              f"the figures above do not describe the episode this benchmark defines")  # fmt: skip
    for failure in level.failures:
        print(f"  failed: {failure}")


def print_cold(level: Level, args: argparse.Namespace) -> None:
    walls = level.episode_wall_s
    mean = statistics.fmean(walls) if walls else float("nan")
    ideal_tp = level.concurrency / ideal_s(args)
    print(
        f"\n[aworld-core] concurrency {level.concurrency}, warm-up round (new connections; not in the figures below): "
        f"{level.ok}/{level.episodes} ok, wall/episode mean {mean * 1000:.1f} ms ({mean / ideal_s(args):.3f}x ideal), "
        f"{100 * level.throughput / ideal_tp:.1f}% of ideal throughput, {level.cpu_s / level.episodes * 1000:.2f} ms CPU/episode"
    )


def print_ratios(ours: list[Level], theirs: list[Level]) -> None:
    by_c = {level.concurrency: level for level in ours}
    rows = [(t, by_c[t.concurrency]) for t in theirs if t.concurrency in by_c]
    if not rows:
        return
    print("\nupstream aworld 0.3.2 / aworld-core (higher = aworld-core better):")
    for up, me in rows:
        up_wall, me_wall = statistics.fmean(up.episode_wall_s), statistics.fmean(me.episode_wall_s)
        print(
            f"  concurrency {up.concurrency:4d}: CPU/episode {up.cpu_s / up.episodes / (me.cpu_s / me.episodes):6.1f}x"
            f"   wall/episode {up_wall / me_wall:5.2f}x   throughput (aworld-core/upstream) "
            f"{me.throughput / up.throughput:5.2f}x"
        )


def parse_ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers like 1,32,256, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm-latency-ms", type=float, default=1000.0, help="the stub's latency per LLM call")
    parser.add_argument("--tool-latency-ms", type=float, default=500.0, help="the MCP tool's own latency")
    parser.add_argument("--concurrency", type=parse_ints, default=[1, 32, 256], help="e.g. 1,32,256")
    parser.add_argument("--rounds", type=int, default=2, help="episodes per level = concurrency x rounds ...")
    parser.add_argument("--min-episodes", type=int, default=8, help="... but at least this many")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured episodes first")
    parser.add_argument("--level-warmup-rounds", type=int, default=1,
                        help="rounds at each concurrency before measuring it (printed apart; 0: none)")  # fmt: skip
    parser.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the MCP part alone (aworld-core's toolset and the bare SDK)")  # fmt: skip
    parser.add_argument("--profile", type=int, default=0, metavar="CONCURRENCY",
                        help="also run this concurrency under cProfile and split the CPU by package")  # fmt: skip
    parser.add_argument("--upstream", action=argparse.BooleanOptionalAction, default=True,
                        help="compare with aworld==0.3.2 (creates .venvs/upstream-aworld when missing)")  # fmt: skip
    parser.add_argument("--upstream-concurrency", type=parse_ints, default=[1, 32])
    parser.add_argument("--upstream-rounds", type=int, default=1)
    parser.add_argument("--upstream-min-episodes", type=int, default=3)
    parser.add_argument("--upstream-timeout-s", type=float, default=600.0)
    args = parser.parse_args()

    print(
        f"episode: {LLM_TURNS} LLM calls ({args.llm_latency_ms:g} ms each) + 1 MCP tool call ({args.tool_latency_ms:g} ms);"
        f" ideal {ideal_s(args) * 1000:.0f} ms per episode; {os.cpu_count()} CPUs, load avg "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    python = upstream_python() if args.upstream else None
    if not args.upstream:
        print("upstream: skipped (--no-upstream)")
    llm = ServerProcess("_stub_llm.py", "--latency-ms", str(args.llm_latency_ms), name="stub LLM")
    mcp = ServerProcess("_mcp_tool_server.py", "--latency-ms", str(args.tool_latency_ms), name="MCP tool server")
    with llm, mcp:
        ours = asyncio.run(run_framework(args, llm, mcp))
        theirs = run_upstream(python, args, llm, mcp) if python else []
    print_ratios(ours, theirs)
    print("\nload avg at the end: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
