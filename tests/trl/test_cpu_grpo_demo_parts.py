"""The demo's parts: tasks, reward, warm-start traces, and the calculator MCP server (real, loopback)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import httpx2
import pytest

from aworld_cpu_grpo_demo.calculator import calculate
from aworld_cpu_grpo_demo.reward import exact_answer
from aworld_cpu_grpo_demo.tasks import load_arith, parse_answer
from aworld_cpu_grpo_demo.traces import round_significant, warm_start_batch


def test_calculator_parses_strictly():
    assert calculate("1234*5678") == str(1234 * 5678)
    assert calculate(" 0012 + 7 ") == "19"  # sampled leading zeros are fine with int()
    for bad in ("2**10", "__import__('os')", "1/2", "12a", ""):
        with pytest.raises(ValueError, match="cannot evaluate"):
            calculate(bad)


def test_train_and_test_problems_never_overlap():
    train = load_arith(n=3000, seed=0)
    test = load_arith(n=100, seed=0, split="test")
    pairs = lambda samples: {(s.extra_info["a"], s.extra_info["b"]) for s in samples}  # noqa: E731
    assert not pairs(train) & pairs(test)
    assert test == load_arith(n=100, seed=0, split="test")  # deterministic
    assert all(1000 <= s.extra_info["a"] <= 9999 for s in train)
    assert test[0].ground_truth == str(test[0].extra_info["a"] * test[0].extra_info["b"])


def test_reward_pays_only_the_exact_product():
    assert exact_answer("arith", "<answer>7006652</answer>", "7006652", {}) == 1.0
    assert exact_answer("arith", "<answer>7010000</answer>", "7006652", {}) == 0.0
    assert exact_answer("arith", "7006652", "7006652", {}) == 0.0  # no tags, no credit
    assert parse_answer("<answer>1</answer> then <answer>2</answer>") == 2


def test_warm_start_mixture_matches_the_recipe():
    assert round_significant(7006652) == 7010000
    traces = warm_start_batch(random.Random(0), 4000)
    decisions = [t for t in traces if t.train_first_token]
    tool_first = sum(1 for t in decisions if t.messages[1].get("tool_calls")) / len(decisions)
    assert 0.2 < tool_first < 0.3  # 25% of trained first decisions call the tool
    extra = [t for t in traces if not t.train_first_token]
    assert extra and all(t.messages[1].get("tool_calls") for t in extra)


def test_calculator_server_prints_its_address_and_requires_the_token():
    proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator"], stdout=subprocess.PIPE,
                            text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert set(info) == {"ip", "port", "token"} and info["ip"] == "127.0.0.1"
        url = f"http://127.0.0.1:{info['port']}/mcp"
        response = httpx2.post(url, json={})
        assert response.status_code == 401 and "bearer" in response.text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_calculator_tool_over_real_mcp():
    from aworld_core.tools.mcp_client import MCPToolset
    from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers, parse_mcp_config, select_servers

    proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator"], stdout=subprocess.PIPE,
                            text=True)
    try:
        info = json.loads(proc.stdout.readline())
        config, names = get_agent_tool_env_and_servers(f"http://127.0.0.1:{info['port']}/mcp", info["token"])
        toolset = MCPToolset(select_servers(parse_mcp_config(config), names))
        specs = await toolset.open()
        try:
            assert [s.name for s in specs] == ["calc"]
            run = toolset.executor(specs[0])
            assert (await run({"expr": "1234*5678"})).content == "7006652"
            bad = await run({"expr": "1234/0"})
            assert bad.is_error and "cannot evaluate" in bad.content
        finally:
            await toolset.aclose()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_calculator_latency_delays_every_call_over_real_mcp():
    """``--latency-ms`` (the benchmarks' tools that take time): the same answers, each after the delay."""
    import time

    from aworld_core.tools.mcp_client import MCPToolset
    from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers, parse_mcp_config, select_servers

    proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator", "--latency-ms", "200"],
                            stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        config, names = get_agent_tool_env_and_servers(f"http://127.0.0.1:{info['port']}/mcp", info["token"])
        toolset = MCPToolset(select_servers(parse_mcp_config(config), names))
        specs = await toolset.open()
        try:
            assert [s.name for s in specs] == ["calc"] and "1234*5678" in specs[0].description
            run = toolset.executor(specs[0])
            started = time.perf_counter()
            assert (await run({"expr": "1234*5678"})).content == "7006652"
            assert time.perf_counter() - started >= 0.2
            assert (await run({"expr": "1234/0"})).is_error
        finally:
            await toolset.aclose()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_tool_latency_distributions():
    from aworld_cpu_grpo_demo.calculator import ToolLatency

    assert ToolLatency(300).draw_s() == 0.3 and not ToolLatency(0)
    gaia = ToolLatency(100, "gaia", seed=1)
    draws = sorted(gaia.draw_s() for _ in range(4000))
    assert 0.09 < draws[2000] < 0.11  # median 100 ms
    assert 0.3 < draws[3600] < 0.42  # one in ten over ~3.6 x the median
    assert max(draws) <= 2.0  # capped at 20 x
    a, b = ToolLatency(100, "gaia", seed=3), ToolLatency(100, "gaia", seed=3)
    assert [a.draw_s() for _ in range(5)] == [b.draw_s() for _ in range(5)]  # a run's delays repeat
    with pytest.raises(ValueError, match="distribution"):
        ToolLatency(1, "uniform")
    bad = subprocess.run([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator", "--latency-ms", "-1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--latency-ms" in bad.stderr


def test_warm_start_thread_probe_alternates_then_keeps_the_faster(monkeypatch):
    import os

    import torch

    from aworld_cpu_grpo_demo.warm_start import _ThreadProbe

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    probe = _ThreadProbe(rounds=2, every=10)
    assert [probe._threads_for(s) for s in range(7)] == [None, 1, 2, 1, 2, None, None]
    assert [probe._threads_for(s) for s in range(10, 16)] == [None, 1, 2, 1, 2, None]
    before = torch.get_num_threads()
    try:
        probe.before(1)
        probe.times = {1: [0.5, 0.5], 2: [0.2]}
        probe.after(4)  # the window's last step: two threads measured faster
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
