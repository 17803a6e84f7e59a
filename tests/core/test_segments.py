"""Segmented episodes (issue 27): a rewritten history starts a new token-exact segment, every
segment's sampled tokens train, and the worker kit turns segments into rows with one credit rule.

Each case drives a real ``TokenLLM`` (a ``ScriptedTokenEngine`` answering planned ids, a real
tokenizer and chat template); the smolagents-shaped episode goes through the gateway over real HTTP.
Before segments, every one of these episodes kept only its first turns (the view froze at the
rewrite): the checks on later segments fail there.
"""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from aworld_core.errors import UsageError
from aworld_core.gateway import serve_gateway
from aworld_core.schemas import Episode, EpisodeStatus, TrainingSegment, TrainingView
from aworld_core.testing import assistant_turn_text, check_segments, load_template
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM
from aworld_core.worker import (
    episode_segments,
    episodes_to_batch,
    group_advantages,
    group_statistics,
    policy_gradient_loss,
    segment_advantages,
    set_segment_rewards,
    views_to_batch,
)
from aworld_core.worker.credit import check_token_mean

pytest_plugins = ["aworld_core.testing.fixtures"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


def turn(tok, message, family: str = "qwen2_5") -> list[int]:
    return tok.encode(assistant_turn_text(tok, load_template(family), message, TOOLS), add_special_tokens=False)


def call(expr: str) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "calc", "arguments": {"expr": expr}}}]}


def answer(text: str) -> dict:
    return {"role": "assistant", "content": text}


def llm_of(tok, script, **kwargs) -> TokenLLM:
    return TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"), **kwargs)


# -- the session ---------------------------------------------------------------------------------


async def test_a_rewrite_starts_a_segment_from_a_fresh_render_and_every_turn_trains(tiny_tokenizer, caplog):
    tok = tiny_tokenizer
    llm = llm_of(tok, [turn(tok, call("2+3")), turn(tok, answer("five")), turn(tok, answer("done"))])
    task = [{"role": "user", "content": "What is 2 + 3?"}]
    r1 = await llm.chat(task, TOOLS, session_id="ep")
    assert r1.token_data.segment == 0
    # the client summarizes its history instead of echoing it
    summary = [{"role": "user", "content": "What is 2 + 3? (You called calc; it said 5.)"}]
    with caplog.at_level(logging.INFO, logger="aworld_core.tokens.llm"):
        r2 = await llm.chat(summary, TOOLS, session_id="ep")
    assert r2.token_data.segment == 1
    assert any("segment 1 begins from a fresh render" in r.getMessage() for r in caplog.records)
    fresh = tok.apply_chat_template(summary, tools=TOOLS, chat_template=load_template("qwen2_5"),
                                    add_generation_prompt=True, tokenize=False)
    assert r2.token_data.prompt_ids == tok.encode(fresh, add_special_tokens=False)
    r3 = await llm.chat([*summary, r2.message(), {"role": "user", "content": "sure?"}], TOOLS, session_id="ep")
    assert r3.token_data.segment == 1  # extends the new segment
    view = llm.finish_session("ep")
    assert view.num_segments == 2 and view.history_rewritten
    assert [s.start for s in view.segments()] == ["first", "rewrite"]
    assert [s.num_turns for s in view.segments()] == [1, 2]
    held = check_segments(view, llm.engine.calls)
    assert held == [[0], [1, 2]]
    assert view.total_sampled_tokens == sum(len(c.output.token_ids) for c in llm.engine.calls)
    # tool-call ids stay unique over the episode (numbered by its turns, not the segment's)
    assert r1.tool_calls[0].id.endswith("_0_0")


