"""The job's ``logging.report_to`` and AReaL's recovery, through AReaL's real config loader
(``to_structured_cfg`` into its ``GRPOConfig``, as ``load_expr_config`` merges it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aworld_areal.config import build_areal_config, validate_areal_config
from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError


def _loaded(tmp_path: Path, **job: Any) -> Any:
    data = {"name": "areal-log", "backend": "areal", "model": {"path": str(tmp_path)}, **job}
    config, _ = build_areal_config(load_job_config(data=data), tmp_path / "out")
    return validate_areal_config(config)


def test_report_to_reaches_areals_stats_logger(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, logging={"report_to": ["tensorboard", "wandb", "console"]})
    logger = loaded.stats_logger
    assert logger.tensorboard.path == str((tmp_path / "out" / "areal" / "tensorboard").resolve())
    assert logger.wandb.mode == "online"
    assert logger.swanlab.mode == "disabled" and logger.trackio.mode == "disabled"
    plain = _loaded(tmp_path).stats_logger  # nothing asked: nothing but the console
    assert plain.tensorboard.path is None and plain.wandb.mode == "disabled"
    # the section's own settings still win (e.g. a wandb project)
    tuned = _loaded(tmp_path, logging={"report_to": ["wandb"]},
                    backends={"areal": {"stats_logger": {"wandb": {"project": "p"}}}}).stats_logger
    assert tuned.wandb.mode == "online" and tuned.wandb.project == "p"


def test_a_logger_areal_does_not_have_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"logging.report_to has \['mlflow'\], which AReaL's stats logger cannot"):
        _loaded(tmp_path, logging={"report_to": ["mlflow"]})


def test_recovery_is_turned_on_from_the_job_and_a_bad_mode_is_refused(tmp_path: Path) -> None:
    off = _loaded(tmp_path).recover
    assert off.mode == "disabled"
    on = _loaded(tmp_path, backends={"areal": {"recover": {"mode": "on", "freq_steps": 5}}}).recover
    assert (on.mode, on.freq_steps, on.freq_epochs) == ("on", 5, 1)
    # a rerun of the same job finds its recovery files: the same fileroot, experiment and trial
    again = _loaded(tmp_path, backends={"areal": {"recover": {"mode": "on"}}}).recover
    assert (again.fileroot, again.experiment_name, again.trial_name) == (on.fileroot, on.experiment_name,
                                                                        on.trial_name)
    with pytest.raises(ConfigError, match="Invalid recover mode 'resume'"):
        _loaded(tmp_path, backends={"areal": {"recover": {"mode": "resume"}}})
