"""Through verl's V0 worker (``AgentLoopWorker.generate_sequences``, a loop built per sample):
failed, timed-out and unrewardable episodes hold their rows fully masked, a GRPO group's failed
member gets the group's neutral reward, truncation keeps ids, mask and logprobs aligned, an
in-loop reward becomes verl's ``rm_scores``. (The V1 trainer's path: test_v1_groups.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import numpy as np
from verl_testkit import PROMPT_LENGTH as P
from verl_testkit import verl_row

pytestmark = pytest.mark.slow

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def _batch(rows: list[dict[str, Any]]) -> Any:
    from verl.protocol import DataProto

    columns = {}
    for key in rows[0]:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row[key] for row in rows]
        columns[key] = column
    return DataProto.from_dict(non_tensors=columns)


async def test_failed_episode_is_fully_masked_in_the_v0_batch(make_worker, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    entry = {"name": "aworld_plain", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:plain_agent"}
    server = StubServer(verl_tokenizer, script=["fine"], fail_when=lambda call: "explode" in verl_tokenizer.decode(call.prompt_ids))
    worker = make_worker([entry], server)
    out = await worker.generate_sequences(
        _batch([verl_row("aworld_plain", "please explode", 0), verl_row("aworld_plain", "say fine", 1)])
    )
    status = list(out.non_tensor_batch["status"])
    assert status == ["failed", "success"]
    assert "rollout server error" in out.non_tensor_batch["error"][0]
    assert int(out.batch["response_mask"][0].sum()) == 0  # nothing of it is trained
    assert int(out.batch["response_mask"][1].sum()) > 0


async def test_a_timed_out_episode_holds_a_masked_row_and_its_session_is_dropped(make_worker, verl_tokenizer,
                                                                                  close_states):
    from verl_testkit import StubServer

    entry = {"name": "aworld_slow", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:plain_agent",
             "episode_timeout_s": 0.3}
    server = StubServer(verl_tokenizer, script=["too late"], delay_s=5.0)
    worker = make_worker([entry], server)
    out = await worker.generate_sequences(_batch([verl_row("aworld_slow", "hello")]))
    assert list(out.non_tensor_batch["status"]) == ["timeout"]
    assert int(out.batch["response_mask"][0].sum()) == 0
    assert out.non_tensor_batch["aworld"][0]["untrained"] == "timeout"
    from aworld_verl import episode_counts
    from aworld_verl.worker_state import _states

    assert episode_counts().get("timeout", 0) >= 1
    (state,) = [s for s in _states.states() if s.engine.server_manager is server]
    assert state.llm.session_ids() == []  # the timed-out session was dropped, not kept


async def test_a_v0_group_keeps_its_rows_and_a_failed_member_gets_the_neutral_reward(make_worker, verl_tokenizer,
                                                                                     close_states, caplog):
    """V0 repeats a prompt n times under one uid; the worker runs the rows of its chunk together."""
    from verl_testkit import StubServer

    import aworld_verl.groups as loop

    loop._warned_v0_group = False

    entry = {"name": "aworld_scored", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:plain_agent",
             "reward": "verl_testkit:exact_answer_reward"}
    answers = ["5", "unused", "4"]
    server = StubServer(verl_tokenizer, script=lambda call: answers[call.member], fail_when=lambda c: c.member == 1)
    worker = make_worker([entry], server, {"actor_rollout_ref.rollout.n": 3})
    rows = [verl_row("aworld_scored", "2+3?", 0) | {"uid": "prompt-a"} for _ in range(3)]
    out = await worker.generate_sequences(_batch(rows))
    assert "closed in this worker" not in caplog.text  # the whole group: rollout.n rows
    status = list(out.non_tensor_batch["status"])
    assert sorted(status) == ["failed", "success", "success"]
    hole = status.index("failed")
    scores = out.batch["rm_scores"].sum(dim=1).tolist()
    survivors = [scores[i] for i in range(3) if i != hole]
    assert sorted(survivors) == [0.0, 1.0]
    assert scores[hole] == pytest.approx(0.5)  # the survivors' mean: neutral for the group
    assert int(out.batch["response_mask"][hole].sum()) == 0
    assert {f["group"] for f in out.non_tensor_batch["aworld"]} == {"prompt-a"}

    # a chunk that holds only part of a group (V0 with a batch the workers do not divide) warns once
    part = [verl_row("aworld_scored", "2+3?", 0) | {"uid": "prompt-b"} for _ in range(2)]
    await worker.generate_sequences(_batch(part))
    assert "GRPO group prompt-b closed in this worker with 2 members, expected 3" in caplog.text
    loop._warned_v0_group = False


async def test_truncation_keeps_ids_mask_and_logprobs_aligned(make_worker, verl_tokenizer, monkeypatch, close_states):
    from verl_testkit import MCP_URL_ENV, StubServer

    from aworld_core.testing import McpHttpServer

    call = "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": "x" * 40}}) + "\n</tool_call>"
    entry = {"name": "aworld_mcp", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:mcp_agent"}
    server = StubServer(verl_tokenizer, script=[call], response_length=48)
    async with McpHttpServer(name="calc", tools=["echo"]) as mcp:
        monkeypatch.setenv(MCP_URL_ENV, mcp.url)
        worker = make_worker([entry], server, {"actor_rollout_ref.rollout.response_length": 48})
        out = await worker.generate_sequences(_batch([verl_row("aworld_mcp", "echo a lot")]))

    assert out.non_tensor_batch["status"][0] == "success" and out.non_tensor_batch["stop"][0] == "length"
    n = int(out.batch["attention_mask"][0, P:].sum())
    ids = out.batch["responses"][0, :n].tolist()
    mask = out.batch["response_mask"][0, :n].tolist()
    logprobs = out.batch["rollout_log_probs"][0, :n].tolist()
    assert n == 48 == out.batch["responses"].shape[1]
    sampled = [c.token_ids for c in server.calls]
    first = len(sampled[0])
    assert ids[:first] == sampled[0] and mask[:first] == [1] * first
    assert logprobs[:first] == pytest.approx(server.calls[0].log_probs)
    for i in range(n):  # env tokens carry logprob 0, sampled ones their own
        if mask[i] == 0:
            assert logprobs[i] == 0.0
    # every sampled token in the view is one the server returned, in order
    kept = [t for t, m in zip(ids, mask, strict=True) if m == 1]
    flat = [t for ids_ in sampled for t in ids_]
    assert kept == flat[: len(kept)]
    # no call asked for more than the budget left
    assert all(c.sampling_params["max_tokens"] <= 48 for c in server.calls)


async def test_reward_in_the_loop_becomes_rm_scores(make_worker, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    entry = {
        "name": "aworld_scored",
        "_target_": "aworld_verl.AworldAgentLoop",
        "agent": "verl_testkit:plain_agent",
        "reward": "verl_testkit:exact_answer_reward",
    }
    server = StubServer(
        verl_tokenizer,
        script=["the answer is 5"],
        fail_when=lambda call: "explode" in verl_tokenizer.decode(call.prompt_ids),
    )
    worker = make_worker([entry], server)
    out = await worker.generate_sequences(
        _batch(
            [
                verl_row("aworld_scored", "2+3?", 0, truth="5"),
                verl_row("aworld_scored", "2+2?", 1, truth="4"),
                verl_row("aworld_scored", "explode, then 2+3?", 2, truth="5"),
            ]
        )
    )
    assert list(out.non_tensor_batch["status"]) == ["success", "success", "failed"]
    rm = out.batch["rm_scores"]
    for row, expected in ((0, 1.0), (1, 0.0), (2, 0.0)):
        last = int(out.batch["attention_mask"][row, P:].sum()) - 1
        assert rm[row, last].item() == expected
        assert float(rm[row].sum()) == expected
    assert int(out.batch["response_mask"][2].sum()) == 0  # the failure's placeholder reaches no token
    assert "reward_extra_info" not in out.non_tensor_batch  # V0 merges that key across all rows

    # next to verl's own loop (no score of its own) the batch still assembles
    mixed = await worker.generate_sequences(
        _batch([verl_row("aworld_scored", "2+3?", 0), verl_row("single_turn_agent", "2+3?", 1)])
    )
    assert "rm_scores" not in mixed.batch.keys()
    assert list(mixed.non_tensor_batch["status"]) == ["success", None]


async def test_a_failing_reward_makes_the_episode_untrainable(make_worker, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    from aworld_core.errors import UsageError

    server = StubServer(verl_tokenizer, script=["5"])
    base = {"_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:plain_agent"}
    worker = make_worker([{**base, "name": "misconfigured", "reward": "verl_testkit:no_such_reward_function"},
                          {**base, "name": "exploding", "reward": "verl_testkit:exploding_reward"}], server)
    with pytest.raises(UsageError, match="no_such_reward_function"):  # a misconfigured reward fails loudly
        await worker.generate_sequences(_batch([verl_row("misconfigured", "2+3?")]))

    out = await worker.generate_sequences(_batch([verl_row("exploding", "2+3?")]))
    assert out.non_tensor_batch["status"][0] == "success"  # the episode ran; its reward did not
    assert out.non_tensor_batch["aworld"][0]["untrained"] == "reward_failed"
    assert "the grader is down" in out.non_tensor_batch["aworld"][0]["error"]
    assert int(out.batch["response_mask"][0].sum()) == 0
