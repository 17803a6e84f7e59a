"""AReaL's own trainer end to end on a CPU, through the documented command.

``python -m aworld_core.run --backend areal --config examples/cpu_grpo_demo/job.yaml`` (overrides:
the test's model, a short run, a scripted reward) runs ``aworld_areal.train`` in AReaL's SPMD mode:
``PPOTrainer`` with its FSDP engine on gloo (torch 2.13 CPU), its asynchronous ``WorkflowExecutor``
(``max_head_offpolicyness: 2``), ``ArealVllmEngine`` on a plain vLLM server (the CPU build, from
``.venvs/vllm``), disk weight updates after every step, the decoupled PPO loss on the logprobs vLLM
sampled. One vLLM server serves the module (``vllm_server.url``); the managed start/stop is
``test_example_cpu.py``'s. AReaL's trainer runs in its own process: what it trains on is read back
from its outputs (``metrics.jsonl``, ``trajectories.jsonl``, per-step HF checkpoints) and from a
recorder of its PPO actor's advantage batches (``trainer_probe/sitecustomize.py``).

The task is the demo's ("What is A * B?" with the calculator over MCP, each call 1.5 s median with
GAIA's long tail: some calls outlast a training step, so episodes in flight span weight updates); the reward pays for calling the calculator (``areal_rewards.called_calculator``:
the test model is too small to copy 4-digit numbers, the demo's own model learns exact answers, see
docs/backend-areal.md) and fails scripted for member 0 of every fourth prompt (the partial group).
The reward curve must end above the reference band in ``areal_reference_reward.json`` (measured,
with its tolerance, on this machine; how: that file).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from areal_demo_model import build_demo_model

from aworld_areal.run import REWARD

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEMO_JOB = REPO / "examples" / "cpu_grpo_demo" / "job.yaml"
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"
REFERENCE = json.loads((HERE / "areal_reference_reward.json").read_text())
STEPS = REFERENCE["steps"]
BATCH, GROUP = REFERENCE["batch_size"], REFERENCE["group_size"]
OFFPOLICY = 2  # the plugin's default rollout.max_head_offpolicyness
LOGPROB_TOLERANCE = 2e-3  # vLLM (CPU, float32) against HF teacher forcing on the same weights


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_model(tmp_path_factory.mktemp("areal-demo-model") / "model")


@pytest.fixture(scope="module")
def server(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from aworld_core.vllm_server import VllmServer, VllmServerSpec

    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON.parent.parent} (make test builds it)")
    spec = VllmServerSpec(python=str(VLLM_PYTHON), model=str(demo_model), dtype="float32", max_model_len=256)
    server = VllmServer(spec, log_path=tmp_path_factory.mktemp("areal-vllm") / "vllm.log").start()
    print(f"\nvLLM server up in {server.startup_s:.1f} s")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("areal-run")


def overrides(out: Path, model: Path, url: str, *, steps: int = STEPS) -> list[str]:
    reward = f"{HERE / 'areal_rewards.py'}:called_calculator"
    return [
        f"model.path={model}", f"output_dir={out}",
        f"reward.name={reward}", "reward.trajectory_aware=true",
        "train_dataset.options.n=256", "test_dataset.options.n=16",
        "environment.args=[--latency-ms, '1500', --latency-dist, gaia]", "rollout.concurrency=32",
        f"backends.areal.vllm_server={{url: '{url}'}}",
        f"backends.areal.total_train_steps={steps}",
        f"backends.areal.train_dataset.batch_size={BATCH}",
        f"backends.areal.gconfig.n_samples={GROUP}",
        f"backends.areal.actor.optimizer.lr={REFERENCE['lr']}",
        "backends.areal.saver={freq_steps: 1, freq_epochs: null}",  # an HF checkpoint per version
        "backends.areal.recover={mode: 'on', freq_steps: 1}",
        "backends.areal.aworld.trajectories=true",
    ]


def run_cli(args: list[str], cwd: Path, record: Path | None = None, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ}
    if record is not None:
        env["PYTHONPATH"] = str(HERE / "trainer_probe")
        env["AWORLD_TEST_RECORD_BATCHES"] = str(record)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", "--backend", "areal", "--config", str(DEMO_JOB),
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"aworld_core.run --backend areal: rc {proc.returncode} in {time.perf_counter() - started:.0f} s "
          f"(load {os.getloadavg()[0]:.1f})")
    (cwd / f"run-{int(started)}.log").write_text(proc.stdout + proc.stderr)
    return proc


def metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]


def episodes(out: Path) -> list[Any]:
    from aworld_core.export import read_jsonl

    return list(read_jsonl(out / "trajectories.jsonl"))


def sampled_versions(episode: Any) -> list[int]:
    view = episode.training
    return [v for v, m in zip(view.response_versions, view.response_mask, strict=True) if m]


def checkpoint_of(out: Path, version: int) -> Path:
    """AReaL's HF checkpoint holding policy version ``version`` (saved after step ``version - 1``)."""
    (path,) = (out / "areal" / "checkpoints").glob(f"*/*/*/default/*globalstep{version - 1}")
    return path


