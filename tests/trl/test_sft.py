"""SFT on collected trajectories through the trl backend: TRL's real ``SFTTrainer`` on the CPU with
the test kit's tiny model, on both forms (token-exact and messages), from the CLI's plan to the
checkpoint. Episodes come from the real runtime (a real ``TokenLLM`` over a scripted engine, a
Python tool), so their token views are the ones collection records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.config import JobConfig
from aworld_core.errors import UsageError
from aworld_core.export import write_jsonl
from aworld_core.runtime.episode import run_episode
from aworld_core.testing import assistant_turn_text, get_tiny_model_dir, load_template, load_tiny_tokenizer
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM

pytestmark = pytest.mark.slow
TEMPLATE = Path(__file__).with_name("sft_template.jinja")


def add(expr: str) -> str:
    """Add two numbers written 'a+b'."""
    a, b = expr.split("+")
    return str(int(a) + int(b))


async def _episodes(n: int) -> list:
    tok = load_tiny_tokenizer(get_tiny_model_dir())
    template = load_template("qwen2_5")
    out = []
    for i in range(n):
        a, b = i % 7, i % 5
        call = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"expr": f"{a}+{b}"}}}]}
        answer = {"role": "assistant", "content": f"The answer is {a + b}."}
        turns = [tok.encode(assistant_turn_text(tok, template, m), add_special_tokens=False) for m in (call, answer)]
        llm = TokenLLM(ScriptedTokenEngine(turns), tok, chat_template=template)
        agent = Agent("adder", system_prompt="Use the add tool.", tools=[add],
                      conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="unused"))
        episode = await run_episode(agent, f"What is {a} + {b}?", llm=llm, task_id=f"t{i}")
        episode.reward = 1.0
        out.append(episode)
    return out


@pytest.fixture(scope="module")
def episode_files(tmp_path_factory) -> dict[str, Path]:
    episodes = asyncio.run(_episodes(24))
    root = tmp_path_factory.mktemp("sft-data")
    write_jsonl(episodes[:20], root / "train.jsonl")
    write_jsonl(episodes[20:], root / "val.jsonl")
    tools = [{"type": "function", "function": {"name": "add", "description": "Add two numbers written 'a+b'.",
                                                "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}]
    (root / "tools.json").write_text(json.dumps(tools))
    return {"train": root / "train.jsonl", "val": root / "val.jsonl", "tools": root / "tools.json"}


def _job(files: dict[str, Path], out: Path, form: str, **trl) -> JobConfig:
    model: dict = {"path": str(get_tiny_model_dir())}
    if form == "messages":
        model["chat_template"] = str(TEMPLATE)
    return JobConfig.model_validate({
        "name": f"sft-{form}", "backend": "trl", "output_dir": str(out), "model": model,
        "sft": {"train": str(files["train"]), "val": str(files["val"]), "format": form,
                "tools": str(files["tools"]) if form == "messages" else None},
        "backends": {"trl": {"max_steps": 30, "per_device_train_batch_size": 8, "learning_rate": 3e-3,
                             "activation_checkpointing": False, "eval_steps": 10, **trl,
                             "aworld": {"progress": False, "print_every": 0}}},
    })


def _losses(out: Path) -> tuple[list[float], list[float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r], [r["eval_loss"] for r in rows if "eval_loss" in r]


@pytest.mark.parametrize("form", ["tokens", "messages"])
def test_sft_trains_on_cpu_and_loss_decreases(episode_files, tmp_path, form):
    from aworld_trl.sft import train

    out = tmp_path / form
    result = train(_job(episode_files, out, form), str(out))
    train_loss, val_loss = _losses(out)
    assert result.metrics["sft/format"] == form and result.metrics["steps"] == 30
    assert sum(train_loss[-5:]) / 5 < 0.7 * sum(train_loss[:5]) / 5
    assert len(val_loss) == 3 and val_loss[-1] < val_loss[0]
    assert (out / "checkpoint" / "config.json").is_file() and (out / "checkpoint" / "tokenizer.json").is_file()
    assert (out / "metrics.png").stat().st_size > 0 and json.loads((out / "summary.json").read_text())["metrics"]
    if form == "tokens":
        assert result.metrics["sft/trained_tokens_per_epoch"] < result.metrics["sft/train_tokens"]


def test_trl_labels_are_exactly_the_sampled_ids(episode_files, tmp_path):
    """What TRL trains on (its prepared ``labels``) is -100 everywhere but the sampled ids."""
    from aworld_core.trajectories import read_trajectories
    from aworld_trl.sft import SftRun, sft_config, token_dataset_rows

    job = _job(episode_files, tmp_path, "tokens")
    run = SftRun(job, tmp_path)
    model, tok = run._load_model()
    episodes = read_trajectories(episode_files["train"]).episodes
    rows = token_dataset_rows(episodes, tok, 1024, "sft.train")
    args, run.options = sft_config(job, tmp_path, "tokens", has_val=False)
    trainer, _ = run._sft_trainer(model, tok, args, rows, [])
    by_ids = {tuple(r["input_ids"]): r for r in rows}
    for prepared in trainer.train_dataset:
        row = by_ids[tuple(prepared["input_ids"])]
        expected = [t if m else -100 for t, m in zip(row["input_ids"], row["completion_mask"], strict=True)]
        assert prepared["labels"] == expected
    episode = episodes[0]
    sampled = [t for s in episode.steps for t in s.exp_data.llm_call.token_data.response_ids]
    row = rows[0]
    assert [t for t, m in zip(row["input_ids"], row["completion_mask"], strict=True) if m] == sampled


def test_refusals(episode_files, tmp_path):
    from aworld_trl.sft import SftRun, train

    # the messages form needs {% generation %} marks (the tiny model's own template has none)
    job = _job(episode_files, tmp_path, "messages").model_copy(update={"model": None})
    job = JobConfig.model_validate({**job.model_dump(), "model": {"path": str(get_tiny_model_dir())}})
    with pytest.raises(UsageError, match="generation"):
        train(job, str(tmp_path / "m"))
    # an over-long sequence is refused, not cut
    with pytest.raises(UsageError, match="over backends.trl.max_length=16"):
        train(_job(episode_files, tmp_path / "l", "tokens", max_length=16), str(tmp_path / "l"))
    # SFTConfig keys only; a TRL-unknown key names the closest
    with pytest.raises(UsageError, match="SFTConfig does not know.*'num_generations'"):
        train(_job(episode_files, tmp_path / "k", "tokens", num_generations=8), str(tmp_path / "k"))
    assert SftRun  # imported for the type


def test_cli_dry_run_plans_sft_and_refuses_missing_files(episode_files, tmp_path, capsys):
    import yaml

    from aworld_core.run import main

    job = _job(episode_files, tmp_path / "out", "tokens").model_dump(mode="json", exclude_none=True)
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    assert main(["--config", str(config), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "aworld_trl.sft:train" in printed and "sft_config" in printed
    assert main(["--config", str(config), "--dry-run", "sft.train=missing.jsonl"]) == 2
    assert "sft.train" in capsys.readouterr().err


def test_a_backend_without_an_sft_trainer_refuses_an_sft_job(episode_files, tmp_path, capsys):
    import yaml

    from aworld_core.run import main

    job = _job(episode_files, tmp_path / "out", "tokens").model_dump(mode="json", exclude_none=True)
    job["backends"] = {}
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    assert main(["--config", str(config), "--backend", "reinforce", "--dry-run"]) == 2  # examples/reinforce_backend
    assert "does not train; use the swift, trl or verl backend" in capsys.readouterr().err


def test_grpo_only_options_are_refused_in_an_sft_job(episode_files, tmp_path):
    from aworld_core.errors import ConfigError
    from aworld_trl.sft import check_sft_section

    job = _job(episode_files, tmp_path, "tokens")
    job.backends["trl"]["aworld"]["trajectory_every"] = 5
    with pytest.raises(ConfigError, match="trajectory_every only apply to GRPO"):
        check_sft_section(job)


def test_plots_have_a_loss_panel_with_validation_loss(tmp_path):
    from aworld_core.plots import PANELS, SFT_PANELS, plot_metrics

    assert ("loss", "loss") in PANELS  # the GRPO plot (make demo's metrics.png) draws the loss too
    history = [{"step": s, "loss": 1.0 / s, "reward": s / 10} for s in range(1, 11)]
    history += [{"step": 5, "eval_loss": 0.3}, {"step": 10, "eval_loss": 0.1}]
    assert plot_metrics(history, tmp_path / "grpo.png").stat().st_size > 0
    sft = plot_metrics(history, tmp_path / "sft.png", accuracy=(0.0, 0.9), panels=SFT_PANELS)
    assert sft.stat().st_size > 0
