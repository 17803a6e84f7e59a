"""Training sampling has one owner, the job's ``rollout.sampling`` (issue 29): each backend maps it onto
its own keys, the same key written natively with another value is refused naming both, and a training
job that sets the agent's own sampling is refused with the field to use instead."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
import yaml

from aworld_core.config import SamplingSection, load_job_config
from aworld_core.errors import ConfigError
from aworld_core.run import main
from aworld_core.schemas import RolloutContext, Sample, SamplingParams

ROW = {"question": "What is 2+3?", "answer": "5"}


def _job_file(tmp_path: Path, **fields: Any) -> Path:
    """A complete trl job (a model directory, data, a reward) with ``fields`` added."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    job = {"name": "sampling", "output_dir": str(tmp_path / "out"), "model": {"path": "./model"},
           "train_dataset": {"path": "train.jsonl"}, "reward": {"name": "gsm8k"}, **fields}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _dry_run(path: Path, *overrides: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        code = main(["--backend", "trl", "--config", str(path), "--dry-run", *overrides], out=out)
    return code, out.getvalue(), err.getvalue()


# -- the section and its mapping ---------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("temperature", 0), ("top_p", 1.5), ("top_p", 0), ("top_k", -1)])
def test_out_of_range_sampling_is_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError) as refused:
        load_job_config(data={"rollout": {"sampling": {field: value}}})
    assert f"rollout.sampling.{field}" in str(refused.value)


def test_native_maps_set_fields_converts_and_accepts_the_same_value_written_natively():
    sampling = SamplingSection(temperature=0.7, top_k=0)
    keys = {"temperature": ("gen.temperature", "actor.temperature"), "top_p": "gen.top_p", "top_k": "gen.top_k"}
    off = {"top_k": lambda k: -1 if k == 0 else k}
    assert sampling.native(keys, {}, prefix="backends.x.", values=off) == {
        "gen.temperature": 0.7, "actor.temperature": 0.7, "gen.top_k": -1}  # top_p unset: the backend's default
    # the same value, as ours or in the backend's own form, is accepted
    assert sampling.native(keys, {"gen.temperature": 0.7, "gen.top_k": -1}, prefix="backends.x.", values=off)
    assert sampling.native(keys, {"gen.top_k": 0}, prefix="backends.x.", values=off)
    assert SamplingSection().native(keys, {"gen.temperature": 5.0}, prefix="backends.x.") == {}


def test_native_refuses_a_native_key_with_another_value_naming_both():
    with pytest.raises(ConfigError) as refused:
        SamplingSection(temperature=0.7).native({"temperature": ("gen.temperature", "actor.temperature")},
                                                {"actor.temperature": 1.0}, prefix="backends.x.")
    message = str(refused.value)
    assert "rollout.sampling.temperature=0.7 and backends.x.actor.temperature=1.0" in message
    assert "remove backends.x.actor.temperature" in message
    assert [loc for loc, _, _ in refused.value.problems] == ["rollout.sampling.temperature", "backends.x.actor.temperature"]


def test_native_refuses_a_field_the_backend_cannot_map():
    with pytest.raises(ConfigError, match=r"rollout.sampling.top_k=5: x has no setting it maps to"):
        SamplingSection(top_k=5).native({"temperature": "t"}, {}, prefix="backends.x.", backend="x")


# -- the job, through the CLI (trl) ------------------------------------------------------------


def test_a_training_job_setting_the_agents_sampling_is_told_where_it_belongs(tmp_path):
    code, _, err = _dry_run(_job_file(tmp_path, agent={"temperature": 0.7, "top_k": 20}))
    assert code == 2
    assert "agent.temperature, agent.top_k are the agent's own sampling, used for evaluation" in err
    assert "set rollout.sampling.temperature: 0.7, rollout.sampling.top_k: 20 and remove agent.temperature, agent.top_k" in err
    # upstream AWorld's spelling is the same field
    code, _, err = _dry_run(_job_file(tmp_path, agent={"llm_temperature": 0.5}))
    assert code == 2 and "rollout.sampling.temperature: 0.5" in err


