"""verl trains end to end on this CPU: ``python -m aworld_core.run --backend verl --config
examples/cpu_grpo_demo/job.yaml`` (the documented command, shortened by overrides) runs verl's own
``main_ppo`` (Ray, the V1 sync trainer, the FSDP2 actor, verl's reward and checkpoints) with the
``external_vllm`` rollout on vLLM's CPU build started from ``.venvs/vllm``, and the demo's agent,
MCP calculator, data and reward.

* the reward rises past the reference band (``cpu_e2e_reference.json``: measured curves, fixed
  seeds, the tolerance and why);
* after every weight sync the weights in vLLM are the trained policy: verl's own
  ``training/rollout_probs_diff_max`` (|p_actor - p_vLLM| over every trained token, the actor's
  teacher-forced probabilities of vLLM's sampled tokens) stays below 1e-3 on every step;
* trained ids are vLLM's sampled ids: every trained run of the rows verl stored for the update
  (``aworld_token_log``) is one generation the rollout server's proxy recorded, ids and logprobs;
* checkpoint, ``metrics.jsonl``, ``metrics.png`` and held-out accuracy before/after are written,
  and the server the launch started is gone;
* ``resume`` continues from the last checkpoint: the step counter and the optimizer state;
* a dead MCP server stops the run after ``rollout.max_failed_steps`` steps in which nothing trained,
  naming the first error, and the server is stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")
pytest.importorskip("aworld_cpu_grpo_demo")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEMO_JOB = REPO / "examples" / "cpu_grpo_demo" / "job.yaml"
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"
REFERENCE = json.loads((Path(__file__).resolve().parent / "cpu_e2e_reference.json").read_text())
RUN = REFERENCE["run"]
PROBS_DIFF_TOLERANCE = 1e-3  # float32 on both sides: measured max 5e-5 (ops order differs)


def _cli(*args: str, timeout: float = 2400) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWORLD_OUTPUT_ROOT": os.environ.get("AWORLD_OUTPUT_ROOT", "")}
    return subprocess.run([sys.executable, "-m", "aworld_core.run", *args], capture_output=True, text=True,
                          timeout=timeout, env={k: v for k, v in env.items() if v != ""})


def _overrides(model: Path, out: Path, steps: int, **extra: Any) -> list[str]:
    """The demo job, shortened: the model built here, the held-out set cut, the step budget."""
    base = {
        "output_dir": str(out),
        "model.path": str(model),
        "test_dataset.options.n": RUN["heldout_tasks"],
        "backends.verl.trainer.total_training_steps": steps,
        "backends.verl.trainer.save_freq": RUN["save_freq"],
        "backends.verl.aworld.rollout_server.python": str(VLLM_PYTHON),
        "backends.verl.aworld.summary_window": RUN["window"],
        "backends.verl.actor_rollout_ref.rollout.custom.external_vllm.record": str(out / "vllm_record.jsonl"),
        "backends.verl.trainer.v1.sampler.sampler_kwargs.aworld_token_log": str(out / "trained_tokens.jsonl"),
        **extra,
    }
    return [f"{key}={value}" for key, value in base.items()]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _servers_of(model: Path) -> list[int]:
    """vLLM server processes serving ``model`` (the launch must leave none)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if "vllm.entrypoints.openai.api_server" in cmd and str(model) in cmd:
            found.append(proc.info["pid"])
    return found


