"""Telemetry and hub lookups are off in every launch plan, for every backend, from one place
(``aworld_core.jobs.plan_job`` with ``aworld_core.offline``): ``--dry-run`` shows them, a
command gets them, an in-process entry point runs with them, and the user can opt back in."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from aworld_core.config import load_job_config
from aworld_core.jobs import plan_job
from aworld_core.launch import execute_plan
from aworld_core.offline import HUB_OFFLINE, OFFLINE_ENV, TELEMETRY_OFF, job_uses_hub, offline_env_applied
from aworld_core.plugins import get_plugin_manager
from aworld_core.run import main
from aworld_core.schemas import LaunchPlan

ALL_VARS = sorted(OFFLINE_ENV)


@pytest.fixture(autouse=True)
def _no_user_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*ALL_VARS, "AWORLD_ALLOW_TELEMETRY"]:
        monkeypatch.delenv(name, raising=False)


def _job(tmp_path: Path, **changes: Any) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "What is 2+3?", "answer": "5"}) + "\n")
    data: dict[str, Any] = {
        "name": "offline", "output_dir": str(tmp_path / "out"), "model": {"path": "./model"},
        "agent": {"name": "a", "max_steps": 2}, "train_dataset": {"path": "train.jsonl"}, "reward": {"name": "gsm8k"},
        **changes,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _backends() -> list[str]:
    return sorted(get_plugin_manager().catalog().items("backend"))


def test_every_backends_plan_carries_the_opt_outs(tmp_path, monkeypatch):
    monkeypatch.setenv("AWORLD_VLLM_PYTHON", sys.executable)  # verl on a CPU plans a vLLM server of its own
    job = load_job_config(_job(tmp_path), [])
    planned = []
    for backend in _backends():
        plan, _ = plan_job(backend, job.model_copy(update={"backend": backend}))
        for name, value in OFFLINE_ENV.items():
            assert plan.env.get(name) == value, (backend, name, plan.env)
        assert any("AWORLD_ALLOW_TELEMETRY=1" in note for note in plan.notes), backend
        planned.append(backend)
    assert {"trl", "verl", "areal", "swift"} <= set(planned)


def test_dry_run_shows_them_and_the_user_opts_back_in(tmp_path, capsys, monkeypatch):
    job = str(_job(tmp_path))
    assert main(["--config", job, "--backend", "trl", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for name, value in OFFLINE_ENV.items():
        assert f"\n  {name}={value}\n" in out
    assert "note: telemetry off in every launched process" in out

    monkeypatch.setenv("AWORLD_ALLOW_TELEMETRY", "1")
    assert main(["--config", job, "--backend", "trl", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not any(f"  {name}=" in out for name in ALL_VARS)
    assert "telemetry and hub lookups allowed (AWORLD_ALLOW_TELEMETRY=1)" in out


def test_a_users_own_value_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    plan, _ = plan_job("trl", load_job_config(_job(tmp_path), []))
    assert "HF_HUB_OFFLINE" not in plan.env and "RAY_USAGE_STATS_ENABLED" not in plan.env
    assert plan.env["VLLM_NO_USAGE_STATS"] == "1"


def test_a_job_on_the_hub_keeps_the_hub_but_not_the_telemetry(tmp_path):
    job = load_job_config(_job(tmp_path, model={"path": "Qwen/Qwen2.5-0.5B-Instruct"}), [])
    assert job_uses_hub(job)
    plan, _ = plan_job("trl", job)
    assert not set(HUB_OFFLINE) & set(plan.env)
    assert all(plan.env[name] == value for name, value in TELEMETRY_OFF.items())
    assert any("hub stays reachable" in note for note in plan.notes)

    hub_data = load_job_config(_job(tmp_path, train_dataset={"name": "openai/gsm8k"}), [])
    assert job_uses_hub(hub_data)
    assert not job_uses_hub(load_job_config(_job(tmp_path, train_dataset={"name": "arith"}), []))


PROBE = f"import json, os; json.dump({{k: os.environ.get(k) for k in {ALL_VARS!r}}}, open('env.json', 'w'))"


def test_a_command_gets_them(tmp_path):
    plan, _ = plan_job("trl", load_job_config(_job(tmp_path), []))
    execute_plan(LaunchPlan(backend="x", command=[sys.executable, "-c", PROBE], env=plan.env), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "env.json").read_text()) == OFFLINE_ENV


def test_an_in_process_entry_point_runs_with_them_and_the_process_gets_its_environment_back(tmp_path, monkeypatch):
    (tmp_path / "offline_probe_entry.py").write_text(
        "import os\n"
        f"def run(out):\n    import json\n    json.dump({{k: os.environ.get(k) for k in {ALL_VARS!r}}}, open(out, 'w'))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    plan, _ = plan_job("trl", load_job_config(_job(tmp_path), []))
    seen = tmp_path / "seen.json"
    in_process = LaunchPlan(backend="x", entrypoint="offline_probe_entry:run", entrypoint_kwargs={"out": str(seen)},
                            env=plan.env)
    execute_plan(in_process, tmp_path / "run")
    assert json.loads(seen.read_text()) == OFFLINE_ENV
    assert not any(name in os.environ for name in ALL_VARS)


def test_offline_env_applied_nests_and_restores(tmp_path):
    job = load_job_config(_job(tmp_path), [])
    with offline_env_applied(job) as outer:
        assert outer == OFFLINE_ENV
        with offline_env_applied(job) as inner:
            assert inner == {}
        assert os.environ["HF_HUB_OFFLINE"] == "1"  # still set: the outer block owns it
        plan, _ = plan_job("trl", job)  # a plan made inside still lists them
        assert plan.env["HF_HUB_OFFLINE"] == "1"
    assert not any(name in os.environ for name in ALL_VARS)