def test_the_agents_sampling_stays_for_evaluation(tmp_path):
    from aworld_core.validation import validate_job

    job = load_job_config(_job_file(tmp_path, agent={"temperature": 0.7}))
    validate_job(None, job, evaluation=True)  # --eval: the agent samples with its own settings


def test_dry_run_shows_the_native_keys_rollout_sampling_becomes(tmp_path):
    code, out, err = _dry_run(_job_file(tmp_path, rollout={"sampling": {"temperature": 0.7, "top_k": 0}},
                                        backends={"trl": {"learning_rate": 1e-5}}))
    assert code == 0, err
    backend = yaml.safe_load(out.split("--- resolved backend config ---\n", 1)[1])
    assert backend["grpo_config"] == {"learning_rate": 1e-5, "temperature": 0.7, "top_k": 0}


def test_a_conflict_between_rollout_sampling_and_backends_trl_is_refused_the_same_value_accepted(tmp_path):
    path = _job_file(tmp_path, rollout={"sampling": {"temperature": 0.7, "top_p": 0.9}})
    code, out, err = _dry_run(path, "backends.trl.temperature=0.7")
    assert code == 0, err
    code, _, err = _dry_run(path, "backends.trl.top_p=1.0")
    assert code == 2
    assert "rollout.sampling.top_p=0.9 and backends.trl.top_p=1.0 set the same setting to different values" in err


@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning")  # TRL's use of a deprecated name
def test_trl_builds_its_grpo_config_from_rollout_sampling(tmp_path):
    """What TRL's GRPOConfig gets is what the trl backend's rollout samples with (aworld_trl.rollout)."""
    pytest.importorskip("trl")
    from aworld_trl.options import grpo_arguments, grpo_config
    from aworld_trl.rollout import trl_sampling

    job = load_job_config(_job_file(tmp_path, rollout={"sampling": {"temperature": 0.7, "top_p": 0.9, "top_k": 5}},
                                    backends={"trl": {"learning_rate": 1e-5}}))
    assert grpo_arguments(job) == {"learning_rate": 1e-5, "temperature": 0.7, "top_p": 0.9, "top_k": 5}
    config, _ = grpo_config(job, tmp_path / "out")
    assert (config.temperature, config.top_p, config.top_k) == (0.7, 0.9, 5)
    assert trl_sampling(config) == SamplingParams(temperature=0.7, top_p=0.9, top_k=5)


def test_an_sft_job_refuses_sampling(tmp_path):
    from aworld_core.validation import check_training_sampling

    (tmp_path / "episodes.jsonl").write_text("")
    job = load_job_config(_job_file(tmp_path, sft={"train": "episodes.jsonl"}, rollout={"sampling": {"top_p": 0.9}}))
    with pytest.raises(ConfigError, match=r"rollout.sampling.top_p: an SFT job .* samples nothing"):
        check_training_sampling(job)


# -- the worker kit: a backend that passes no sampling gets the job's --------------------------


def test_the_runner_puts_the_jobs_sampling_under_each_contexts_own():
    from aworld_core.worker import EpisodeRunner

    job = load_job_config(data={"agent": {"name": "a"}, "rollout": {"sampling": {"temperature": 0.7, "top_p": 0.9}}})
    runner = EpisodeRunner.from_job(job)
    sample = Sample(id="s", prompt=[{"role": "user", "content": "hi"}])
    assert runner._context(sample, None).sampling == SamplingParams(temperature=0.7, top_p=0.9)
    greedy = runner._context(sample, RolloutContext(sampling=SamplingParams(temperature=0.0)))
    assert greedy.sampling == SamplingParams(temperature=0.0, top_p=0.9)  # the context's own wins
    assert EpisodeRunner.from_job(load_job_config(data={"agent": {"name": "a"}})).sampling is None