@pytest.fixture(scope="module")
def demo_model() -> Path:
    """The demo's tokenizer and warm start on the 0.83 M-parameter Qwen2 (``new_model``'s default
    shape; ``make demo`` builds a narrower one since 2026-11-27), with the recipe pinned in the
    reference (``warm_start``), so the reference holds whatever the demo's own defaults become. Built once per recipe and demo code under ``build/test-models`` (``e2e_model``;
    ``make test`` builds it in the background while the core suite runs)."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON.parent.parent} (make test builds it)")
    prebuilt = os.environ.get("AWORLD_VERL_E2E_MODEL")  # a model built with this recipe elsewhere
    if prebuilt:
        return Path(prebuilt)
    from e2e_model import cached_model

    return cached_model()


@pytest.fixture(scope="module")
def trained(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("verl-e2e-run") / "out"
    started = time.perf_counter()
    proc = _cli("--backend", "verl", "--config", str(DEMO_JOB), *_overrides(demo_model, out, RUN["steps"]))
    seconds = time.perf_counter() - started
    print(f"verl main_ppo run: {seconds:.0f}s (load {open('/proc/loadavg').read().split()[0]})", flush=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"out": out, "stdout": proc.stdout, "seconds": seconds, "model": demo_model}


def test_the_demo_trains_through_verls_main_ppo(trained):
    out = trained["out"]
    rows = _rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, RUN["steps"] + 1))
    rewards = [r["reward"] for r in rows]
    window = RUN["window"]
    first, last = sum(rewards[:window]) / window, sum(rewards[-window:]) / window
    band = REFERENCE["band"]
    print(f"reward curve: {[round(r, 3) for r in rewards]}; first {first:.3f} -> last {last:.3f}", flush=True)
    assert last - first >= band["min_gain"], (rewards, band)
    assert last >= band["min_last"], (rewards, band)
    # weights in vLLM after each sync == the trained policy (verl's rollout-vs-actor check)
    diffs = [r["training/rollout_probs_diff_max"] for r in rows]
    assert max(diffs) < PROBS_DIFF_TOLERANCE, diffs
    # the run's promises: checkpoint, metrics, plot, before/after accuracy, summary
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    assert summary["steps"] == RUN["steps"] and "eval_before/accuracy" in summary and "eval_after/accuracy" in summary
    assert summary["eval_after/tool_use_rate"] >= summary["eval_before/tool_use_rate"]
    assert any((out / "checkpoint").glob("*.safetensors")) and (out / "checkpoint" / "tokenizer.json").is_file()
    assert (out / "metrics.png").stat().st_size > 0
    assert (out / "checkpoints" / f"global_step_{RUN['steps']}" / "actor").is_dir()
    assert "held-out accuracy" in trained["stdout"]
    assert not _servers_of(trained["model"]), "the launch left its vLLM server running"


def test_trained_ids_are_the_ids_vllm_sampled(trained):
    """Each trained run of ids is a generation vLLM returned under the policy version the step
    trained from (step S trains what the weights of step S-1 sampled), with its logprobs."""
    out = trained["out"]
    sampled: dict[tuple[int, tuple[int, ...]], list[list[float]]] = {}
    for r in _rows(out / "vllm_record.jsonl"):
        sampled.setdefault((r["global_steps"], tuple(r["token_ids"])), []).append(r["logprobs"])
    trained_rows = _rows(out / "trained_tokens.jsonl")
    assert {r["step"] for r in trained_rows} == set(range(1, RUN["steps"] + 1))
    runs = 0
    for row in trained_rows:
        ids, mask, logprobs = row["ids"], row["mask"], row["logprobs"]
        i = 0
        while i < len(ids):
            if not mask[i]:
                i += 1
                continue
            j = i
            while j < len(ids) and mask[j]:
                j += 1
            key = (row["step"] - 1, tuple(ids[i:j]))
            assert key in sampled, f"trained ids {key[1]} (step {row['step']}) are no generation vLLM returned"
            assert min(max(abs(a - b) for a, b in zip(logprobs[i:j], c, strict=True)) for c in sampled[key]) < 1e-5
            runs += 1
            i = j
    assert runs >= RUN["steps"] * 8  # every step trains several generations


def test_resume_continues_the_step_counter_and_the_optimizer(trained):
    """A second launch of the same job with a larger budget continues from the last checkpoint:
    new steps after the old ones, and the optimizer's step count carries on (AdamW's ``step``
    in the actor checkpoint counts every update since the first run's first step)."""
    import torch

    out, extra = trained["out"], RUN["resume_steps"]
    total = RUN["steps"] + extra
    proc = _cli("--backend", "verl", "--config", str(DEMO_JOB),
                *_overrides(trained["model"], out, total, **{"backends.verl.aworld.eval_before": False,
                                                             "backends.verl.aworld.eval_after": False}))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    text = proc.stdout + proc.stderr
    assert f"global_step_{RUN['steps']}" in text  # verl: "Resuming from .../global_step_N"
    rows = _rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, total + 1))
    optim = next((out / "checkpoints" / f"global_step_{total}" / "actor").glob("optim_world_size_1_rank_0.pt"))
    state = torch.load(optim, weights_only=False)
    steps = {int(s["step"]) for s in state["state"].values()} if "state" in state else set()
    if not steps:  # an optimizer wrapped by verl's scheduler state
        steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
    assert steps == {total}, steps


def test_a_dead_mcp_server_stops_the_run_with_the_first_error(demo_model, tmp_path):
    """No calculator: every episode fails at its first tool call; after max_failed_steps (1 here)
    all-failed steps verl's trainer stops with the first error, and the launch stops the server."""
    from aworld_core.vllm_server import free_port

    out = tmp_path / "out"
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    env = {**os.environ, "MCP_SERVER_URL": dead, "MCP_SERVER_TOKEN": "t"}
    args = ["--backend", "verl", "--config", str(DEMO_JOB),
            *_overrides(demo_model, out, 3, **{"environment": "null", "rollout.max_failed_steps": 1,
                                                 "backends.verl.aworld.eval_before": False})]
    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", *args], capture_output=True, text=True,
                          timeout=1800, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-4000:]
    assert "no episode of this training step trained" in text and "every episode failed" in text.lower(), text[-4000:]
    assert "backend 'verl' command failed" in proc.stderr
    assert not (out / "checkpoint").exists()
    assert not _servers_of(demo_model), "the launch left its vLLM server running after the failure"
