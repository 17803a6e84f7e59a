"""verl's V1 trainer path on CPU: GRPO groups keep their members, all-failed steps stop, aborted
generations resume.

Each test runs verl 0.9.1's own code for a training step up to the actor update: the real
``PPOTrainerSync`` (its replay buffer loaded from the config: ``aworld_verl.sampler``) submits a
batch to verl's ``AgentLoopWorkerTQ`` (in this process), whose ``_run_prompt`` starts ``n``
sessions per prompt, each building its own ``AworldAgentLoop`` through hydra and storing its
outputs in TransferQueue (local Ray); then the trainer samples the step, computes GRPO
advantages with verl's ``_compute_advantage`` and its step metrics with ``_compute_metrics``.
Only the rollout server is a stand-in (``StubServer``: scripted replies as token ids).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")
pytest.importorskip("transfer_queue")

from verl_testkit import verl_row  # after the skips: it imports verl

from aworld_core.vllm_server import free_port

pytestmark = pytest.mark.slow

REWARDED = {
    "name": "aworld_plain",
    "_target_": "aworld_verl.AworldAgentLoop",
    "agent": "verl_testkit:plain_agent",
    "reward": "verl_testkit:exact_answer_reward",
}


def _survivors_advantages(scores: list[float], norm_by_std: bool) -> list[float]:
    """verl's GRPO on the survivors alone: the computation as if the failed member never ran."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = torch.tensor([[s] for s in scores], dtype=torch.float32)
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones_like(rewards), np.array(["g"] * len(scores)),
                                            norm_adv_by_std_in_grpo=norm_by_std)
    return adv[:, 0].tolist()


@pytest.mark.parametrize("norm_by_std", [False, True], ids=["dr_grpo", "grpo"])
async def test_a_failed_member_keeps_its_place_with_a_neutral_reward(make_v1, verl_tokenizer, close_states,
                                                                     norm_by_std, caplog):
    from verl_testkit import StubServer

    answers = ["5", "4", "unused", "5"]  # member 2's server call fails
    server = StubServer(verl_tokenizer, script=lambda call: answers[call.member],
                        fail_when=lambda call: call.member == 2)
    v1 = make_v1([REWARDED], server, ["actor_rollout_ref.rollout.n=4",
                                      f"algorithm.norm_adv_by_std_in_grpo={str(norm_by_std).lower()}"])
    step = await v1.step([verl_row("aworld_plain", "What is 2 + 3?")])

    (uid,) = step.uids()
    group = step.group(uid)
    assert [(r.session, r.index) for r in group] == [(0, 0), (1, 0), (2, 0), (3, 0)]  # the group kept its size
    assert {r.extra["aworld"]["group"] for r in group} == {uid}  # decided as one group in the worker
    assert "did not start together" not in caplog.text
    failed = [r for r in group if r.extra["status"] == "failed"]
    survivors = [r for r in group if r.extra["status"] == "success"]
    assert len(failed) == 1 and len(survivors) == 3
    (hole,) = failed
    assert "rollout server error" in hole.extra["error"]
    assert hole.response_mask == [0] and hole.logprobs == [0.0]  # nothing of it trains
    assert hole.extra["aworld"]["neutral"] and hole.extra["aworld"]["untrained"] == "failed"
    scores = [r.score for r in survivors]
    assert sorted(scores) == [0.0, 1.0, 1.0]
    assert hole.score == pytest.approx(sum(scores) / 3)  # neutral: the survivors' mean
    assert hole.advantage == 0.0

    # the survivors' advantages: verl's GRPO on the survivors alone; the group's mean is theirs, and
    # its std is taken over n = 4 values of which k = 3 deviate, so std normalization scales by
    # sqrt((n - 1) / (k - 1)) (docs/backend-verl.md)
    expected = _survivors_advantages(scores, norm_by_std)
    scale = math.sqrt((4 - 1) / (3 - 1)) if norm_by_std else 1.0
    assert [r.advantage for r in survivors] == pytest.approx([e * scale for e in expected], rel=1e-4, abs=1e-5)

    m = step.metrics
    assert m["aworld/episodes"] == 4 and m["aworld/trained_rate"] == 0.75 and m["aworld/failed_rate"] == 0.25
    assert m["aworld/untrained/failed"] == 1 and m["aworld/placeholders"] == 1
    assert m["aworld/groups"] == 1 and m["aworld/groups_dropped"] == 0
    assert m["training/num_turns/min"] >= 1 and "critic/advantages/mean" in m  # verl's own step metrics ran


async def test_a_group_left_with_one_member_gets_no_raw_reward_as_advantage(make_v1, verl_tokenizer, close_states):
    """verl's GRPO gives a group of one mean 0 / std 1: the member's raw reward would become its
    advantage. The failed member keeps the group at two, so the survivor gets no signal."""
    from verl_testkit import StubServer

    server = StubServer(verl_tokenizer, script=["5"], fail_when=lambda call: call.member == 1)
    v1 = make_v1([REWARDED], server, ["actor_rollout_ref.rollout.n=2"])
    step = await v1.step([verl_row("aworld_plain", "What is 2 + 3?")])
    group = step.group(step.uids()[0])
    assert len(group) == 2
    (survivor,) = [r for r in group if r.extra["status"] == "success"]
    assert survivor.score == 1.0 and survivor.advantage == 0.0
    assert sum(survivor.response_mask) > 0


