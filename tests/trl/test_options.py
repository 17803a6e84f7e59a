"""backends.trl -> GRPOConfig: pass-through, CPU defaults, and clear errors for bad keys."""

from __future__ import annotations

import importlib.util
import json

import pytest

from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_trl.options import grpo_config, split_section


def _job(trl: dict, tmp_path):
    return load_job_config(data={"name": "t", "backends": {"trl": trl}, "output_dir": str(tmp_path)})


def test_section_passes_through_and_cpu_defaults_apply(tmp_path):
    args, options = grpo_config(_job({"learning_rate": 3e-4, "num_generations": 4,
                                      "per_device_train_batch_size": 8, "max_steps": 5}, tmp_path), tmp_path)
    assert args.learning_rate == 3e-4
    assert args.num_generations == 4
    assert args.max_steps == 5
    assert args.use_cpu is True and args.bf16 is False  # TRL's bf16 default would fail on a CPU
    assert args.output_dir == str(tmp_path / "trl")
    assert args.logging_steps == 1
    assert options.eval_before is True


def test_unknown_key_names_the_closest_fields(tmp_path):
    with pytest.raises(ConfigError) as caught:
        grpo_config(_job({"learning_rat": 1e-4}, tmp_path), tmp_path)
    message = str(caught.value)
    assert "learning_rat" in message and "learning_rate" in message
    assert caught.value.problems[0][0] == "backends.trl.learning_rat"


def test_generation_only_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="repetition_penalty"):
        grpo_config(_job({"repetition_penalty": 1.2}, tmp_path), tmp_path)
    args, _ = grpo_config(_job({"repetition_penalty": 1.0, "max_steps": 1}, tmp_path), tmp_path)
    assert args.repetition_penalty == 1.0


def test_bf16_on_a_cpu_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no GPU"):
        grpo_config(_job({"bf16": True}, tmp_path), tmp_path)


def test_aworld_options_are_validated():
    args, options = split_section({"beta": 0.0, "aworld": {"trajectory_every": 5, "targets": {"max_minutes": 10}}})
    assert args == {"beta": 0.0}
    assert options.trajectory_every == 5 and options.targets.max_minutes == 10
    with pytest.raises(ConfigError, match="backends.trl.aworld.plott"):
        split_section({"aworld": {"plott": True}})


def test_invalid_grpo_values_name_the_section(tmp_path):
    # TRL requires the generation batch to be a multiple of num_generations
    with pytest.raises(Exception, match="backends.trl"):
        grpo_config(_job({"per_device_train_batch_size": 6, "num_generations": 4}, tmp_path), tmp_path)


def test_torch_threads_auto_uses_the_free_cores(monkeypatch):
    import os

    from aworld_trl.options import free_cpus

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    assert free_cpus() == 1  # a busy machine: never fewer than one
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert free_cpus() == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.9, 0.9))
    assert free_cpus() == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.5, 1.5))
    assert free_cpus() == 1
    _, options = split_section({"aworld": {"torch_threads": "auto"}})
    assert options.torch_threads == "auto"
    with pytest.raises(ConfigError, match="torch_threads"):
        split_section({"aworld": {"torch_threads": 0}})


def test_max_failed_steps_moved_to_the_job_rollout_section(tmp_path):
    with pytest.raises(ConfigError, match=r"backends.trl.aworld.max_failed_steps moved to the job's "
                                          r"rollout.max_failed_steps.*'rollout.max_failed_steps: 2'") as caught:
        grpo_config(_job({"aworld": {"max_failed_steps": 2}}, tmp_path), tmp_path)
    assert caught.value.problems[0][0] == "backends.trl.aworld.max_failed_steps"
    job = load_job_config(data={"name": "t", "rollout": {"max_failed_steps": 2}})
    assert job.rollout.max_failed_steps == 2  # the one setting


# -- parameter sharding: refused at plan time and when the trainer is built ------------------------

ZERO3 = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}


def _sharded_jobs(tmp_path):
    """(description, backends.trl section) for every way the job itself asks for sharding."""
    path = tmp_path / "ds_zero3.json"
    path.write_text(json.dumps(ZERO3))
    return [
        ("deepspeed mapping", {"deepspeed": ZERO3}, "ZeRO stage 3"),
        ("deepspeed file", {"deepspeed": str(path)}, "ds_zero3.json"),
        ("fsdp", {"fsdp": "full_shard auto_wrap"}, "backends.trl.fsdp='full_shard auto_wrap'"),
        ("fsdp flag", {"fsdp": True}, "backends.trl.fsdp=True"),
    ]


def test_zero3_and_fsdp_are_refused_when_the_trainer_is_built(tmp_path):
    for _, section, needle in _sharded_jobs(tmp_path):
        with pytest.raises(ConfigError) as caught:
            grpo_config(_job(section, tmp_path), tmp_path)
        message = str(caught.value)
        assert needle in message and "verl or areal backend" in message, message
        assert "stage to 2 or lower" in message or "Remove backends.trl.fsdp" in message
    from aworld_trl.trainer import train

    job = {"name": "t", "model": {"path": str(tmp_path / "model")}, "reward": {"name": "gsm8k"},
           "train_dataset": {"path": str(tmp_path / "train.jsonl")}, "backends": {"trl": {"deepspeed": ZERO3}}}
    with pytest.raises(ConfigError, match="ZeRO stage 3"):  # before any model or data is loaded
        train(job, str(tmp_path / "run"))


def test_zero3_and_fsdp_are_refused_at_plan_time(tmp_path):
    from aworld_core.jobs import plan_job

    for _, section, needle in _sharded_jobs(tmp_path):
        job = load_job_config(data={"name": "t", "backend": "trl", "backends": {"trl": section},
                                    "output_dir": str(tmp_path)})
        with pytest.raises(ConfigError, match="shards the model's parameters") as caught:
            plan_job("trl", job)
        assert needle in str(caught.value)
    plain = load_job_config(data={"name": "t", "backend": "trl", "output_dir": str(tmp_path),
                                  "backends": {"trl": {"deepspeed": {"zero_optimization": {"stage": 2}}}}})
    if importlib.util.find_spec("deepspeed") is None:  # planning builds the GRPOConfig, as the run does
        with pytest.raises(UsageError, match="deepspeed"):
            plan_job("trl", plain)
        return
    plan, _ = plan_job("trl", plain)  # ZeRO-2 keeps whole parameters on every rank: accepted
    assert plan.entrypoint == "aworld_trl.trainer:train"


def test_sharding_from_accelerate_launch_is_refused(tmp_path, monkeypatch):
    from aworld_trl.options import refuse_sharded_training

    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(ConfigError, match="ACCELERATE_DEEPSPEED_ZERO_STAGE.*Use zero_stage 2 or lower"):
        grpo_config(_job({}, tmp_path), tmp_path)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    refuse_sharded_training({})
    config = tmp_path / "accelerate_ds.json"
    config.write_text(json.dumps(ZERO3))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(config))
    with pytest.raises(ConfigError, match="accelerate_ds.json"):
        refuse_sharded_training({})
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigError, match="ACCELERATE_USE_FSDP=true.*Launch without FSDP"):
        grpo_config(_job({}, tmp_path), tmp_path)


def test_an_unreadable_deepspeed_config_is_an_error_not_a_guess(tmp_path):
    with pytest.raises(ConfigError, match="neither a DeepSpeed JSON file"):
        grpo_config(_job({"deepspeed": str(tmp_path / "missing.json")}, tmp_path), tmp_path)
