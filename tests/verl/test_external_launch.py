"""The external launch's own pieces, without a trainer: verl's log into the job's ``metrics.jsonl``
(across a resumed run), the newest checkpoint and its export, the summary, the hydra spelling of keys the user
adds under ours, and the process-group stop of ``main_ppo``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl.experimental.agent_loop")


def _raw(path: Path, steps: range, reward: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for step in steps:
            handle.write(json.dumps({"step": step, "data": {"critic/score/mean": reward + step / 100,
                                                            "response_length/mean": 20.0, "actor/pg_loss": -0.1,
                                                            "aworld/tool_call_rate": 0.5, "flag": True,
                                                            "timing_s/step": float("nan")}}) + "\n")


def test_verl_log_becomes_the_jobs_metrics_across_a_resume(tmp_path):
    from aworld_verl.external_launch import RAW_METRICS, merge_metrics

    _raw(tmp_path / RAW_METRICS, range(1, 6), 0.1)
    rows = merge_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["reward"] == pytest.approx(0.11) and rows[0]["completions/mean_length"] == 20.0
    assert rows[0]["loss"] == -0.1 and rows[0]["critic/score/mean"] == pytest.approx(0.11)
    assert "flag" not in rows[0] and "timing_s/step" not in rows[0]  # not a number / not finite
    assert not (tmp_path / RAW_METRICS).exists()  # folded in once
    assert merge_metrics(tmp_path) == rows  # nothing new: unchanged
    # a resumed run from the step-4 checkpoint rewrites verl's file from step 5 on
    _raw(tmp_path / RAW_METRICS, range(5, 8), 0.5)
    rows = merge_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert rows[4]["reward"] == pytest.approx(0.55)  # the new run's step 5 replaced the old one
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == list(range(1, 8))


def test_the_newest_checkpoint_is_exported_with_the_tokenizer(tmp_path, tiny_model_dir):
    from aworld_core.config import load_job_config
    from aworld_verl.external_launch import export_checkpoint, latest_checkpoint

    job = load_job_config(data={"backend": "verl", "model": {"path": str(tiny_model_dir)},
                                "output_dir": str(tmp_path)})
    assert latest_checkpoint(tmp_path) is None and export_checkpoint(job, tmp_path) is None
    for step in (5, 10, 9):
        hf = tmp_path / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "model.safetensors").write_text(str(step))
        (hf / "config.json").write_text("{}")
    assert latest_checkpoint(tmp_path).name == "global_step_10"
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("9")  # verl's own tracker
    target = export_checkpoint(job, tmp_path)
    assert (target / "model.safetensors").read_text() == "9"
    assert (target / "tokenizer_config.json").is_file()
    assert json.loads((target / "aworld_checkpoint.json").read_text()) == {"global_step": "global_step_9"}


def test_the_summary_counts_the_rows_with_a_training_reward(tmp_path, capsys):
    from aworld_core.evaluate import EvalReport
    from aworld_verl.cpu_plan import VerlOptions
    from aworld_verl.external_launch import RAW_METRICS, _report, merge_metrics

    _raw(tmp_path / RAW_METRICS, range(1, 5), 0.1)
    rows = [*merge_metrics(tmp_path), {"step": 5, "val-core/acc": 1.0}]  # a row without a training reward
    before, after = (EvalReport(n=2, accuracy=a, mean_reward=a, statuses={}, reward_failures=0, duration_s=1.0)
                     for a in (0.0, 0.5))
    metrics, artifacts = {"main_ppo_seconds": 9.0}, {"metrics": str(tmp_path / "metrics.jsonl")}
    job = type("Job", (), {"name": "job"})()
    _report(job, VerlOptions(summary_window=2), tmp_path, rows, before, after, metrics, artifacts, time.perf_counter())
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("summary: training reward 0.12 -> 0.14 (mean of first/last 2 steps); "
                           "held-out accuracy 0.00 -> 0.50 (2 tasks, greedy); ") and line.endswith("s in all")
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["metrics"]["steps"] == 4 and saved["metrics"]["main_ppo_seconds"] == 9.0
    assert saved["metrics"]["tool_call_rate/end"] == 0.5 and saved["metrics"]["eval_after/accuracy"] == 0.5
    assert "peak_rss_gib" not in saved["metrics"]  # training ran in verl's workers, not this process
    assert set(saved["artifacts"]) == {"metrics", "eval_before", "eval_after", "plot"}


def test_new_keys_under_ours_get_hydras_add_or_set():
    from aworld_verl.launch import _merge

    base = {"+actor_rollout_ref.rollout.custom.external_vllm.urls": ["u"], "trainer.logger": ["console"]}
    merged = _merge(base, {"actor_rollout_ref.rollout.custom.external_vllm.record": "/r.jsonl",
                           "actor_rollout_ref.rollout.custom.external_vllm.urls": ["v"],
                           "trainer.save_freq": 2})
    assert merged["++actor_rollout_ref.rollout.custom.external_vllm.record"] == "/r.jsonl"
    assert merged["+actor_rollout_ref.rollout.custom.external_vllm.urls"] == ["v"]
    assert merged["trainer.save_freq"] == 2 and "+trainer.save_freq" not in merged


def test_an_interrupted_launch_stops_main_ppos_whole_process_group(tmp_path):
    """``run_command``: the command and what it started are stopped when the launch is interrupted."""
    import os
    import signal
    import threading

    from aworld_verl.external_launch import run_command

    child_pid = tmp_path / "child.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(600)']); open({str(child_pid)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    main = threading.main_thread()
    assert main is threading.current_thread()
    # Python raises KeyboardInterrupt only where SIGINT was not ignored at its start (a run started
    # in the background by a shell, e.g. `nohup make test &`, inherits SIG_IGN): install it here
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(5.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_command([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), grace_s=5)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 60
    import psutil

    grandchild = int(child_pid.read_text())
    time.sleep(0.5)
    try:
        assert psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped
    except psutil.NoSuchProcess:
        pass
