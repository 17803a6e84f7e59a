"""What TRL users expect of the trl backend, with TRL's real trainer on the CPU and the tiny model
from ``aworld_core.testing``: a TRL-style reward function, ``resume_from_checkpoint`` (steps and the
optimizer's state continue), LoRA through peft (the saved adapter loads), ``report_to: [tensorboard]``
(event files written), and each of these refused at planning time when it cannot work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.jobs import plan_job
from aworld_core.validation import validate_job

REWARDS = '''
import zlib

CALLS = []

def trl_reward(completions, ground_truth, **kwargs):
    """TRL's convention: a batch of completions (conversational: lists of messages) and the dataset's
    columns as lists; one float per completion. Full credit for the answer, else a score that differs
    between different texts (an untrained tiny model rarely answers: GRPO needs spread in a group)."""
    CALLS.append({"n": len(completions), "keys": sorted(kwargs)})
    texts = [completion[-1]["content"] for completion in completions]
    return [1.0 if str(truth) in text else (zlib.crc32(text.encode()) % 100) / 200
            for text, truth in zip(texts, ground_truth)]
'''


@pytest.fixture(scope="module")
def tiny_model_dir() -> Path:
    from aworld_core.testing import get_tiny_model_dir

    return get_tiny_model_dir()


@pytest.fixture
def reward_file(tmp_path: Path) -> Path:
    path = tmp_path / "trl_rewards.py"
    path.write_text(REWARDS)
    return path


def _job(tmp_path: Path, model_dir: Path, reward_file: Path, write_samples: Any, *, output: str = "run",
         aworld: dict[str, Any] | None = None, **trl: Any) -> dict[str, Any]:
    return {
        "name": "trl-conventions",
        "backend": "trl",
        "output_dir": str(tmp_path / output),
        "model": {"path": str(model_dir)},
        "agent": {"name": "plain", "max_steps": 1},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 8))},
        "reward": {"name": f"{reward_file}:trl_reward"},
        "rollout": {"concurrency": 4, "episode_timeout_s": 120},
        "backends": {"trl": {
            "max_steps": 2, "per_device_train_batch_size": 4, "num_generations": 2, "learning_rate": 1e-3,
            "max_completion_length": 8, "beta": 0.0,
            "aworld": {"progress": False, "print_every": 0, "eval_before": False, "eval_after": False,
                       "plot": False, "trajectory_every": 0, **(aworld or {})},
            **trl,
        }},
    }


def _adam_steps(checkpoint: Path) -> set[int]:
    import torch

    state = torch.load(checkpoint / "optimizer.pt", map_location="cpu", weights_only=False)["state"]
    return {int(entry["step"]) for entry in state.values()}


@pytest.mark.slow
def test_resume_from_checkpoint_continues_the_step_count_and_the_optimizer(
    tmp_path: Path, tiny_model_dir: Path, reward_file: Path, write_samples: Any
) -> None:
    """Two steps saved as checkpoint-2; a second run to max_steps 4 with resume_from_checkpoint: true
    starts at step 3 with Adam's moments (its per-parameter step count reaches 4, not 2). The reward
    is a TRL-style function, called once per episode with a batch of one."""
    from aworld_trl.trainer import train

    first = _job(tmp_path, tiny_model_dir, reward_file, write_samples, save_strategy="steps", save_steps=2)
    result = train(first, first["output_dir"])
    assert result.metrics["steps"] == 2
    saved = Path(first["output_dir"]) / "trl" / "checkpoint-2"
    assert json.loads((saved / "trainer_state.json").read_text())["global_step"] == 2
    assert _adam_steps(saved) == {2}

    second = _job(tmp_path, tiny_model_dir, reward_file, write_samples, save_strategy="steps", save_steps=2,
                  resume_from_checkpoint=True)
    second["backends"]["trl"]["max_steps"] = 4
    result = train(second, second["output_dir"])
    assert result.metrics["steps"] == 2  # this run's steps: 3 and 4
    steps = [json.loads(line)["step"] for line in (Path(second["output_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert steps[-2:] == [3, 4]
    resumed = Path(second["output_dir"]) / "trl" / "checkpoint-4"
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == 4
    assert _adam_steps(resumed) == {4}  # the optimizer state was loaded, then stepped twice more

    from aworld_core.imports import import_ref

    calls = import_ref(f"{reward_file}:trl_reward").__globals__["CALLS"]
    assert calls and all(call["n"] == 1 for call in calls)
    assert {"prompts", "completion_ids", "data_source", "extra_info"} <= set(calls[0]["keys"])


def test_resume_without_a_checkpoint_is_refused_when_planning(
    tmp_path: Path, tiny_model_dir: Path, reward_file: Path, write_samples: Any
) -> None:
    for value, message in ((True, "has no checkpoint-N directory"), ("nowhere", "is not a checkpoint of a TRL run")):
        job = load_job_config(data=_job(tmp_path, tiny_model_dir, reward_file, write_samples,
                                        resume_from_checkpoint=value))
        with pytest.raises(ConfigError, match=message):
            plan_job("trl", job)


@pytest.mark.slow
def test_lora_trains_an_adapter_that_peft_loads_and_report_to_tensorboard_writes_events(
    tmp_path: Path, tiny_model_dir: Path, reward_file: Path, write_samples: Any
) -> None:
    pytest.importorskip("tensorboard")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from aworld_trl.trainer import train

    job = _job(tmp_path, tiny_model_dir, reward_file, write_samples,
               aworld={"lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}})
    job["logging"] = {"report_to": ["tensorboard"]}
    validate_job("trl", load_job_config(data=job))
    result = train(job, job["output_dir"])
    checkpoint = Path(result.artifacts["checkpoint"])
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    assert config["r"] == 4 and sorted(config["target_modules"]) == ["q_proj", "v_proj"]
    assert not (checkpoint / "model.safetensors").exists()  # the adapter only

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = PeftModel.from_pretrained(base, str(checkpoint))
    trained = {k: v for k, v in model.state_dict().items() if "lora_B" in k}
    assert trained and any(v.abs().sum().item() > 0 for v in trained.values())  # B starts at 0: it moved
    merged = model.merge_and_unload()
    assert any(not (merged.state_dict()[k] == v).all() for k, v in before.items() if "q_proj.weight" in k)

    events = list((Path(job["output_dir"]) / "trl").rglob("events.out.tfevents.*"))
    assert events, "report_to: [tensorboard] wrote no event file"


def test_lora_and_report_to_are_checked_when_planning(
    tmp_path: Path, tiny_model_dir: Path, reward_file: Path, write_samples: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("peft", "trackio") else real(name, *a))
    job = load_job_config(data=_job(tmp_path, tiny_model_dir, reward_file, write_samples, aworld={"lora": {"r": 4}}))
    with pytest.raises(UsageError, match=r"pip install 'aworld-trl\[peft\]'"):
        plan_job("trl", job)
    data = _job(tmp_path, tiny_model_dir, reward_file, write_samples)
    data["logging"] = {"report_to": ["trackio"]}
    with pytest.raises(ConfigError, match="'trackio' \\(install it with: pip install trackio\\)"):
        validate_job("trl", load_job_config(data=data))
    data = _job(tmp_path, tiny_model_dir, reward_file, write_samples, report_to=["trackio"])
    with pytest.raises(ConfigError, match="pip install trackio"):  # backends.trl.report_to too
        plan_job("trl", load_job_config(data=data))
    with pytest.raises(ConfigError, match="lora.rank: .*Extra inputs"):
        plan_job("trl", load_job_config(data=_job(tmp_path, tiny_model_dir, reward_file, write_samples,
                                                   aworld={"lora": {"rank": 4}})))
