"""aworld-trl with ``use_vllm: true``: TRL's real ``GRPOTrainer`` trains on episodes that vLLM
sampled (calculator over MCP), the weights go into the engine every step, the trained tokens are
exactly the sampled ones, and what vLLM samples after training is the trained model's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from teacher_forcing import hf_logprobs

from aworld_core.errors import ConfigError
from aworld_core.export import read_jsonl

TOLERANCE = 0.03
REWARD_FILE = Path(__file__).resolve().parent / "episode_rewards.py"


def write_samples(path: Path, n: int, split: str = "train") -> Path:
    from aworld_cpu_grpo_demo.tasks import load_arith

    with path.open("w", encoding="utf-8") as handle:
        for sample in load_arith(n=n, seed=0, split=split):
            handle.write(json.dumps(sample.model_dump(mode="json")) + "\n")
    return path


def job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any], **trl: Any) -> dict[str, Any]:
    return {
        "name": "trl-vllm-test",
        "backend": "trl",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "calc-agent", "max_steps": 3, "mcp_config": mcp_config},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 8))},
        "test_dataset": {"path": str(write_samples(tmp_path / "test.jsonl", 4, split="test"))},
        "reward": {"name": f"{REWARD_FILE}:index_reward", "trajectory_aware": True},
        "rollout": {"concurrency": 8, "episode_timeout_s": 120},
        "backends": {"trl": {
            "max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 3e-3,
            "temperature": 1.0, "max_completion_length": 64, "beta": 0.0, "use_vllm": True,
            "vllm_gpu_memory_utilization": 0.05,
            "aworld": {"progress": False, "print_every": 0}, **trl,
        }},
    }


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("vllm_mode", "server", "colocated"),
    ("vllm_tensor_parallel_size", 2, "colocated"),
    ("vllm_importance_sampling_mode", "token_mask", "TRL's own vLLM generation"),
])
def test_vllm_settings_it_cannot_honour_are_refused(tmp_path, key, value, needle):
    from aworld_core.worker import load_job
    from aworld_trl.options import grpo_config

    config = job(tmp_path, tmp_path, {}, **{key: value})
    with pytest.raises(ConfigError, match=needle):
        grpo_config(load_job(config), tmp_path / "out")
    config["backends"]["trl"]["use_vllm"] = False
    with pytest.raises(ConfigError, match="use_vllm: true"):
        grpo_config(load_job(config), tmp_path / "out")


@pytest.mark.slow
def test_grpo_samples_with_vllm_syncs_weights_and_trains_the_sampled_tokens(tmp_path, tool_model_dir, calculator):
    import torch
    from safetensors.torch import load_file

    from aworld_trl.trainer import train

    result = train(job(tmp_path, tool_model_dir, calculator.mcp_config()), str(tmp_path / "run"))
    logged = [json.loads(line) for line in Path(result.artifacts["metrics"]).read_text().splitlines()]
    assert len(logged) == 2 and all(row.get("aworld/weight_sync_s") is not None for row in logged)
    assert result.metrics["vllm_start_seconds"] > 0

    # every step's episodes were sampled by that step's weights (version = step)
    episodes = list(read_jsonl(result.artifacts["trajectories"]))
    assert len(episodes) == 16
    steps = sorted({v for e in episodes if e.training for v, m in
                    zip(e.training.response_versions, e.training.response_mask, strict=True) if m})
    assert steps == [0, 1]

    # the trained weights changed, and what vLLM sampled after training is the trained model's
    checkpoint = Path(result.artifacts["checkpoint"])
    trained, initial = load_file(str(checkpoint / "model.safetensors")), load_file(str(tool_model_dir / "model.safetensors"))
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    worst_trained, worst_initial = 0.0, 0.0
    for episode in read_jsonl(result.artifacts["eval_after"]):
        view = episode.training
        if view is None:
            continue
        full = [*view.prompt_ids, *view.response_ids]
        now = hf_logprobs(checkpoint, full)[len(view.prompt_ids) - 1:]
        before = hf_logprobs(tool_model_dir, full)[len(view.prompt_ids) - 1:]
        for m, lp, a, b in zip(view.response_mask, view.response_logprobs, now, before, strict=True):
            if m:
                worst_trained, worst_initial = max(worst_trained, abs(lp - a)), max(worst_initial, abs(lp - b))
    print(f"after training: max |vLLM - HF(trained)| {worst_trained:.2e}, |vLLM - HF(initial)| {worst_initial:.2e}")
    assert worst_trained < TOLERANCE < worst_initial
