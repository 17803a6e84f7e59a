"""SFT on collected trajectories with verl: the dry-run plans verl's own SFT trainer (torchrun -m
verl.trainer.sft_trainer), its overrides load against verl's hydra config, and the parquet written
from the episodes loads through verl's real ``MultiTurnSFTDataset`` with the assistant turns
(and only them) in the loss mask."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from aworld_core.export import write_jsonl
from aworld_core.run import main
from aworld_core.schemas import Episode, EpisodeStatus

pytest.importorskip("verl.trainer.sft_trainer")

MESSAGES = [
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}]},
    {"role": "tool", "tool_call_id": "c0", "name": "calc", "content": "5"},
    {"role": "assistant", "content": "<answer>5</answer>"},
]
TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Add.", "parameters": {
    "type": "object", "properties": {"expr": {"type": "string", "description": "a+b"}}, "required": ["expr"]}}}]


def _job_file(tmp_path: Path, model_dir: Path, **sft: object) -> Path:
    episodes = [Episode(task_id=f"t{i}", agent_id="a", status=EpisodeStatus.SUCCESS, reward=1.0, messages=MESSAGES)
                for i in range(4)]
    write_jsonl(episodes[:3], tmp_path / "train.jsonl")
    write_jsonl(episodes[3:], tmp_path / "val.jsonl")
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    job = {"name": "verl-sft", "backend": "verl", "output_dir": str(tmp_path / "run"), "model": {"path": str(model_dir)},
           "sft": {"train": "train.jsonl", "val": "val.jsonl", "tools": "tools.json", **sft},
           "backends": {"verl": {"trainer": {"total_epochs": 2}, "data.micro_batch_size_per_gpu": 1}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_dry_run_plans_verls_sft_trainer(tmp_path, tiny_model_dir):
    out = io.StringIO()
    assert main(["--config", str(_job_file(tmp_path, tiny_model_dir)), "--dry-run"], out=out) == 0
    text = out.getvalue()
    assert "torchrun --standalone --nnodes=1 --nproc_per_node=1 -m verl.trainer.sft_trainer" in text
    for piece in (f"data.train_files=[{tmp_path / 'run' / 'verl/sft/train.parquet'}]", "data.messages_key=messages",
                  "data.tools_key=tools", f"model.path={tiny_model_dir}", "trainer.total_epochs=2",
                  "data.micro_batch_size_per_gpu=1"):
        assert piece in text
    # the overrides are ones verl's own config takes
    from hydra import compose, initialize_config_module

    from aworld_core.config import load_job_config
    from aworld_verl.sft import build_sft_plan

    job = load_job_config(tmp_path / "job.yaml")
    plan = build_sft_plan(job, tmp_path / "run")
    overrides = [arg for arg in plan.command[6:]]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="sft_trainer_engine", overrides=overrides)
    assert config.data.messages_key == "messages" and config.trainer.total_epochs == 2


def test_tokens_form_is_refused(tmp_path, tiny_model_dir):
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err):
        code = main(["--config", str(_job_file(tmp_path, tiny_model_dir, format="tokens")), "--dry-run"])
    assert code == 2 and "token-exact" in err.getvalue()


def test_written_parquet_loads_in_verls_multiturn_dataset(tmp_path, tiny_model_dir):
    from omegaconf import OmegaConf
    from transformers import PreTrainedTokenizerFast
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from aworld_core.config import load_job_config
    from aworld_verl.sft import write_sft_datasets

    job = load_job_config(_job_file(tmp_path, tiny_model_dir))
    written = write_sft_datasets(job, tmp_path / "run")
    tok = PreTrainedTokenizerFast.from_pretrained(str(tiny_model_dir))
    config = OmegaConf.create({"max_length": 512, "truncation": "error", "messages_key": "messages",
                               "tools_key": "tools", "pad_mode": "no_padding"})
    dataset = MultiTurnSFTDataset(parquet_files=[written["verl/sft/train.parquet"]], tokenizer=tok, config=config)
    item = dataset[0]
    ids, mask = item["input_ids"].tolist(), item["loss_mask"].tolist()
    trained = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert "<answer>5</answer>" in trained and '"expr": "2+3"' in trained
    assert "What is 2 + 3?" not in trained and "<tool_response>" not in trained
    assert '"name": "calc"' in tok.decode(ids)  # the tool list reached the prompt