async def test_drop_group_masks_every_member(make_v1, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    entry = {**REWARDED, "failed_episodes": "drop_group"}
    server = StubServer(verl_tokenizer, script=["5"], fail_when=lambda call: call.member == 1)
    v1 = make_v1([entry], server, ["actor_rollout_ref.rollout.n=3"])
    step = await v1.step([verl_row("aworld_plain", "What is 2 + 3?")])
    group = step.group(step.uids()[0])
    assert len(group) == 3
    assert sorted(r.extra["status"] for r in group) == ["failed", "success", "success"]
    for row in group:  # no member trains, and the group's statistics see identical rewards
        assert row.response_mask == [0] and row.score == 0.0 and row.advantage == 0.0
        assert "drop_group" in row.extra["aworld"]["group_dropped"]
    m = step.metrics
    assert m["aworld/groups_dropped"] == 1 and m["aworld/trained_rate"] == 0.0
    assert m["aworld/untrained/group_dropped"] == 2 and m["aworld/untrained/failed"] == 1


async def test_all_failed_steps_stop_after_max_failed_steps_with_the_first_error(make_v1, verl_tokenizer,
                                                                                   monkeypatch, close_states):
    from verl_testkit import MCP_URL_ENV, StubServer

    from aworld_core.errors import AworldError

    monkeypatch.setenv(MCP_URL_ENV, f"http://127.0.0.1:{free_port()}/mcp")  # the tool server is down
    entry = {**REWARDED, "name": "aworld_mcp", "agent": "verl_testkit:down_mcp_agent"}
    server = StubServer(verl_tokenizer, script=["5"])
    v1 = make_v1([entry], server, ["actor_rollout_ref.rollout.n=2",
                                   "+trainer.v1.sampler.sampler_kwargs.aworld_max_failed_steps=2"])
    rows = [verl_row("aworld_mcp", "What is 2 + 3?", 0), verl_row("aworld_mcp", "What is 1 + 1?", 1, "2")]

    first = await v1.step(rows, global_steps=1)
    assert len(first.rows) == 4  # both groups whole: every member in its place, masked
    assert all(r.response_mask == [0] and r.advantage == 0.0 for r in first.rows)
    assert all("MCPConnectionError" in r.extra["error"] for r in first.rows)
    assert first.metrics["aworld/failed_rate"] == 1.0 and first.metrics["aworld/untrained/failed"] == 4
    assert first.metrics["aworld/groups_dropped"] == 2
    assert server.calls == []  # no episode reached the model

    with pytest.raises(AworldError, match=r"(?s)2 consecutive training steps.*MCPConnectionError.*max_failed_steps"):
        await v1.step(rows, global_steps=2)


@pytest.mark.parametrize("mode", ["partial", "empty"])
async def test_an_aborted_generation_resumes_from_its_sampled_tokens(make_v1, verl_tokenizer, close_states, mode):
    """A weight sync aborts each episode's first request (vLLM's answer: the tokens so far, or none
    with ``log_probs=None``); the episode resumes from them and trains on all it sampled."""
    from verl_testkit import StubServer

    seen: set[str] = set()

    def abort_first(call: Any) -> str | None:
        if call.request_id in seen:
            return None
        seen.add(call.request_id)
        return mode

    server = StubServer(verl_tokenizer, script=["The answer is 5."], abort=abort_first)
    v1 = make_v1([REWARDED], server, ["actor_rollout_ref.rollout.n=2"])
    step = await v1.step([verl_row("aworld_plain", "What is 2 + 3?")])

    group = step.group(step.uids()[0])
    assert len(group) == 2
    for row in group:
        assert row.extra["status"] == "success", row.extra["error"]
        assert row.score == 1.0
        calls = [c for c in server.calls if c.request_id == row.extra["trajectory_id"]]
        first, resumed = calls
        assert first.stop_reason == "aborted" and resumed.stop_reason == "completed"
        assert resumed.prompt_ids == first.prompt_ids + first.token_ids  # resumed from what it sampled
        assert resumed.sampling_params["max_tokens"] == first.sampling_params["max_tokens"] - len(first.token_ids)
        sampled = first.token_ids + resumed.token_ids
        assert row.response_ids == sampled and row.response_mask == [1] * len(sampled)
        assert row.logprobs == pytest.approx((first.log_probs or []) + resumed.log_probs)
    if mode == "partial":
        assert all(c.token_ids for c in server.calls if c.stop_reason == "aborted")


async def test_two_trained_sessions_share_the_episode_reward_and_advantage(make_v1, verl_tokenizer, close_states):
    """A swarm with two trained agents stores two outputs per session; V1 broadcasts the final
    output's reward and GRPO advantage to the other."""
    from verl_testkit import StubServer

    def script(call: Any) -> str:
        text = verl_tokenizer.decode(call.prompt_ids)
        if "Answers sub-questions" in text and "<tool_response>" not in text:
            return '<tool_call>\n{"name": "helper", "arguments": {"task": "what is 2+3"}}\n</tool_call>'
        if "<tool_response>" in text:
            return "It is 5." if call.member == 0 else "It is 4."
        return "5"  # the helper's own answer

    entry = {**REWARDED, "name": "aworld_pair", "agent": "verl_testkit:two_trained_swarm"}
    server = StubServer(verl_tokenizer, script=script)
    v1 = make_v1([entry], server, ["actor_rollout_ref.rollout.n=2"])
    step = await v1.step([verl_row("aworld_pair", "What is 2 + 3?")])
    group = step.group(step.uids()[0])
    assert [(r.session, r.index) for r in group] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for session in (0, 1):
        lead, helper = [r for r in group if r.session == session]
        assert lead.extra["aworld_session"] == 0 and helper.extra["aworld_session"] == 1
        assert lead.score == helper.score and lead.advantage == helper.advantage
        for row in (lead, helper):
            episode = row.extra["trajectory_id"]
            request = episode if row.index == 0 else f"{episode}:1"
            sampled = [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m]
            assert sampled == [t for c in server.calls if c.request_id == request for t in c.token_ids]
    assert sorted(r.score for r in group if r.index == 1) == [0.0, 1.0]
