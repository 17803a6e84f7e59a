"""Context compaction in the core agent (issue 27): the agent keeps its context within a token
budget, a summary is sampled and trained like any turn, and the episode continues as a new segment
whose tokens train too. Real TokenLLM (scripted engine, real tokenizer and template), real runtime.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aworld_core import Agent, AgentConfig
from aworld_core.agents.compaction import DROPPED, SUMMARY_HEADER, TRUNCATED, CompactionConfig
from aworld_core.config import AgentSection
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.testing import (
    assistant_turn_text,
    check_segments,
    get_tiny_model_dir,
    load_template,
    load_tiny_tokenizer,
)
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer(get_tiny_model_dir())


def lookup(key: str) -> str:
    """Look a key up in a log (key "a" has a long entry)."""
    return f"value of {key}: " + "lorem ipsum dolor sit amet " * (12 if key == "a" else 1)


def sampled(tok, message: dict) -> list[int]:
    return tok.encode(assistant_turn_text(tok, load_template("qwen2_5"), message), add_special_tokens=False)


def call(key: str) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "lookup", "arguments": {"key": key}}}]}


def agent(compaction: dict | None, max_steps: int = 6) -> Agent:
    conf = AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="unused", max_steps=max_steps,
                       compaction=compaction)
    return Agent("reader", system_prompt="Use lookup.", conf=conf, tools=[lookup])


async def test_a_summary_is_sampled_trained_and_the_episode_goes_on_in_a_new_segment(tok):
    script = [sampled(tok, call("a")), sampled(tok, {"role": "assistant", "content": "I looked up a; it was lorem."}),
              sampled(tok, call("b")), sampled(tok, {"role": "assistant", "content": "Done: a and b."})]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"))
    # the first prompt is ~330 tokens (tiny byte-level tokenizer), ~550 after a's result
    config = {"strategy": "summary", "max_context_tokens": 500, "summary_max_tokens": 40}
    episode = await run_episode(agent(config), "Read a then b.", llm=llm)

    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "Done: a and b."
    view = episode.training
    assert [s.start for s in view.segments()] == ["first", "compaction"]
    held = check_segments(view, llm.engine.calls)  # every sampled token trains, nothing else does
    assert held == [[0, 1], [2, 3]]  # the summary ends the first segment; the episode goes on in the second
    summary_call = llm.engine.calls[1]
    assert "Summarize the task" in tok.decode(summary_call.prompt_ids[-100:])
    assert summary_call.sampling.max_tokens == 40
    second_prompt = tok.decode(view.later_segments[0].prompt_ids)
    assert SUMMARY_HEADER in second_prompt and "I looked up a; it was lorem." in second_prompt
    assert "lorem ipsum dolor" not in second_prompt  # the history it replaced is gone
    assert [c["strategy"] for c in episode.metadata["compactions"]] == ["summary"]
    assert len(episode.steps) == 4 and episode.steps[1].exp_data.state.content == "I looked up a; it was lorem."
    # the conversation recorded is the compacted one
    assert SUMMARY_HEADER in episode.messages[1]["content"]


async def test_old_tool_results_are_truncated_and_every_segment_trains(tok):
    script = [sampled(tok, call("a")), sampled(tok, call("a")), sampled(tok, call("a")),
              sampled(tok, {"role": "assistant", "content": "ok"})]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"))
    config = {"strategy": "truncate_tool_results", "max_context_tokens": 500, "keep_last_results": 1,
              "truncate_chars": 20}
    episode = await run_episode(agent(config), "Read a, b, c.", llm=llm)

    assert episode.status is EpisodeStatus.SUCCESS
    view = episode.training
    assert view.num_segments >= 2 and all(s.start == "compaction" for s in view.later_segments)
    check_segments(view, llm.engine.calls)
    tools = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert all(t.endswith(TRUNCATED) for t in tools[:-1]) and not tools[-1].endswith(TRUNCATED)


async def test_dropping_tool_results_keeps_the_context_under_the_budget(tok):
    script = [sampled(tok, call("a")) for _ in range(3)] + [sampled(tok, {"role": "assistant", "content": "ok"})]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"))
    config = {"strategy": "drop_tool_results", "max_context_tokens": 500, "keep_last_results": 0}
    episode = await run_episode(agent(config), "Read a, b, c, d.", llm=llm)

    assert episode.status is EpisodeStatus.SUCCESS
    check_segments(episode.training, llm.engine.calls)
    # each long result (~225 tokens) would pass the budget; dropped, the call's prompt is ~60 tokens
    # more than the last (the call and the marker) instead of ~285
    sizes = [c["context_tokens"] for c in episode.metadata["compactions"]]
    prompts = [len(c.prompt_ids) for c in llm.engine.calls]
    assert len(sizes) == 3 and all(s > 500 for s in sizes)
    assert all(p < s - 150 for p, s in zip(prompts[1:], sizes, strict=True))
    assert any(m["content"] == DROPPED for m in episode.messages if m["role"] == "tool")


async def test_without_compaction_the_context_grows_in_one_segment(tok):
    script = [sampled(tok, call(k)) for k in "ab"] + [sampled(tok, {"role": "assistant", "content": "ok"})]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"))
    episode = await run_episode(agent(None), "Read a, b.", llm=llm)
    assert episode.training.num_segments == 1 and "compactions" not in episode.metadata


def test_compaction_settings_are_checked_in_job_files():
    section = AgentSection.model_validate({"compaction": {"strategy": "summary", "max_context_tokens": 512}})
    assert isinstance(section.compaction, CompactionConfig)
    with pytest.raises(ValidationError, match="summary_max_tokens applies to strategy 'summary' only"):
        AgentSection.model_validate({"compaction": {"strategy": "drop_tool_results", "max_context_tokens": 512,
                                                    "summary_max_tokens": 30}})
    with pytest.raises(ValidationError):
        AgentSection.model_validate({"compaction": {"strategy": "forget", "max_context_tokens": 512}})
    with pytest.raises(ValidationError):
        AgentSection.model_validate({"compaction": {"strategy": "summary", "max_context_tokens": 512, "keep": 1}})


async def test_an_agent_on_its_own_endpoint_compacts_on_the_reported_usage(tok):
    """Not the trained agent: its client does not count tokens exactly; the last call's usage plus
    the new messages' characters decide, and no segment is marked (nothing of it trains)."""
    script = [sampled(tok, call("a")) for _ in range(3)] + [sampled(tok, {"role": "assistant", "content": "ok"})]
    own = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"))
    conf = AgentConfig(max_steps=6, compaction={"strategy": "drop_tool_results", "max_context_tokens": 400,
                                                "keep_last_results": 0})
    reader = Agent("reader", system_prompt="Use lookup.", conf=conf, tools=[lookup], llm=own)
    episode = await run_episode(reader, "Read a, b, c.")
    assert episode.status is EpisodeStatus.SUCCESS and episode.training is None
    assert len(episode.metadata["compactions"]) >= 2
    assert any(m["content"] == DROPPED for m in episode.messages if m["role"] == "tool")
