"""The runtime on the token-level path: run_episode with a real TokenLLM (scripted TokenEngine,
real tokenizer and chat template). Trained tokens are exactly the sampled ones."""

from __future__ import annotations

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.testing import assistant_turn_text, get_tiny_model_dir, load_template, load_tiny_tokenizer
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer(get_tiny_model_dir())


def calc(expr: str) -> str:
    """Evaluate a sum like '2+3'."""
    return str(sum(int(x) for x in expr.split("+")))


def sampled(tok, message: dict) -> list[int]:
    text = assistant_turn_text(tok, load_template("qwen2_5"), message)
    return tok.encode(text, add_special_tokens=False)


CALL = {
    "role": "assistant",
    "content": "Let me compute.",
    "tool_calls": [{"id": "x", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2+3"}}}],
}
ANSWER = {"role": "assistant", "content": "The answer is 5."}


def trained_agent() -> Agent:
    # its own endpoint is unreachable: a trained agent must not use it under a backend
    return Agent(
        "solver",
        system_prompt="Use the calc tool.",
        conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="unused"),
        tools=[calc],
    )


async def test_episode_training_view_holds_exactly_the_sampled_tokens(tok):
    first, second = sampled(tok, CALL), sampled(tok, ANSWER)
    engine = ScriptedTokenEngine([first, second])
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    episode = await run_episode(trained_agent(), "What is 2 + 3?", llm=llm)

    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "The answer is 5."
    [result] = episode.steps[0].exp_data.state.action_result
    assert (result.tool_name, result.content) == ("calc", "5")
    # per call: the sampled ids travel with the step
    assert episode.steps[0].exp_data.llm_call.token_data.response_ids == first
    assert episode.steps[1].exp_data.llm_call.token_data.response_ids == second
    # per episode: mask 1 exactly on the sampled ids, in order; the tool result is env (mask 0)
    view = episode.training
    assert view is not None and episode.trainable and view.num_turns == 2
    trained = [t for t, m in zip(view.response_ids, view.response_mask, strict=True) if m == 1]
    assert trained == first + second
    assert view.response_ids[: len(first)] == first
    assert len(view.response_logprobs) == len(view.response_ids) == len(view.response_versions)
    env = tok.decode([t for t, m in zip(view.response_ids, view.response_mask, strict=True) if m == 0])
    assert "5" in env
    # every engine request carried the episode's id (one KV-cache route per episode)
    assert {call.request_id for call in engine.calls} == {episode.id}


async def test_response_budget_ends_the_episode_cleanly(tok):
    first = sampled(tok, CALL)
    llm = TokenLLM(
        ScriptedTokenEngine([first, sampled(tok, ANSWER)]),
        tok,
        chat_template=load_template("qwen2_5"),
        max_response_tokens=len(first) + 3,
    )
    episode = await run_episode(trained_agent(), "What is 2 + 3?", llm=llm)
    assert episode.status is EpisodeStatus.SUCCESS
    assert episode.metadata["stop"] == "length"
    assert episode.training is not None and episode.training.truncated
    assert len(episode.training.response_ids) <= len(first) + 3


async def test_timed_out_token_episode_is_not_trainable(tok):
    engine = ScriptedTokenEngine([sampled(tok, CALL), sampled(tok, ANSWER)], delay_s=2.0)
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    episode = await run_episode(trained_agent(), "What is 2 + 3?", llm=llm, timeout=0.3)
    assert episode.status is EpisodeStatus.TIMEOUT
    assert episode.training is None and not episode.trainable
    assert llm.finish_session(episode.id) is None  # the session was released, not leaked
