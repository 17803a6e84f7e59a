"""SFT on collected trajectories with ms-swift: the dry-run plans ``swift sft`` with arguments
ms-swift's own parser takes, and the JSONL written from the episodes loads through ms-swift's
real dataset loader as agent rows (tool_call / tool_response roles, per-message loss)."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest
import yaml

from aworld_core.export import write_jsonl
from aworld_core.run import main
from aworld_core.schemas import Episode, EpisodeStatus

MESSAGES = [
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}]},
    {"role": "tool", "tool_call_id": "c0", "name": "calc", "content": "5"},
    {"role": "assistant", "content": "<answer>5</answer>"},
]
TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Add.",
                                           "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}]


def _job_file(tmp_path: Path, **sft: object) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    episodes = [Episode(task_id=f"t{i}", agent_id="a", status=EpisodeStatus.SUCCESS, reward=1.0, messages=MESSAGES)
                for i in range(3)]
    write_jsonl(episodes[:2], tmp_path / "train.jsonl")
    write_jsonl(episodes[2:], tmp_path / "val.jsonl")
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    job = {"name": "swift-sft", "backend": "swift", "output_dir": str(tmp_path / "run"), "model": {"path": "model"},
           "sft": {"train": "train.jsonl", "val": "val.jsonl", "tools": "tools.json", **sft},
           "backends": {"swift": {"model_type": "qwen2", "template": "qwen2_5", "num_train_epochs": 2}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _command(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if "swift.cli.main" in line)
    return shlex.split(line.split(":", 1)[1] if line.startswith("command:") else line)


def test_dry_run_plans_swift_sft_with_arguments_ms_swift_parses(tmp_path):
    out = io.StringIO()
    assert main(["--config", str(_job_file(tmp_path)), "--dry-run"], out=out) == 0
    text = out.getvalue()
    command = _command(text)
    start = command.index("swift.cli.main")
    assert command[start + 1] == "sft"
    args = command[start + 2:]
    assert args[args.index("--dataset") + 1] == str(tmp_path / "run" / "swift_sft_train.jsonl")
    assert args[args.index("--val_dataset") + 1] == str(tmp_path / "run" / "swift_sft_val.jsonl")
    assert args[args.index("--num_train_epochs") + 1] == "2" and "rlhf" not in command
    from swift.arguments import SftArguments
    from swift.utils.utils import _patch_get_type_hints
    from transformers import HfArgumentParser

    with _patch_get_type_hints():
        parser = HfArgumentParser([SftArguments])
    _, unknown = parser.parse_known_args(args)
    assert unknown == []


def test_tokens_form_is_refused(tmp_path, capsys):
    assert main(["--config", str(_job_file(tmp_path, format="tokens")), "--dry-run"]) == 2
    assert "token-exact" in capsys.readouterr().err


def test_written_rows_load_through_ms_swifts_loader(tmp_path):
    from swift.dataset import load_dataset

    from aworld_core.config import load_job_config
    from aworld_swift.sft import write_sft_datasets

    written = write_sft_datasets(load_job_config(_job_file(tmp_path)), tmp_path / "run")
    train, _ = load_dataset([written["swift_sft_train.jsonl"]], strict=True)
    row = train[0]
    roles = [(m["role"], m.get("loss")) for m in row["messages"]]
    assert roles == [("user", None), ("tool_call", True), ("tool_response", None), ("assistant", True)]
    assert json.loads(row["messages"][1]["content"]) == {"name": "calc", "arguments": {"expr": "2+3"}}
    tools = row["tools"] if isinstance(row["tools"], list) else json.loads(row["tools"])  # ms-swift parses the text
    assert tools[0]["function"]["name"] == "calc"


@pytest.mark.parametrize("key", ["hub_token"])
def test_secret_arguments_are_refused(tmp_path, capsys, key):
    path = _job_file(tmp_path)
    assert main(["--config", str(path), "--dry-run", f"backends.swift.{key}=abc"]) == 2
    assert "secret" in capsys.readouterr().err