def teacher_forced(model_dir: Path, ids: list[int]) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    return [0.0] + torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def test_the_demo_job_trains_on_areals_trainer_on_a_cpu(demo_model, server, run_dir):
    out, record = run_dir / "run", run_dir / "batches.jsonl"
    proc = run_cli(overrides(out, demo_model, server.base_url), run_dir, record)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "summary: training reward" in proc.stdout

    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    curve = [round(r[REWARD], 3) for r in rows]  # the reward of what each step trained
    window = REFERENCE["window"]
    start, end = sum(curve[:window]) / window, sum(curve[-window:]) / window
    print(f"reward curve {curve}: start {start:.2f}, end {end:.2f}; reference band "
          f"{REFERENCE['end_band']} (start {REFERENCE['start_band']})")
    # rising past the reference band: the run ends above its lower edge and clearly above where it began
    assert end >= REFERENCE["end_band"][0], (curve, REFERENCE)
    assert end - start >= REFERENCE["min_rise"], (curve, REFERENCE)

    # asynchronous for real: steps train tokens sampled by older policies (max_head_offpolicyness bounds
    # how far rollout submission runs ahead; an episode with a slow tool call can finish, and train,
    # later than that, with its tokens' own versions), and the decoupled loss weighs them (behave_imp_weight)
    staleness = [r["ppo_actor/update/version_stats/sample_staleness_theta_max"] for r in rows]
    assert max(staleness) > 0, staleness
    assert sum(r["ppo_actor/update/version_stats/sample_staleness_theta_avg"] for r in rows) / len(rows) <= OFFPOLICY
    assert all("ppo_actor/update/behave_imp_weight/avg" in r for r in rows)
    # a weight update never fails an episode; the scripted reward failures are the only untrained members
    assert all(r.get("rollout/aworld/untrained/failed", 0) == 0 and r.get("rollout/aworld/untrained/timeout", 0) == 0
               for r in rows)
    assert sum(r.get("rollout/aworld/untrained/reward_failed", 0) for r in rows) > 0

    # per-token versions: episodes whose turns were sampled by two policy versions trained as one row
    trained = [e for e in episodes(out) if e.training is not None and e.reward is not None]
    spanning = [e for e in trained if len(set(sampled_versions(e))) > 1]
    assert spanning, "no episode spanned a weight update"
    for episode in spanning:
        versions = sampled_versions(episode)
        assert versions == sorted(versions) and episode.status.value == "success"

    # the weights vLLM sampled with after each update are the trained policy of that version
    worst_own, checked, moved = 0.0, 0, {}
    by_version: dict[int, list[Any]] = {}
    for episode in trained:
        for v in set(sampled_versions(episode)):
            by_version.setdefault(v, []).append(episode)
    for version in sorted(v for v in by_version if 1 <= v <= STEPS - 1):
        own, previous = checkpoint_of(out, version), (checkpoint_of(out, version - 1) if version > 1 else demo_model)
        for episode in by_version[version][:2]:
            view = episode.training
            ids = [*view.prompt_ids, *view.response_ids]
            mine = teacher_forced(own, ids)[len(view.prompt_ids):]
            before = teacher_forced(previous, ids)[len(view.prompt_ids):]
            pairs = [(lp, a, b) for lp, a, b, v, m in zip(view.response_logprobs, mine, before, view.response_versions,
                                                          view.response_mask, strict=True) if m and v == version]
            worst_own = max(worst_own, max(abs(lp - a) for lp, a, _ in pairs))
            moved[version] = max(moved.get(version, 0.0), max(abs(lp - b) for lp, _, b in pairs))
            checked += 1
    print(f"{checked} episodes over {len(by_version)} versions: max |vLLM - HF(own version)| {worst_own:.2e}; "
          f"max |vLLM - HF(previous version)| per version {({v: f'{d:.1e}' for v, d in moved.items()})}")
    assert checked >= 2 and worst_own < LOGPROB_TOLERANCE
    # the check has teeth: updates moved the sampled tokens' logprobs past the tolerance (a step can leave
    # them in place -- every group of equal reward has zero advantage, or the tokens sit at probability ~1,
    # as CI once saw: 1.3e-5 -- so this counts versions rather than demanding it of each)
    assert sum(d > LOGPROB_TOLERANCE for d in moved.values()) >= 2, moved

    # whole groups through the real trainer: GROUP consecutive rows per prompt, a failed member a
    # fully masked row with the neutral reward (the mean of the members that trained)
    batches = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(batches) == STEPS
    masked = 0
    for batch in batches:
        assert len(batch["rewards"]) == BATCH * GROUP
        for g in range(BATCH):
            rows_ = slice(g * GROUP, (g + 1) * GROUP)
            prompts, rewards, sizes = batch["prompts"][rows_], batch["rewards"][rows_], batch["loss_mask_sizes"][rows_]
            lengths = batch["lengths"][rows_]
            trained_prompts = [p for p, size in zip(prompts, sizes, strict=True) if size > 0]
            assert trained_prompts and all(p == trained_prompts[0] for p in trained_prompts)  # one prompt's group
            for i, size in enumerate(sizes):
                if size == 0:  # the failed member: one masked token, the neutral reward
                    others = [r for j, r in enumerate(rewards) if j != i and sizes[j] > 0]
                    assert lengths[i] == 1 and rewards[i] == pytest.approx(sum(others) / len(others))
                    masked += 1
    assert masked > 0

    # the job's outputs
    summary = json.loads((out / "summary.json").read_text())
    assert {"eval_before/accuracy", "eval_after/accuracy"} <= set(summary["metrics"])
    for name in ("metrics.png", "eval_before.jsonl", "eval_after.jsonl", "checkpoint/model.safetensors",
                 "checkpoint/tokenizer.json"):
        assert (out / name).exists(), name


