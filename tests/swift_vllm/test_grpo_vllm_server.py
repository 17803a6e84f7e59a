"""ms-swift's server mode on the CPU: ``swift rollout`` + ``swift rlhf --vllm_mode server`` from our plan.

Launched as a user does (``python -m aworld_core.run``, ``use_vllm: true``, ``vllm_mode: server``):
the launch starts ms-swift's rollout server (vLLM's CPU build; our scheduler runs each trajectory
as a core episode against the real MCP server there), waits for it, runs ms-swift's GRPO trainer,
and stops the server. Between steps the trainer's weights reach the server's vLLM over the TCP
store of the group ms-swift creates (``aworld_swift.server_sync``, ``aworld_swift.server_worker``).
A test plugin (``record_server.py``) records, per generation batch, the logprobs the server
sampled with and the policy's teacher-forced logprobs of the same tokens.
"""

from __future__ import annotations

import io
import json
import threading
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
# vLLM's CPU kernels and HF transformers in float32 on the same weights and tokens: measured max
# |difference| of a token's logprob 5.3e-6 over two runs (docs/backend-swift.md); the initial
# weights are off from the step-1 policy on the step-2 tokens by 5e-3 to 1.2e-2 when step 1 had no
# gradient (AdamW's weight decay still moves them) and by up to 12 nats when it had one (measured),
# so the tolerance tells a synced server from a stale one
TOLERANCE = 1e-4


def test_server_mode_seams_are_what_the_patch_wraps():
    """Canary: ms-swift's server-mode functions (trainer's sending, the rollout server's device check,
    engine construction and worker extension) and vLLM's pieces underneath are still what
    ``aworld_swift.server_sync`` / ``server_worker`` were written for."""
    import inspect

    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from aworld_swift import server_sync

    server_sync.check_seams()
    assert server_sync.install() is True
    assert {"weights_iterator", "is_checkpoint_format"} <= set(inspect.signature(CPUModelRunner.reload_weights).parameters)
    assert {"store", "rank", "world_size"} <= set(StatelessProcessGroup.__dataclass_fields__)
    # without an NCCL library vLLM's communicator disables itself and keeps its group and rank:
    # what server_sync.uses_tcp recognises
    source = inspect.getsource(PyNcclCommunicator.__init__)
    assert "self.group = group" in source and "self.disabled = True" in source
    from aworld_swift.server_worker import CpuWeightSyncExtension

    assert server_sync.CPU_EXTENSION == f"{CpuWeightSyncExtension.__module__}.{CpuWeightSyncExtension.__name__}"


def test_tcp_broadcast_moves_exact_bytes_and_frees_the_store():
    """Two ranks of a real ``StatelessProcessGroup`` on 127.0.0.1: float32 and bfloat16 tensors (and
    a flattened uint8 bucket) arrive bit for bit; nothing stays in the store."""
    import torch
    from vllm.distributed.utils import StatelessProcessGroup

    from aworld_core.vllm_server import free_port
    from aworld_swift.server_sync import KEY_PREFIX, tcp_broadcast

    port = free_port()
    sent = [torch.randn(3, 5), torch.randn(7).to(torch.bfloat16), torch.arange(11, dtype=torch.uint8)]
    groups: dict[int, Any] = {}

    def join(rank: int) -> None:
        groups[rank] = StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=rank, world_size=2)

    server = threading.Thread(target=join, args=(0,))
    server.start()
    join(1)
    server.join()
    received = [torch.empty_like(t) for t in sent]
    reader = threading.Thread(target=lambda: [tcp_broadcast(groups[0], t, src=1) for t in received])
    reader.start()
    for tensor in sent:
        tcp_broadcast(groups[1], tensor, src=1)
    reader.join()
    for got, want in zip(received, sent, strict=True):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    store = groups[0].store
    assert not any(store.check([f"{KEY_PREFIX}/1/{i}"]) for i in range(len(sent)))


