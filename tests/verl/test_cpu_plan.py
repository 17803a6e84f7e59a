"""The verl plan on a machine without a GPU (and with an external rollout server): what
``--dry-run`` shows, that verl's own config accepts it, and the refusals. The GPU plan (verl's own
vLLM replica) is checked by ``test_launch.py`` with ``backends.verl.aworld.device: gpu``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("verl.experimental.agent_loop")

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"


def _job_file(tmp_path: Path, model_dir: Path, aworld: dict[str, Any] | None = None, **verl: Any) -> Path:
    data = {
        "name": "cpu-plan",
        "backend": "verl",
        "model": {"path": str(model_dir)},
        "agent": {"name": "solver", "system_prompt": "Answer."},
        "train_dataset": {"path": "train.jsonl"},
        "reward": {"name": "gsm8k"},
        "output_dir": str(tmp_path / "out"),
        "backends": {"verl": {"aworld": aworld if aworld is not None else
                              {"device": "cpu", "rollout_server": {"python": str(VLLM_PYTHON)}}, **verl}},
    }
    (tmp_path / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _plan(path: Path) -> Any:
    from aworld_core.config import load_job_config
    from aworld_core.jobs import plan_job

    plan, _ = plan_job("verl", load_job_config(path))
    return plan


def _args(plan: Any) -> dict[str, str]:
    return {key: value.strip("'") for key, value in (arg.split("=", 1) for arg in plan.command[3:])}


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_cpu_plan_composes_and_validates_against_verls_config(tmp_path, tiny_model_dir):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl_testkit import compose_verl_config

    plan = _plan(_job_file(tmp_path, tiny_model_dir, **{"data.train_batch_size": 4,
                                                        "actor_rollout_ref.actor.ppo_mini_batch_size": 4}))
    config = compose_verl_config(plan.command[3:])
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert not need_reference_policy(config) and not need_critic(config)  # no ref model on a CPU
    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "external_vllm" and rollout.checkpoint_engine.backend == "naive"
    assert rollout.free_cache_engine is False and rollout.agent.num_workers == 1
    server = rollout.custom.external_vllm
    assert server.urls == [f"http://127.0.0.1:{_server(plan)['port']}"] and server.served_model_name == "policy"
    assert config.trainer.device == "cpu" and config.trainer.n_gpus_per_node == 1
    assert config.ray_kwargs.ray_init.num_gpus == 1 and config.ray_kwargs.ray_init.include_dashboard is False
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_PLATFORM == "cpu" and env.VLLM_NO_USAGE_STATS == "1" and env.RAY_USAGE_STATS_ENABLED == "0"
    assert env.VERL_FILE_LOGGER_PATH == str((tmp_path / "out" / "verl" / "metrics_raw.jsonl").resolve())
    actor = config.actor_rollout_ref.actor
    assert actor.strategy == "fsdp2" and actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert config.actor_rollout_ref.model.use_remove_padding is False
    assert list(actor.checkpoint.save_contents) == ["model", "optimizer", "extra", "hf_model"]
    assert list(config.trainer.logger) == ["console", "file"]
    assert config.reward.num_workers == 1 and config.data.dataloader_num_workers == 0
    assert config.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert config.data.train_batch_size == 4  # the user's key still wins
    # verl's replay buffer polls for finished rollouts every 0.25 s, not 2 s (a CPU step is seconds)
    from verl.trainer.ppo.v1 import get_trainer_cls

    from aworld_verl.sampler import AworldReplayBuffer

    buffer = get_trainer_cls("sync")(config).replay_buffer
    assert isinstance(buffer, AworldReplayBuffer) and buffer.poll_interval == 0.25
    assert plan.env["VERL_PLATFORM"] == "cpu" and plan.env["RAY_prestart_worker_first_driver"] == "0"


def _server(plan: Any) -> dict[str, Any]:
    return plan.config["aworld"]["rollout_server"]


def test_dry_run_prints_the_server_command_and_environment(tmp_path, tiny_model_dir):
    path = _job_file(tmp_path, tiny_model_dir, aworld={
        "device": "cpu", "rollout_server": {"python": str(VLLM_PYTHON), "env": {"VLLM_LOGGING_LEVEL": "WARNING"}}})
    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", "--config", str(path), "--dry-run"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_TOKEN": "hf_secret_4321"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "verl.trainer.main_ppo" in out and "actor_rollout_ref.rollout.name=external_vllm" in out
    assert f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model {tiny_model_dir}" in out
    assert "--dtype float32" in out and "VLLM_SERVER_DEV_MODE=1" in out and "VLLM_NO_USAGE_STATS=1" in out
    assert "VERL_PLATFORM=cpu" in out and "launch stops the server when main_ppo ends or fails" in out
    assert "VLLM_LOGGING_LEVEL=WARNING" in out and "hf_secret_4321" not in out
    assert "--- file" in out and "server_url: http://127.0.0.1:" in out  # the resolved backend config
    assert not (tmp_path / "out").exists()


def test_a_credential_in_the_server_env_is_refused_unprinted(tmp_path, tiny_model_dir):
    path = _job_file(tmp_path, tiny_model_dir, aworld={
        "device": "cpu", "rollout_server": {"python": str(VLLM_PYTHON), "env": {"VLLM_API_KEY": "sk-do-not-print-1234"}}})
    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", "--config", str(path), "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "VLLM_API_KEY" in proc.stderr and "environment you launch from" in proc.stderr
    assert "sk-do-not-print-1234" not in proc.stdout + proc.stderr


def test_a_running_server_is_used_as_given(tmp_path, tiny_model_dir):
    """``rollout_server.url`` (a separate inference fleet; also on a GPU machine): nothing is
    started, and on ``gpu`` the CPU settings stay out."""
    plan = _plan(_job_file(tmp_path, tiny_model_dir, aworld={"device": "gpu",
                                                              "rollout_server": {"url": "http://10.1.2.3:8000/"}}))
    args = _args(plan)
    assert args["actor_rollout_ref.rollout.name"] == "external_vllm"
    assert args["+actor_rollout_ref.rollout.custom.external_vllm.urls"] == "['http://10.1.2.3:8000']"
    assert "trainer.device" not in args and "VERL_PLATFORM" not in plan.env
    assert any("nothing is started" in note for note in plan.notes)
    assert _server(plan)["url"] == "http://10.1.2.3:8000/"


def test_no_server_on_a_cpu_is_refused_with_the_fix(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("AWORLD_VLLM_PYTHON", raising=False)
    path = _job_file(tmp_path, tiny_model_dir, aworld={"device": "cpu"})
    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", "--config", str(path), "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "rollout_server.python" in proc.stderr and "device: gpu" in proc.stderr
    bad = _job_file(tmp_path, tiny_model_dir, aworld={"device": "tpu"})
    proc = subprocess.run([sys.executable, "-m", "aworld_core.run", "--config", str(bad), "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "backends.verl.aworld.device" in proc.stderr


def test_relative_server_python_is_relative_to_the_job_file(tmp_path, tiny_model_dir):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    plan = _plan(_job_file(tmp_path, tiny_model_dir, aworld={"device": "cpu",
                                                              "rollout_server": {"python": "venv/bin/python"}}))
    assert _server(plan)["python"] == str(tmp_path / "venv" / "bin" / "python")
