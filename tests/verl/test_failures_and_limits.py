"""Failed and timed-out episodes give nothing trainable; truncation keeps ids, mask and logprobs
aligned; an in-loop reward becomes verl's ``rm_scores``."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import numpy as np
from verl_testkit import PROMPT_LENGTH as P

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


def _row(agent_name: str, question: str, index: int = 0, truth: str = "5") -> dict[str, Any]:
    return {
        "raw_prompt": [{"role": "user", "content": question}],
        "agent_name": agent_name,
        "data_source": "unit",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": index},
        "index": index,
    }


def _loop(worker: Any, **kwargs: Any) -> Any:
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from aworld_verl import AworldAgentLoop

    return AworldAgentLoop(
        trainer_config=DictConfigWrap(worker.config),
        server_manager=worker.llm_client,
        tokenizer=worker.tokenizer,
        processor=worker.processor,
        dataset_cls=worker.dataset_cls,
        data_config=DictConfigWrap(worker.config.data),
        **kwargs,
    )


async def test_failed_episode_is_fully_masked_in_the_v0_batch(make_worker, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    entry = {"name": "aworld_plain", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:plain_agent"}
    server = StubServer(verl_tokenizer, script=["fine"], fail_when=lambda call: "explode" in verl_tokenizer.decode(call.prompt_ids))
    worker = make_worker([entry], server)
    out = await worker.generate_sequences(
        _batch([_row("aworld_plain", "please explode", 0), _row("aworld_plain", "say fine", 1)])
    )
    status = list(out.non_tensor_batch["status"])
    assert status == ["failed", "success"]
    assert "rollout server error" in out.non_tensor_batch["error"][0]
    assert int(out.batch["response_mask"][0].sum()) == 0  # nothing of it is trained
    assert int(out.batch["response_mask"][1].sum()) > 0


async def test_failed_and_timed_out_episodes_return_no_item_under_v1(make_worker, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    server = StubServer(verl_tokenizer, script=["too late"], delay_s=5.0)
    worker = make_worker([], server)
    loop = _loop(worker, agent="verl_testkit:plain_agent", episode_timeout_s=0.3)
    row = _row("aworld_plain", "hello") | {"uid": "u", "session_id": 0, "global_steps": 1}
    assert await loop.run(SAMPLING, **row) == []
    state = loop._worker()
    assert state.counters.snapshot().get("timeout") == 1
    from aworld_verl import episode_counts

    assert episode_counts().get("timeout", 0) >= 1
    assert state.llm.session_ids() == []  # the timed-out session was dropped, not kept


async def test_truncation_keeps_ids_mask_and_logprobs_aligned(make_worker, verl_tokenizer, monkeypatch, close_states):
    from verl_testkit import MCP_URL_ENV, StubServer

    from aworld_core.testing import McpHttpServer

    call = "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": "x" * 40}}) + "\n</tool_call>"
    server = StubServer(verl_tokenizer, script=[call], response_length=48)
    async with McpHttpServer(name="calc", tools=["echo"]) as mcp:
        monkeypatch.setenv(MCP_URL_ENV, mcp.url)
        worker = make_worker([], server, {"actor_rollout_ref.rollout.response_length": 48})
        loop = _loop(worker, agent="verl_testkit:mcp_agent")
        out = await loop.run(SAMPLING, **_row("aworld_mcp", "echo a lot"))

    assert out.extra_fields["status"] == "success" and out.extra_fields["stop"] == "length"
    n = len(out.response_ids)
    assert n == 48 == len(out.response_mask) == len(out.response_logprobs)
    sampled = [c.token_ids for c in server.calls]
    first = len(sampled[0])
    assert out.response_ids[:first] == sampled[0] and out.response_mask[:first] == [1] * first
    assert out.response_logprobs[:first] == pytest.approx(server.calls[0].log_probs)
    for i in range(n):  # env tokens carry logprob 0, sampled ones their own
        if out.response_mask[i] == 0:
            assert out.response_logprobs[i] == 0.0
    # every sampled token in the view is one the server returned, in order
    kept = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    flat = [t for ids in sampled for t in ids]
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
                _row("aworld_scored", "2+3?", 0, truth="5"),
                _row("aworld_scored", "2+2?", 1, truth="4"),
                _row("aworld_scored", "explode, then 2+3?", 2, truth="5"),
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
        _batch([_row("aworld_scored", "2+3?", 0), _row("single_turn_agent", "2+3?", 1)])
    )
    assert "rm_scores" not in mixed.batch.keys()
    assert list(mixed.non_tensor_batch["status"]) == ["success", None]


async def test_a_failing_reward_makes_the_episode_untrainable(make_worker, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    server = StubServer(verl_tokenizer, script=["5"])
    worker = make_worker([], server)
    loop = _loop(worker, agent="verl_testkit:plain_agent", reward="verl_testkit:no_such_reward_function")
    from aworld_core.errors import UsageError

    with pytest.raises(UsageError, match="no_such_reward_function"):
        await loop.run(SAMPLING, **_row("aworld_plain", "2+3?"))  # a misconfigured reward fails loudly

    loop = _loop(worker, agent="verl_testkit:plain_agent", reward="verl_testkit:exploding_reward")
    row = _row("aworld_plain", "2+3?") | {"uid": "u", "session_id": 0, "global_steps": 1}
    assert await loop.run(SAMPLING, **row) == []
    assert loop._worker().counters.snapshot().get("reward_failed") == 1