def test_plan_starts_the_rollout_server_with_the_cpu_settings(tmp_path, monkeypatch):
    """Server mode on vLLM's CPU build: the dry run shows both commands, the server's extra environment
    (where the weight-sync group listens, vLLM plugins off, a 1 GiB KV cache) and that launching starts it."""
    for key in ("VLLM_PLUGINS", "VLLM_CPU_KVCACHE_SPACE"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "train.jsonl").write_text(json.dumps({"id": "a", "question": add_question(1, 2), "answer": "3"}) + "\n")
    job = {"name": "plan", "backend": "swift", "output_dir": str(tmp_path / "run"), "model": {"path": str(tmp_path)},
           "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT}, "train_dataset": {"path": "train.jsonl"},
           "reward": {"name": REWARD},
           "backends": {"swift": {"model_type": MODEL_TYPE, "template": TEMPLATE, "use_vllm": True,
                                  "vllm_mode": "server", "rollout": {"port": 8765}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    out = io.StringIO()
    assert main(["--config", str(tmp_path / "job.yaml"), "--dry-run"], out=out) == 0
    text = out.getvalue()
    assert "note: server mode: launching starts the rollout server" in text
    config = yaml.safe_load(text.split("--- resolved backend config ---\n", 1)[1])
    server = config["rollout_server"]
    assert server["start"] is True and server["command"][3] == "rollout"
    assert server["env"] == {"AWORLD_SWIFT_SYNC_HOST": "127.0.0.1", "VLLM_PLUGINS": "none", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert server["args"]["port"] == 8765 and config["swift_args"]["vllm_server_port"] == [8765]


def _job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any]) -> Path:
    from aworld_core.vllm_server import free_port

    rows = [{"id": "add-0", "question": add_question(1, 2), "answer": "3"},
            {"id": "add-1", "question": add_question(3, 4), "answer": "7"},
            {"id": "add-broken", "question": add_question(2, 5), "answer": "7", "extra_info": {"break_reward": True}}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {
        "name": "swift-vllm-server-test",
        "backend": "swift",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT, "max_steps": 3, "mcp_config": mcp_config},
        "train_dataset": {"path": str(tmp_path / "train.jsonl")},
        "reward": {"name": f"{HERE / 'closeness_reward.py'}:closeness", "trajectory_aware": True},
        "rollout": {"max_turns": 3, "episode_timeout_s": 120},
        "backends": {"swift": {
            "model_type": MODEL_TYPE, "template": TEMPLATE, "tuner_type": "full", "torch_dtype": "float32",
            "use_vllm": True, "vllm_mode": "server", "vllm_server_group_port": free_port(),
            "num_generations": 2, "per_device_train_batch_size": 6, "max_completion_length": 48,
            "max_steps": 2, "temperature": 1.0, "learning_rate": 1e-2, "beta": 0.0, "logging_steps": 1,
            "save_strategy": "no", "dataloader_num_workers": 0,
            "external_plugins": [str(SWIFT_TESTS / "record_batches.py"), str(HERE / "record_server.py")],
            "rollout": {"port": free_port(), "vllm_max_model_len": 1024, "vllm_enforce_eager": True},
        }},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _hf_logprobs(model: Any, input_ids: list[int], labels: list[int]) -> list[float]:
    """Teacher-forced logprobs of the labelled tokens under ``model`` (HF transformers)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([input_ids])).logits[0].float()
    logps = torch.log_softmax(logits, dim=-1)
    return [float(logps[t - 1, labels[t]]) for t in range(1, len(labels)) if labels[t] != -100]


@pytest.mark.slow
def test_grpo_steps_with_a_swift_rollout_server_on_cpu(tmp_path, vllm_tool_model_dir, mcp_config, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    batches_file, server_file = tmp_path / "batches.jsonl", tmp_path / "server.jsonl"
    monkeypatch.setenv("AWORLD_SWIFT_TEST_RECORD", str(batches_file))
    monkeypatch.setenv("AWORLD_SWIFT_SERVER_RECORD", str(server_file))
    out = io.StringIO()
    assert main(["--config", str(_job(tmp_path, vllm_tool_model_dir, mcp_config))], out=out) == 0, out.getvalue()
    run = tmp_path / "run"
    assert "done: backend=swift" in out.getvalue() and "rollout_server_startup_s: " in out.getvalue()
    assert "Uvicorn running on http://127.0.0.1" in (run / "rollout_server.log").read_text()  # ms-swift's own server

    log = read_jsonl(run / "swift" / "logging.jsonl")
    steps = [entry for entry in log if "reward" in entry]
    assert len(steps) == 2 and any(float(entry["grad_norm"]) > 0 for entry in steps)

    rows = read_jsonl(server_file)
    assert sorted({r["step"] for r in rows}) == [0, 1] and len(rows) == 12
    episodes = {e.id: e for e in read_episodes(run / "trajectories.jsonl")}  # written by the rollout server
    initial = AutoModelForCausalLM.from_pretrained(str(vllm_tool_model_dir), torch_dtype=torch.float32).eval()
    stale_gap = 0.0
    for row in rows:
        info = row["rollout_infos"]["aworld"]
        episode = episodes[info["episode_id"]]
        # rollout importance sampling stays on for every batch, the failed trajectories' batches included
        assert row["is_on"], row
        flat = [lp for turn in row["rollout_logprobs"] for lp in turn]
        # the trainer holds exactly the logprobs the server sampled with, one per trained token
        assert row["server"] == pytest.approx(flat, abs=1e-6)
        view = episode.training
        if info["trained"]:
            assert episode.status.value == "success"
            assert flat == [lp for lp, m in zip(view.response_logprobs, view.response_mask, strict=True) if m]
        else:  # its reward failed on purpose: one label (advantage 0), its one logprob
            assert episode.task_id == "add-broken" and info["reward_errors"]
            assert flat == [view.response_logprobs[-1]]
        # the server's weights are the policy's: its logprobs are HF's, teacher-forced, on the same tokens
        gap = max(abs(a - b) for a, b in zip(row["server"], row["policy"], strict=True))
        assert gap <= TOLERANCE, (row["step"], gap)
        before = _hf_logprobs(initial, row["input_ids"], row["labels"])
        assert len(before) == len(flat)
        if row["step"] == 0:  # nothing trained yet: the initial weights
            assert max(abs(a - b) for a, b in zip(before, flat, strict=True)) <= TOLERANCE
        else:
            stale_gap = max(stale_gap, max(abs(a - b) for a, b in zip(before, flat, strict=True)))
    # a server still holding the initial weights would be told apart: the step-1 policy differs
    assert stale_gap > 10 * TOLERANCE, stale_gap

    # token fidelity as in colocate mode: what the trainer encodes is the episode's view
    batches = read_jsonl(batches_file)
    for batch in batches:
        view = episodes[batch["rollout_infos"]["aworld"]["episode_id"]].training
        if view is not None:
            assert batch["input_ids"] == [*view.prompt_ids, *view.response_ids]
    # the launch stopped the server: nothing listens on its port any more
    import socket

    port = yaml.safe_load((tmp_path / "job.yaml").read_text())["backends"]["swift"]["rollout"]["port"]
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