async def test_a_template_restart_is_a_template_segment():
    from aworld_core.testing.templates import FAMILIES, family_template, family_tokenizer, model_turn_text

    fam = FAMILIES["mistral_v3"]
    tok = family_tokenizer("mistral_v3")
    first = tok.encode(model_turn_text(fam, tok, answer("Sunny."), TOOLS), add_special_tokens=False)
    second = tok.encode(model_turn_text(fam, tok, answer("Rainy."), TOOLS), add_special_tokens=False)
    llm = TokenLLM(ScriptedTokenEngine([first, second]), tok, chat_template=family_template("mistral_v3"),
                   family="mistral-v3")
    question = [{"role": "user", "content": "Weather today?"}]
    r1 = await llm.chat(question, TOOLS, session_id="ep")
    await llm.chat([*question, r1.message(), {"role": "user", "content": "And tomorrow?"}], TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    assert [s.start for s in view.segments()] == ["first", "template"]
    check_segments(view, llm.engine.calls)


async def test_an_announced_compaction_is_a_compaction_segment(tiny_tokenizer):
    tok = tiny_tokenizer
    llm = llm_of(tok, [turn(tok, answer("a")), turn(tok, answer("b"))])
    r1 = await llm.chat([{"role": "user", "content": "go"}], session_id="ep")
    llm.note_compaction("ep")
    await llm.chat([{"role": "user", "content": "go (summary: a)"}], session_id="ep")
    view = llm.finish_session("ep")
    assert [s.start for s in view.segments()] == ["first", "compaction"]
    assert r1.content == "a"
    check_segments(view, llm.engine.calls)


async def test_the_response_budget_holds_per_segment(tiny_tokenizer):
    """Each segment is one row of the backend's batch: its response fits the row's budget."""
    tok = tiny_tokenizer
    long = turn(tok, answer("word " * 12))
    llm = llm_of(tok, [long, long, long], max_response_tokens=len(long) + 2)
    await llm.chat([{"role": "user", "content": "one"}], session_id="ep")
    await llm.chat([{"role": "user", "content": "two"}], session_id="ep")  # rewrite: a fresh budget
    view = llm.finish_session("ep")
    assert view.num_segments == 2 and not view.any_truncated
    check_segments(view, llm.engine.calls)


# -- smolagents' history, through the gateway ------------------------------------------------------


def smolagents_history(task: str, steps: list[tuple[dict, str]]) -> list[dict]:
    """What smolagents' ToolCallingAgent sends: a system prompt, ``New task:``, then per step the
    model's tool calls re-serialized as assistant text and each result as a user ``Observation``."""
    messages = [{"role": "system", "content": "You are an expert assistant who can solve any task using tool calls."},
                {"role": "user", "content": f"New task:\n{task}"}]
    for tool_call, observation in steps:
        messages.append({"role": "assistant", "content": "Calling tools:\n" + str([tool_call])})
        messages.append({"role": "user", "content": f"Call id: {tool_call['id']}\nObservation:\n{observation}"})
    return messages


async def test_a_smolagents_tool_episode_trains_every_turn_through_the_gateway(tiny_tokenizer):
    tok = tiny_tokenizer
    script = [turn(tok, call("2+3")), turn(tok, call("5*4")), turn(tok, answer("The answer is 20."))]
    llm = llm_of(tok, script)
    server = serve_gateway(llm)
    try:
        url = f"{server.session_base_url('smol-1')}/chat/completions"
        steps: list[tuple[dict, str]] = []
        async with aiohttp.ClientSession() as http:
            for observation in ("5", "20", None):
                body = {"model": llm.model_name, "messages": smolagents_history("(2+3)*4?", steps), "tools": TOOLS,
                        "tool_choice": "auto", "stop": ["Observation:"]}
                async with http.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as r:
                    assert r.status == 200, await r.text()
                    reply = (await r.json())["choices"][0]["message"]
                if observation is None:
                    assert reply["content"] == "The answer is 20."
                    break
                tc = reply["tool_calls"][0]
                steps.append(({"id": tc["id"], "type": "function",
                               "function": {"name": tc["function"]["name"],
                                            "arguments": json.loads(tc["function"]["arguments"])}}, observation))
        view = server.gateway.finish_session("smol-1")
    finally:
        server.stop()
    assert view.num_segments == 3 and [s.start for s in view.segments()] == ["first", "rewrite", "rewrite"]
    check_segments(view, llm.engine.calls)
    assert view.total_sampled_tokens == sum(len(ids) for ids in script)


# -- rows, credit, normalization --------------------------------------------------------------------


def seg(prompt: list[int], sampled: list[int], env: list[int] = (), start: str = "first", reward=None) -> TrainingSegment:
    ids = [*sampled, *env]
    mask = [1] * len(sampled) + [0] * len(env)
    return TrainingSegment(prompt_ids=prompt, response_ids=ids, response_mask=mask,
                           response_logprobs=[-0.5 if m else 0.0 for m in mask],
                           response_versions=[3 if m else -1 for m in mask], num_turns=1, start=start, reward=reward)


def episode(segments: list[TrainingSegment], reward: float) -> Episode:
    e = Episode(task_id="t", agent_id="a", reward=reward, training=TrainingView.of_segments(segments))
    e.finish(EpisodeStatus.SUCCESS)
    return e


def test_a_one_segment_view_of_old_trajectory_files_loads_as_before():
    old = {"prompt_ids": [1, 2], "response_ids": [3, 4], "response_mask": [1, 0], "response_logprobs": [-0.1, 0.0],
           "response_versions": [0, -1], "num_turns": 1, "truncated": False, "history_rewritten": False}
    view = TrainingView.model_validate(old)
    assert view.num_segments == 1 and view.segments()[0].response_ids == [3, 4] and view.start == "first"


def test_episodes_to_batch_makes_one_row_per_segment_with_the_episodes_advantage():
    a = episode([seg([1, 2], [5, 6], [7]), seg([1, 9], [8], start="rewrite")], reward=1.0)
    b = episode([seg([1, 2], [4])], reward=0.0)
    advantages = group_advantages([1.0, 0.0], 2)
    batch = episodes_to_batch([a, b], advantages, pad_id=0)
    assert batch["input_ids"].shape[0] == 3
    assert batch["episode_index"].tolist() == [0, 0, 1]
    assert batch["advantages"].tolist() == pytest.approx([advantages[0], advantages[0], advantages[1]])
    # exactly the sampled tokens train: 2 + 1 + 1
    assert batch["loss_mask"].sum().item() == 4
    assert [batch["targets"][r][batch["loss_mask"][r] > 0].tolist() for r in range(3)] == [[5, 6], [8], [4]]
    assert batch["old_logprobs"][batch["loss_mask"] > 0].tolist() == [-0.5] * 4
    assert batch["versions"][batch["loss_mask"] > 0].tolist() == [3] * 4


def test_views_to_batch_refuses_a_view_with_later_segments_rather_than_cut_it():
    view = TrainingView.of_segments([seg([1], [2]), seg([1], [3], start="rewrite")])
    with pytest.raises(UsageError, match="episodes_to_batch"):
        views_to_batch([view])
    assert views_to_batch(view.segments())["input_ids"].shape[0] == 2


def test_the_loss_is_the_mean_over_every_rows_sampled_tokens():
    import torch

    a = episode([seg([1, 2], [5, 6], [7]), seg([1, 9], [8], start="rewrite")], reward=1.0)
    batch = episodes_to_batch([a], [2.0])
    logprobs = torch.full(batch["loss_mask"].shape, -1.0)
    # -mean over the 3 sampled tokens of A * log p = -(2 * -1) = 2, however the tokens are split in rows
    assert policy_gradient_loss(logprobs, batch).item() == pytest.approx(2.0)
    check_token_mean("token-mean", token_mean=["token-mean"], multi_segment=True, setting="x")
    with pytest.raises(UsageError, match="weigh as many times"):
        check_token_mean("seq-mean-token-mean", token_mean=["token-mean"], multi_segment=True, setting="loss_agg_mode")
    check_token_mean("seq-mean-token-mean", token_mean=["token-mean"], multi_segment=False, setting="loss_agg_mode")


def test_per_segment_rewards_move_a_segments_advantage_under_the_groups_baseline():
    a = episode([seg([1], [5]), seg([1], [6], start="compaction")], reward=1.0)
    b = episode([seg([1], [4])], reward=0.0)
    rewards = [1.0, 0.0]
    advantages = group_advantages(rewards, 2)
    scales = [d for _, d in group_statistics(rewards, 2)]
    assert segment_advantages(a, advantages[0], scale=scales[0]) == [advantages[0]] * 2
    set_segment_rewards(a, [None, 0.5])  # the compaction segment scored on its own
    assert [s.reward for s in episode_segments(a)] == [None, 0.5]
    credited = segment_advantages(a, advantages[0], scale=scales[0])
    mean, divisor = group_statistics(rewards, 2)[0]
    assert credited == pytest.approx([advantages[0], (0.5 - mean) / divisor])
    batch = episodes_to_batch([a, b], advantages, scales=scales)
    assert batch["advantages"].tolist() == pytest.approx([*credited, advantages[1]])
    with pytest.raises(UsageError, match="2 training segments"):
        set_segment_rewards(a, [1.0])


def test_a_swarms_other_trained_agents_are_further_segments():
    a = episode([seg([1], [5])], reward=1.0)
    a.metadata["extra_training"] = [TrainingView.of_segments([seg([2], [6]), seg([2], [7], start="rewrite")]).model_dump()]
    assert [s.response_ids for s in episode_segments(a)] == [[5], [6], [7]]
    assert episodes_to_batch([a], [1.0])["input_ids"].shape[0] == 3
