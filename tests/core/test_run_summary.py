"""The end of a run, the same on every backend (``aworld_core.run_summary``): windowed means, the
summary line, the artifact lines, ``summary.json``, ``metrics.png``, the targets; and the tokenizer
files beside a checkpoint (``aworld_core.tokens.copy_tokenizer_files``).

Fast: no framework (matplotlib for the one plot).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

import pytest

from aworld_core.evaluate import EvalReport
from aworld_core.plots import SFT_PANELS
from aworld_core.run_summary import (
    check_targets,
    reward_headline,
    training_metrics,
    window_means,
    write_summary,
)
from aworld_core.tokens import copy_tokenizer_files

HISTORY = [{"step": s, "reward": s / 10, "aworld/tool_call_rate": 1.0 if s > 2 else 0.0} for s in range(1, 6)]


@dataclass
class Targets:
    max_minutes: float | None = None
    min_accuracy_gain: float | None = None
    min_final_reward: float | None = None


def report(accuracy: float, n: int = 4) -> EvalReport:
    return EvalReport(n=n, accuracy=accuracy, mean_reward=accuracy, statuses={"completed": n}, reward_failures=0,
                      duration_s=1.0)


def test_window_means_are_over_the_rows_that_logged_the_key() -> None:
    rows = [{"loss": 4.0}, {"other": 1}, {"loss": 2.0}, {"loss": 1.0}, {"loss": "nan-as-text"}]
    assert window_means(rows, "loss", 2) == (3.0, 1.5)
    assert window_means(rows, "loss", 10) == (7 / 3, 7 / 3)
    assert window_means(rows, "missing", 2) == (None, None)


def test_training_metrics_and_the_reward_headline() -> None:
    metrics = training_metrics(HISTORY, 2)
    assert metrics == {"steps": 5, "reward/start": pytest.approx(0.15), "reward/end": pytest.approx(0.45),
                       "tool_call_rate/start": 0.0, "tool_call_rate/end": 1.0}
    assert reward_headline(metrics, 2) == "summary: training reward 0.15 -> 0.45 (mean of first/last 2 steps)"
    named = training_metrics([{"r": 1.0, "t": 0.5}], 3, reward_key="r", tool_key="t")  # a backend's own names
    assert named["reward/end"] == 1.0 and named["tool_call_rate/start"] == 0.5
    assert training_metrics([], 3)["reward/start"] is None


def test_write_summary_prints_the_line_and_writes_summary_json_and_the_plot(tmp_path, capsys) -> None:
    metrics = {**training_metrics(HISTORY, 2), "vllm_start_seconds": 3.0}
    artifacts = {"metrics": str(tmp_path / "metrics.jsonl")}
    write_summary(tmp_path, reward_headline(metrics, 2), history=HISTORY, metrics=metrics, artifacts=artifacts,
                  started=time.perf_counter() - 2.0, before=report(0.25), after=report(0.75), title="job")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("summary: training reward 0.15 -> 0.45 (mean of first/last 2 steps); "
                             "held-out accuracy 0.25 -> 0.75 (4 tasks, greedy); ")
    assert out[0].endswith("s in all")
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == {"metrics": metrics, "artifacts": artifacts}
    assert metrics["vllm_start_seconds"] == 3.0 and metrics["train_seconds"] >= 2.0
    assert metrics["process_seconds"] >= metrics["train_seconds"]  # the whole process (Linux)
    assert metrics["peak_rss_gib"] > 0 and "targets_met" not in metrics
    assert (metrics["eval_before/accuracy"], metrics["eval_after/accuracy"]) == (0.25, 0.75)
    assert metrics["eval_before/tool_use_rate"] == 0.0
    assert artifacts["eval_after"] == str(tmp_path / "eval_after.jsonl")
    assert artifacts["plot"] == str(tmp_path / "metrics.png") and (tmp_path / "metrics.png").stat().st_size > 0
    assert out[1:] == [f"  {name}: {path}" for name, path in artifacts.items()]


def test_an_sft_headline_without_evaluation_plot_or_memory(tmp_path, capsys) -> None:
    metrics: dict = {}
    write_summary(tmp_path, "summary: SFT loss 2.00 -> 1.00", history=[{"step": 1, "loss": 2.0}], metrics=metrics,
                  artifacts={}, started=time.perf_counter(), panels=SFT_PANELS, plot=False, memory=False)
    assert capsys.readouterr().out.startswith("summary: SFT loss 2.00 -> 1.00; ")
    assert "peak_rss_gib" not in metrics and not any(k.startswith("eval_") for k in metrics)
    assert not (tmp_path / "metrics.png").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["artifacts"] == {}


def test_without_matplotlib_the_run_still_ends_with_its_summary(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    write_summary(tmp_path, "summary: x", history=HISTORY, metrics={}, artifacts={}, started=time.perf_counter())
    out = capsys.readouterr().out
    assert "no metrics.png:" in out and "pip install matplotlib" in out
    assert (tmp_path / "summary.json").is_file()


def test_targets_met_missed_and_unmeasured(capsys) -> None:
    metrics = {"process_seconds": 120.0, "eval_before/accuracy": 0.2, "eval_after/accuracy": 0.5, "reward/end": 0.4}
    assert check_targets(Targets(max_minutes=3, min_accuracy_gain=0.25, min_final_reward=0.3), metrics)
    assert capsys.readouterr().out.splitlines() == [
        "target: whole run 2.0 min <= 3 min: met",
        "target: held-out accuracy gain 0.30 >= 0.25: met",
        "target: final training reward 0.40 >= 0.3: met",
    ]
    assert not check_targets(Targets(max_minutes=1, min_final_reward=0.3), {**metrics, "reward/end": None})
    assert capsys.readouterr().out.splitlines() == [
        "target: whole run 2.0 min <= 1 min: MISSED",
        "target: final training reward n/a >= 0.3: unmeasured",
    ]


def test_write_summary_records_whether_the_targets_were_met(tmp_path, capsys) -> None:
    metrics = training_metrics(HISTORY, 2)
    write_summary(tmp_path, "summary: x", history=HISTORY, metrics=metrics, artifacts={},
                  started=time.perf_counter(), plot=False, targets=Targets(min_final_reward=0.4))
    assert "target: final training reward 0.45 >= 0.4: met" in capsys.readouterr().out
    assert json.loads((tmp_path / "summary.json").read_text())["metrics"]["targets_met"] is True


def test_copy_tokenizer_files_copies_the_tokenizers_own_files_only(tmp_path) -> None:
    source, target = tmp_path / "model", tmp_path / "checkpoint"
    source.mkdir()
    target.mkdir()
    names = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
             "vocab.json", "merges.txt", "added_tokens.json"]
    for name in [*names, "config.json", "model.safetensors"]:
        (source / name).write_text(name)
    (source / "tokenizer.d").mkdir()  # a directory matching a pattern is not a file
    copy_tokenizer_files(source, target)
    assert sorted(p.name for p in target.iterdir()) == sorted(names)
    assert (target / "vocab.json").read_text() == "vocab.json"
