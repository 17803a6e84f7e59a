"""ms-swift GRPO with its own colocated vLLM engine on the CPU, through aworld-swift's scheduler.

Launched as a user does (``python -m aworld_core.run``, ``use_vllm: true``, ``vllm_mode: colocate``):
ms-swift's ``GRPOVllmEngine`` (vLLM's CPU build, in the trainer process) samples every turn, our
scheduler runs each trajectory as a core episode against the real MCP server, and between steps
ms-swift's weight sync goes through vLLM's in-place reload (``aworld_swift.vllm_cpu_sync``).
Two test plugins record what the trainer encodes (``tests/swift/record_batches.py``) and what vLLM
sampled and served around each sync (``record_vllm.py``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from swift_testkit import MODEL_TYPE, SYSTEM_PROMPT, TEMPLATE, add_question, read_jsonl

from aworld_core.export import read_jsonl as read_episodes
from aworld_core.run import main

HERE = Path(__file__).resolve().parent
SWIFT_TESTS = HERE.parent / "swift"
REWARD = f"{SWIFT_TESTS / 'swift_rewards.py'}:tool_answer"


def test_weight_sync_seam_is_what_the_patch_wraps():
    """Canary: ms-swift's private colocate weight-sync functions are still there, with these shapes."""
    from aworld_swift import vllm_cpu_sync

    vllm_cpu_sync.check_seams()
    assert vllm_cpu_sync.cpu_build_installed()
    assert vllm_cpu_sync.install() is True
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    assert {"weights_iterator", "is_checkpoint_format"} <= set(
        __import__("inspect").signature(CPUModelRunner.reload_weights).parameters)


def test_plan_turns_off_vllm_plugins_for_colocated_vllm_cpu(tmp_path, monkeypatch):
    """ms-swift's vLLM plugin needs torchvision (no CPU wheel): the plan's environment disables vLLM plugins."""
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    (tmp_path / "train.jsonl").write_text(json.dumps({"id": "a", "question": add_question(1, 2), "answer": "3"}) + "\n")
    job = {"name": "plan", "backend": "swift", "output_dir": str(tmp_path / "run"), "model": {"path": str(tmp_path)},
           "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT}, "train_dataset": {"path": "train.jsonl"},
           "reward": {"name": REWARD},
           "backends": {"swift": {"model_type": MODEL_TYPE, "template": TEMPLATE, "use_vllm": True}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    out = io.StringIO()
    assert main(["--config", str(tmp_path / "job.yaml"), "--dry-run"], out=out) == 0
    assert "VLLM_PLUGINS=none" in out.getvalue()
    job["backends"]["swift"]["use_vllm"] = False
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    out = io.StringIO()
    assert main(["--config", str(tmp_path / "job.yaml"), "--dry-run"], out=out) == 0
    assert "VLLM_PLUGINS" not in out.getvalue()


def _job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any]) -> Path:
    rows = [{"id": f"add-{i}", "question": add_question(a, b), "answer": str(a + b)}
            for i, (a, b) in enumerate([(1, 2), (3, 4)])]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {
        "name": "swift-vllm-colocate-test",
        "backend": "swift",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT, "max_steps": 3, "mcp_config": mcp_config},
        "train_dataset": {"path": str(tmp_path / "train.jsonl")},
        "reward": {"name": REWARD, "trajectory_aware": True},
        "rollout": {"max_turns": 3, "episode_timeout_s": 120},
        "backends": {"swift": {
            "model_type": MODEL_TYPE, "template": TEMPLATE, "tuner_type": "full", "torch_dtype": "float32",
            "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.1,
            "vllm_max_model_len": 1024, "vllm_enforce_eager": True,
            "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 48,
            "max_steps": 2, "temperature": 1.0, "learning_rate": 1e-3, "beta": 0.0, "logging_steps": 1,
            "save_strategy": "no", "dataloader_num_workers": 0,
            "external_plugins": [str(SWIFT_TESTS / "record_batches.py"), str(HERE / "record_vllm.py")],
        }},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.slow
def test_grpo_steps_with_colocated_vllm_on_cpu(tmp_path, vllm_tool_model_dir, mcp_config, monkeypatch):
    batches_file, vllm_file = tmp_path / "batches.jsonl", tmp_path / "vllm.jsonl"
    monkeypatch.setenv("AWORLD_SWIFT_TEST_RECORD", str(batches_file))
    monkeypatch.setenv("AWORLD_SWIFT_VLLM_RECORD", str(vllm_file))
    out = io.StringIO()
    assert main(["--config", str(_job(tmp_path, vllm_tool_model_dir, mcp_config))], out=out) == 0, out.getvalue()
    run = tmp_path / "run"

    log = read_jsonl(run / "swift" / "logging.jsonl")
    steps = [entry for entry in log if "reward" in entry]
    assert len(steps) == 2 and any(float(entry["grad_norm"]) > 0 for entry in steps)

    records = read_jsonl(vllm_file)
    samples = [r for r in records if r["kind"] == "sample"]
    syncs = [r for r in records if r["kind"] == "sync"]
    # the sync before step 2 loads the step-1 policy into vLLM: its embedding differed (AdamW moved it even
    # where a group's advantages were 0), afterwards it is exactly the policy's and vLLM's logprobs moved
    assert [s["step"] for s in syncs] == [0, 1], syncs
    assert syncs[0]["before"]["embed_diff"] == 0.0  # the engine starts from the same checkpoint
    second = syncs[1]
    assert second["before"]["embed_diff"] > 0.0 and second["after"]["embed_diff"] == 0.0
    assert second["after"]["greedy_logprobs"] != second["before"]["greedy_logprobs"]

    # token fidelity: every turn our scheduler trained is exactly a vLLM output's token ids
    sampled = {tuple(s["token_ids"]) for s in samples}
    batches = read_jsonl(batches_file)
    episodes = {e.id: e for e in read_episodes(run / "trajectories.jsonl")}
    assert sorted({b["step"] for b in batches}) == [0, 1] and len(batches) == 8
    turns = 0
    for batch in batches:
        episode = episodes[batch["rollout_infos"]["aworld"]["episode_id"]]
        view = episode.training
        assert view is not None and episode.status.value == "success"
        assert batch["input_ids"] == [*view.prompt_ids, *view.response_ids]
        spans, current = [], []
        for token, mask in zip(view.response_ids, view.response_mask, strict=True):
            if mask:
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        if current:
            spans.append(current)
        for span in spans:
            assert tuple(span) in sampled, span
            turns += 1
    assert turns >= len(batches)
    assert "done: backend=swift" in out.getvalue()
