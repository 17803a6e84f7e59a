"""A job with several problems reports all of them at once, each naming its field and the fix
(exit code 2), the same on a run, ``--dry-run``, ``--eval`` and ``AgentTrainer``. Before, only
the first was reported and a user reran once per mistake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aworld_core.errors import ConfigError
from aworld_core.run import main

ROW = {"question": "What is 2+3?", "answer": "5"}


def _job(tmp_path: Path, **fields: Any) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    data: dict[str, Any] = {
        "name": "many", "backend": "trl", "output_dir": str(tmp_path / "out"),
        "model": {"path": "./no-model"},                               # 1. does not exist
        "agent": {"name": "a", "max_steps": 2},
        "train_dataset": {"path": "nope.jsonl"},                       # 2. does not exist
        "environment": {"name": "nosuch-env"},                         # 3. not installed
        "reward": {"name": "no_such_reward"},                          # 4. unknown
        "logging": {"report_to": ["trackio"]},                         # 5. package missing
        **fields,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


EXPECTED = [
    r"model.path: '{t}/no-model' does not exist; expected an existing model directory",
    r"train_dataset.path: '{t}/nope.jsonl' does not exist; expected an existing JSONL",
    "environment.name: environment 'nosuch-env' is not installed",
    "reward.name: ",
    "unknown reward 'no_such_reward'",
    "logging.report_to: logging.report_to names loggers whose packages are not installed: 'trackio' "
    "(install it with: pip install trackio)",
]


def _check_all(text: str, tmp_path: Path, count: int) -> None:
    assert f"the job has {count} problems (all listed; fix them and run again)" in text, text
    for expected in EXPECTED:
        assert expected.format(t=tmp_path) in text, (expected, text)


def _trackio_missing() -> int:
    import importlib.util

    return int(importlib.util.find_spec("trackio") is None)


def test_a_run_and_a_dry_run_report_every_problem_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not _trackio_missing():
        pytest.skip("trackio is installed here")
    job = _job(tmp_path)
    for extra in (["--dry-run"], []):
        code = main(["--config", str(job), *extra])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        _check_all(captured.err, tmp_path, 5)
    assert not (tmp_path / "out").exists()


def test_eval_reports_every_problem_including_the_missing_reward(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, reward=None, test_dataset={"path": "empty.jsonl"})
    (tmp_path / "empty.jsonl").write_text("")
    code = main(["--config", str(job), "--eval"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"the job has {5 + _trackio_missing()} problems" in err, err
    assert "test_dataset: test_dataset" in err and "has no rows; evaluation needs at least one task" in err
    assert "reward: --eval needs a reward in the job config" in err
    assert "environment.name: environment 'nosuch-env'" in err and "model.path:" in err


def test_agent_trainer_reports_its_own_checks_with_the_jobs(tmp_path: Path) -> None:
    from aworld_core import AgentTrainer

    config = {"backend": "trl", "output_dir": str(tmp_path / "out"), "model": {"path": str(tmp_path / "absent")},
              "agent": {"name": "a"}, "environment": {"name": "nosuch-env"}}
    with pytest.raises(ConfigError) as caught:
        AgentTrainer(config=config, train_dataset=[ROW])  # no reward either
    text = str(caught.value)
    assert "the job has 3 problems" in text, text
    assert "reward: no reward: pass reward_func=..." in text
    assert f"model.path: '{tmp_path / 'absent'}' does not exist" in text
    assert "environment.name: environment 'nosuch-env' is not installed" in text
    assert {loc for loc, _, _ in caught.value.problems} >= {"model.path", "reward", "environment.name"}


def test_one_problem_is_reported_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    job = _job(tmp_path, model={"path": "./model"}, train_dataset={"path": "train.jsonl"}, environment=None,
               reward={"name": "gsm8k"}, logging={"report_to": []})
    data = yaml.safe_load(job.read_text())
    data.pop("environment")
    job.write_text(yaml.safe_dump({**data, "reward": {"name": "no_such_reward"}}))
    code = main(["--config", str(job), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "problems" not in err and "unknown reward 'no_such_reward'" in err
