"""Segmented episodes on TRL (issue 27): real TRL GRPO steps on the CPU, episodes whose agent
compacts its context (so each tool-using episode is two segments), over the real MCP calculator.

Checked on the batch TRL really trains (after ``_generate_and_score_completions``): every segment of
every episode is a row (the first one where TRL put it, the later ones appended), each holding
exactly its sampled ids with mask 1 and its tool/template ids with mask 0; the batch trains
exactly the episodes' sampled tokens and nothing else; later segments get their episode's advantage,
moved by their own reward where the reward function gave one (``worker.credit``).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from aworld_core.errors import UsageError
from aworld_core.export import read_jsonl
from aworld_core.worker.credit import episode_segments

REWARDS = Path(__file__).resolve().parent / "segment_rewards.py"


def _job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any], write_samples: Any, **trl: Any) -> dict[str, Any]:
    return {
        "name": "trl-segments",
        "backend": "trl",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        # a tiny context budget: after the tool call the policy summarizes, and the episode goes on from the
        # summary in a new (compaction) segment
        "agent": {"name": "calc-agent", "max_steps": 3, "mcp_config": mcp_config,
                  "compaction": {"strategy": "summary", "max_context_tokens": 16, "summary_max_tokens": 12,
                                 "summary_prompt": "What is the result?", "max_compactions": 1}},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 8))},
        "reward": {"name": f"{REWARDS}:segment_reward", "trajectory_aware": True},
        "rollout": {"concurrency": 8, "episode_timeout_s": 60},
        "backends": {"trl": {
            "max_steps": 2, "per_device_train_batch_size": 4, "steps_per_generation": 2, "num_generations": 4,
            "learning_rate": 1e-4, "temperature": 0.7, "max_completion_length": 128, "beta": 0.0,
            "aworld": {"progress": False, "print_every": 0, "eval_before": False, "eval_after": False}, **trl,
        }},
    }


def _rows(batch: dict[str, Any], r: int) -> tuple[list[int], list[int], list[int], float]:
    """Row ``r``: prompt ids, completion ids, loss mask (completion x tool mask), advantage."""
    prompt = batch["prompt_ids"][r][batch["prompt_mask"][r].bool()].tolist()
    n = int(batch["completion_mask"][r].sum().item())
    ids = batch["completion_ids"][r, :n].tolist()
    mask = (batch["completion_mask"][r] * batch["tool_mask"][r])[:n].tolist()
    return prompt, ids, mask, float(batch["advantages"][r].item())


@pytest.mark.slow
def test_grpo_trains_every_segments_sampled_tokens_and_nothing_else(tmp_path, tool_model_dir, calculator, recorded,
                                                                    write_samples):
    from aworld_trl.trainer import train

    result = train(_job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples), str(tmp_path / "run"))
    episodes = {e.id: e for e in read_jsonl(result.artifacts["trajectories"])}
    assert len(recorded) == 1  # one generation of 8 rows for two optimizer steps (steps_per_generation 2)
    segmented = 0
    for batch in recorded:
        rows = batch["inputs"]
        assert len(rows) == 8
        later_rows = len(rows)
        sampled_total = 0
        for i, row in enumerate(rows):
            episode = episodes[row["aworld_episode_id"]]
            segments = episode_segments(episode)
            assert segments, episode.error
            group = rows[i - i % 4 : i - i % 4 + 4]
            rewards = [g["aworld_reward"] for g in group]
            mean = sum(rewards) / 4
            std = (sum((x - mean) ** 2 for x in rewards) / 3) ** 0.5
            advantage = (episode.reward - mean) / (std + 1e-4)  # TRL's, for the episode
            credited = [advantage if s.reward is None else advantage + (s.reward - episode.reward) / (std + 1e-4)
                        for s in segments]
            # the first segment is TRL's own row; the later ones follow the inputs, episode by episode
            places = [i] + list(range(later_rows, later_rows + len(segments) - 1))
            later_rows += len(segments) - 1
            for segment, place, credit in zip(segments, places, credited, strict=True):
                prompt, ids, mask, got = _rows(batch, place)
                assert prompt == segment.prompt_ids
                assert ids == segment.response_ids and mask == segment.response_mask
                assert got == pytest.approx(credit, abs=1e-5)
                assert batch["sampling_per_token_logps"][place, : len(ids)].tolist() == pytest.approx(
                    segment.response_logprobs)
                sampled_total += segment.sampled_tokens
            if len(segments) > 1:
                segmented += 1
                assert [s.start for s in segments[1:]] == ["compaction"] * (len(segments) - 1)
                assert segments[-1].reward == episode.reward + 0.25
        # nothing else trains: filler rows and padding have no loss mask
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
        assert loss_mask.sum().item() == sampled_total == batch["num_items_in_batch"].item()
        assert loss_mask[later_rows:].sum().item() == 0
        assert batch["prompt_ids"].shape[0] % 2 == 0  # whole slices for steps_per_generation=2
        # old log-probs were computed for every row (steps_per_generation 2 > gradient accumulation 1)
        assert batch["old_per_token_logps"].shape == batch["completion_ids"].shape
    assert segmented >= 4, "the warm-started model calls the calculator, so compaction splits most episodes"


@pytest.mark.slow
def test_a_per_sequence_loss_is_refused_for_segmented_episodes(tmp_path, tool_model_dir, calculator, write_samples):
    from aworld_trl.trainer import train

    job = _job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples, loss_type="grpo")
    job["backends"]["trl"]["max_steps"] = 1
    with pytest.raises(UsageError, match="backends.trl.loss_type='grpo' averages each row"):
        train(job, str(tmp_path / "run"))


def test_trl_private_api_the_segment_rows_use():
    """Canary: the TRL internals ``aworld_trl.segments`` relies on (fails loudly when TRL changes them)."""
    from trl import GRPOConfig, GRPOTrainer
    from trl.models.utils import disable_gradient_checkpointing  # noqa: F401
    from trl.trainer.utils import nanstd, use_adapter  # noqa: F401

    params = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert params[:6] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"]
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for key in ('"prompt_ids"', '"prompt_mask"', '"completion_ids"', '"completion_mask"', '"advantages"',
                '"num_items_in_batch"', '"old_per_token_logps"', '"ref_per_token_logps"',
                '"sampling_per_token_logps"', '"tool_mask"', "self.eos_token_ids", "self._tokenizer.pad_token_id",
                "inp[key] = values[i]"):
        assert key in source, key
    assert "split_tensor_dict(generation_batch, self.args.steps_per_generation)" in inspect.getsource(
        GRPOTrainer._prepare_inputs)
    loss = inspect.getsource(GRPOTrainer._compute_loss)
    assert 'inputs["num_items_in_batch"]' in loss and '"dapo"' in loss
    fields = GRPOConfig.__dataclass_fields__
    assert fields["loss_type"].default == "dapo" and fields["scale_rewards"].default == "group"


SMOLAGENTS = "aworld_core.testing.smolagents_client:smolagents_agent"


def _longer_context(model_dir: Path, to: Path) -> Path:
    """The tool model with 1024 positions (rotary: no new weights) instead of 256: smolagents' second
    call re-sends its whole memory (the task, the tool call as text, the observation or error)."""
    import json
    import shutil

    shutil.copytree(model_dir, to)
    for name, key in (("config.json", "max_position_embeddings"), ("tokenizer_config.json", "model_max_length")):
        data = json.loads((to / name).read_text())
        data[key] = 1024
        (to / name).write_text(json.dumps(data))
    return to


@pytest.mark.slow
def test_grpo_trains_every_segment_of_a_smolagents_episode(tmp_path, tool_model_dir, recorded, write_samples):
    """Real smolagents (``ToolCallingAgent`` over ``OpenAIServerModel``) as the job's ``agent.openai_agent``:
    it sends its tool call back as text, so each episode is two segments (the tool call; smolagents'
    final-answer call on the re-serialized history), both trained exactly, nothing else."""
    pytest.importorskip("smolagents")
    from aworld_trl.trainer import train

    model_dir = _longer_context(tool_model_dir, tmp_path / "model")
    job = _job(tmp_path, model_dir, {}, write_samples)
    job["agent"] = {"openai_agent": SMOLAGENTS}
    job["train_dataset"] = {"path": str(write_samples(tmp_path / "train.jsonl", 4))}
    job["backends"]["trl"].update(max_steps=1, steps_per_generation=1, max_completion_length=48)
    result = train(job, str(tmp_path / "run"))
    episodes = {e.id: e for e in read_jsonl(result.artifacts["trajectories"])}
    (batch,) = recorded
    rows = batch["inputs"]
    assert len(rows) == 4
    later_rows, sampled_total = len(rows), 0
    for i, row in enumerate(rows):
        episode = episodes[row["aworld_episode_id"]]
        segments = episode_segments(episode)
        assert episode.metadata["agent_style"] == "openai" and len(segments) == 2, episode.error
        assert segments[1].start == "rewrite"  # smolagents re-serialized its history
        places = [i, later_rows]  # the first segment is TRL's own row; the second is appended
        later_rows += 1
        for segment, place in zip(segments, places, strict=True):
            prompt, ids, mask, _ = _rows(batch, place)
            assert prompt == segment.prompt_ids
            assert ids == segment.response_ids and mask == segment.response_mask
            assert batch["sampling_per_token_logps"][place, : len(ids)].tolist() == pytest.approx(
                segment.response_logprobs)  # the engine's own logprobs
            assert segment.sampled_tokens > 0
            sampled_total += segment.sampled_tokens
        # the second segment's prompt is smolagents' re-serialized memory (its first call as text), not the
        # first segment continued: it is all prompt (mask 0), and its own sampled ids train
        first = segments[0].prompt_ids + segments[0].response_ids
        assert segments[1].prompt_ids[: len(first)] != first
    loss_mask = batch["completion_mask"] * batch["tool_mask"]
    assert loss_mask.sum().item() == sampled_total == batch["num_items_in_batch"].item()
    assert loss_mask[later_rows:].sum().item() == 0
