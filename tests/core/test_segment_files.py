"""Segmented episodes through files (issue 27): exports (JSONL, parquet) keep every segment,
``trajectories filter`` keeps segmented episodes for token-exact SFT and counts all their tokens,
``trajectories convert --format tokens`` writes a row per segment, and SFT on TRL reads them.

The episodes come from the real runtime: an agent that compacts its context (a summary sampled by a
scripted engine through a real TokenLLM, tokenizer and template)."""

from __future__ import annotations

import json

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.errors import UsageError
from aworld_core.export import read_episodes, write_episodes, write_jsonl
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import Episode, TrainingView
from aworld_core.testing import assistant_turn_text, get_tiny_model_dir, load_template, load_tiny_tokenizer
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM
from aworld_core.trajectories import FilterSpec, filter_episodes, token_rows
from aworld_core.trajectories.cli import main as cli


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer(get_tiny_model_dir())


def lookup(key: str) -> str:
    """Look a key up in a long log."""
    return f"value of {key}: " + "lorem ipsum dolor sit amet " * 12


def turn(tok, message: dict) -> list[int]:
    return tok.encode(assistant_turn_text(tok, load_template("qwen2_5"), message), add_special_tokens=False)


async def compacted_episode(tok) -> tuple[Episode, list[list[int]]]:
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "lookup", "arguments": {"key": "a"}}}]}
    script = [turn(tok, call), turn(tok, {"role": "assistant", "content": "a is lorem."}),
              turn(tok, {"role": "assistant", "content": "Done: lorem."})]
    llm = TokenLLM(ScriptedTokenEngine(list(script)), tok, chat_template=load_template("qwen2_5"))
    conf = AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="unused",
                       compaction={"strategy": "summary", "max_context_tokens": 500})
    episode = await run_episode(Agent("reader", system_prompt="Use lookup.", conf=conf, tools=[lookup]), "Read a.",
                                llm=llm)
    episode.reward = 1.0
    assert episode.training.num_segments == 2
    return episode, script


async def test_exports_keep_every_segment(tok, tmp_path):
    episode, _ = await compacted_episode(tok)
    for name in ("e.jsonl", "e.parquet"):
        write_episodes([episode], tmp_path / name)
        [back] = read_episodes(tmp_path / name)
        assert back.training == episode.training and back.training.segments() == episode.training.segments()


async def test_filter_and_token_rows_carry_segments(tok, tmp_path):
    episode, script = await compacted_episode(tok)
    kept, report = filter_episodes([episode], FilterSpec(require_tokens=True))
    assert kept == [episode]
    assert report.sampled_tokens == sum(len(ids) for ids in script)  # every segment's sampled tokens
    assert report.kept.tokens == sum(len(s.prompt_ids) + len(s.response_ids) for s in episode.training.segments())
    rows = token_rows([episode], tok)  # the tokenizer check reads every segment
    assert [(r["segment"], r["segment_start"]) for r in rows] == [(0, "first"), (1, "compaction")]
    for row, segment in zip(rows, episode.training.segments(), strict=True):
        assert row["prompt_ids"] == segment.prompt_ids and row["completion_ids"] == segment.response_ids
        assert row["completion_mask"] == segment.response_mask
    trained = [t for r in rows for t, m in zip(r["completion_ids"], r["completion_mask"], strict=True) if m]
    assert trained == [t for ids in script for t in ids]

    # the CLI, from a collected file to token rows
    write_jsonl([episode], tmp_path / "collected.jsonl")
    assert cli(["filter", str(tmp_path / "collected.jsonl"), "-o", str(tmp_path / "kept"), "--require-tokens"]) == 0
    assert cli(["convert", str(tmp_path / "kept" / "train.jsonl"), "-o", str(tmp_path / "rows.jsonl"),
                "--format", "tokens", "--tokenizer", str(get_tiny_model_dir())]) == 0
    written = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["segment_start"] for r in written] == ["first", "compaction"]


def test_a_view_rewritten_before_segments_existed_is_dropped_for_token_data():
    """A file written before segments: history_rewritten and only the frozen first part."""
    old = TrainingView(prompt_ids=[1, 2], response_ids=[3], response_mask=[1], response_logprobs=[0.0],
                       response_versions=[0], num_turns=1, history_rewritten=True)
    episode = Episode(task_id="t", agent_id="a", status="success", reward=1.0, training=old,
                      messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    kept, report = filter_episodes([episode], FilterSpec(require_tokens=True))
    assert not kept and "recorded before segments" in next(iter(report.dropped))
    with pytest.raises(UsageError, match="recorded before training segments existed"):
        token_rows([episode])