def test_areals_recover_continues_the_run(demo_model, server, run_dir):
    """The same job again with two more steps: AReaL's RecoverHandler loads the last step's
    checkpoint (weights, optimizer, dataloader), pushes its weights into vLLM and continues.
    Without the held-out evaluations before and after (nothing here reads them; the first run
    checks them): their 16 tool-calling episodes each, on the calculator's 1.5 s long-tailed
    latency, took 14 of the run's 55 s."""
    out = run_dir / "run"
    if not (out / "metrics.jsonl").exists():
        pytest.skip("needs the run of test_the_demo_job_trains_on_areals_trainer_on_a_cpu")
    before = len(episodes(out))
    no_eval = ["backends.areal.aworld.eval_before=false", "backends.areal.aworld.eval_after=false"]
    proc = run_cli(overrides(out, demo_model, server.base_url, steps=STEPS + 2) + no_eval, run_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Recovering from" in proc.stdout + proc.stderr
    assert [r["step"] for r in metrics(out)] == list(range(1, STEPS + 3))
    resumed = episodes(out)[before:]
    versions = {v for e in resumed if e.training is not None for v in sampled_versions(e)}
    assert versions and min(versions) >= STEPS - OFFPOLICY and max(versions) <= STEPS + 2, versions
    assert min(versions) >= STEPS  # the recovered run starts at the recovered version, not 0


def test_all_failed_steps_stop_areals_trainer(demo_model, server, run_dir):
    """rollout.max_failed_steps on the real trainer: every episode fails (the MCP server is down),
    PPOTrainer's prepare_batch raises the kit's error after two steps, the run exits non-zero."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    out = run_dir / "failing"
    args = overrides(out, demo_model, server.base_url, steps=6) + [
        "environment=null", "rollout.max_failed_steps=2",
        f"agent.mcp_config={{mcpServers: {{calculator: {{url: 'http://127.0.0.1:{closed}/mcp'}}}}}}",
        "backends.areal.recover={mode: disabled}",
    ]
    proc = run_cli(args, run_dir, timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "rollout.max_failed_steps" in text and "Background thread failed" in text, text[-3000:]
    assert not (out / "metrics.jsonl").exists() or not metrics(out)
