"""Real TRL GRPO steps on the CPU, episodes from the core over a real MCP calculator.

Checked on the batch the trainer really receives (the output of TRL's
``_generate_and_score_completions``): completion ids are exactly the ids the engine sampled plus
the tool tokens between turns, ``tool_mask`` (our ``env_mask``) is 0 exactly on tool/env tokens,
the trajectory-aware reward saw each episode, and a failed episode trains nothing.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path
from typing import Any

import pytest

from aworld_core.errors import AworldError
from aworld_core.export import read_jsonl
from aworld_core.imports import import_ref

REWARD_FILE = Path(__file__).resolve().parent / "episode_rewards.py"


def _job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any], write_samples: Any,
         rollout: dict[str, Any] | None = None, **trl: Any) -> dict[str, Any]:
    aworld = trl.pop("aworld", {})
    return {
        "name": "trl-test",
        "backend": "trl",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "calc-agent", "max_steps": 3, "mcp_config": mcp_config},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 8))},
        "test_dataset": {"path": str(write_samples(tmp_path / "test.jsonl", 4, split="test"))},
        "reward": {"name": f"{REWARD_FILE}:seen_reward", "trajectory_aware": True},
        "rollout": {"concurrency": 8, "episode_timeout_s": 60, **(rollout or {})},
        "backends": {"trl": {
            "max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 1e-4,
            "temperature": 0.7, "max_completion_length": 64, "beta": 0.0,
            "aworld": {"progress": False, "print_every": 0, **aworld}, **trl,
        }},
    }


@pytest.mark.slow
def test_grpo_trains_exactly_the_sampled_tokens(tmp_path, tool_model_dir, calculator, recorded, write_samples):
    from aworld_trl.trainer import train

    seen = import_ref(f"{REWARD_FILE}:seen_reward").__globals__["SEEN"]
    seen.clear()
    result = train(_job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples), str(tmp_path / "run"))

    assert len(recorded) == 2  # one generation per optimizer step
    episodes = {e.id: e for e in read_jsonl(result.artifacts["trajectories"])}
    tool_rows = 0
    for batch in recorded:
        rows = batch["inputs"]
        ids = [row["aworld_sample_id"] for row in rows]
        # TRL repeats each prompt once per generation before calling rollout_func: 2 groups of 4
        assert len(ids) == 8 and ids[:4] == [ids[0]] * 4 and ids[4:] == [ids[4]] * 4
        for i, row in enumerate(rows):
            episode = episodes[row["aworld_episode_id"]]
            assert episode.task_id == row["aworld_sample_id"]
            view = episode.training
            assert episode.status.value == "success" and view is not None
            n = len(view.response_ids)
            assert batch["completion_ids"][i, :n].tolist() == view.response_ids
            assert batch["completion_mask"][i, :n].tolist() == [1] * n
            assert batch["completion_mask"][i, n:].sum().item() == 0
            assert batch["tool_mask"][i, :n].tolist() == view.response_mask
            prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
            assert prompt == view.prompt_ids
            # mask-1 tokens are, in order, exactly what the engine sampled at each LLM call
            sampled = [t for t, m in zip(view.response_ids, view.response_mask, strict=True) if m]
            calls = [s.exp_data.llm_call.token_data for s in episode.steps]
            assert sampled == [t for data in calls for t in data.response_ids]
            assert [x for x, m in zip(view.response_logprobs, view.response_mask, strict=True) if m] == \
                [x for data in calls for x in data.response_logprobs]
            results = [r for s in episode.steps for r in s.exp_data.state.action_result]
            if results:
                tool_rows += 1
                assert 0 in view.response_mask
                # the tool's answer is in the env (mask 0) tokens, never in the trained ones
                from aworld_core.tokens.llm import load_tokenizer

                tokenizer = load_tokenizer(tool_model_dir)
                env = [t for t, m in zip(view.response_ids, view.response_mask, strict=True) if not m]
                assert results[0].content in tokenizer.decode(env)
            assert row["aworld_reward"] == episode.reward
    assert tool_rows >= 8, "the warm-started test model should call the calculator in most episodes"
    # the trajectory-aware reward saw every training episode, with its tool calls
    seen_ids = {s["episode_id"] for s in seen}
    assert {row["aworld_episode_id"] for b in recorded for row in b["inputs"]} <= seen_ids
    assert any(s["tool_results"] for s in seen)

    logged = [json.loads(line) for line in Path(result.artifacts["metrics"]).read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2]
    assert all("aworld/tool_call_rate" in r and r["aworld/failed_rate"] == 0.0 for r in logged)
    assert "eval_before/accuracy" in result.metrics and "eval_after/accuracy" in result.metrics
    assert Path(result.artifacts["plot"]).is_file()
    checkpoint = Path(result.artifacts["checkpoint"])
    assert (checkpoint / "config.json").is_file()
    # the checkpoint keeps the tokenizer's own files (class and ids), not a re-saved copy
    assert (checkpoint / "tokenizer.json").read_bytes() == (tool_model_dir / "tokenizer.json").read_bytes()
    assert json.loads((checkpoint / "tokenizer_config.json").read_text())["tokenizer_class"] == \
        "PreTrainedTokenizerFast"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_failed_episodes_train_nothing_and_are_counted(tmp_path, tool_model_dir, recorded, write_samples):
    from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers
    from aworld_trl.trainer import train

    down, _ = get_agent_tool_env_and_servers(f"http://127.0.0.1:{_closed_port()}/mcp", "t", name="calculator",
                                              release_workspace=False)
    job = _job(tmp_path, tool_model_dir, down, write_samples, rollout={"max_failed_steps": 2},
               aworld={"eval_before": False})
    with pytest.raises(AworldError, match="every episode failed in 2 consecutive") as caught:
        train(job, str(tmp_path / "run"))
    assert "MCPConnectionError" in str(caught.value)
    assert "raise rollout.max_failed_steps" in str(caught.value)  # the setting, where it lives

    assert len(recorded) == 1  # step 2's rollout raised, after the second all-failed batch
    for batch in recorded:
        assert batch["tool_mask"].mul(batch["completion_mask"]).sum().item() == 0  # no trainable token
        assert batch["completion_mask"].sum(dim=1).tolist() == [1] * 8  # a one-token placeholder each
        assert all(row["aworld_reward"] is None for row in batch["inputs"])
        assert batch["advantages"].abs().sum().item() == 0
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert logged and logged[0]["aworld/failed_rate"] == 1.0
    assert logged[0]["reward"] is None or math.isnan(logged[0]["reward"])
