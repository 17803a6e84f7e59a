"""Multi-turn tool episodes through verl's worker: a real MCP server on loopback, swarms (a swarm
with two trained agents under the V1 trainer: test_v1_groups.py).

The rollout server is scripted (the tiny random model never writes a tool call): it returns the
ids of a Hermes tool call, then of an answer. The response verl trains on must interleave those
sampled ids (mask 1, their logprobs) with the rendered tool result (mask 0, logprob 0).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import numpy as np
from verl_testkit import PROMPT_LENGTH as P

pytestmark = pytest.mark.slow



def _batch(rows: list[dict[str, Any]]) -> Any:
    from verl.protocol import DataProto

    columns = {}
    for key in rows[0]:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row[key] for row in rows]
        columns[key] = column
    return DataProto.from_dict(non_tensors=columns)


def _row(agent_name: str, question: str, index: int = 0) -> dict[str, Any]:
    return {
        "raw_prompt": [{"role": "user", "content": question}],
        "agent_name": agent_name,
        "data_source": "unit",
        "reward_model": {"style": "rule", "ground_truth": "5"},
        "extra_info": {"index": index},
        "index": index,
    }


def _tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """Runs of equal mask values: (value, start, end)."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def _response(out: Any, row: int) -> tuple[list[int], list[int], list[float]]:
    length = int(out.batch["attention_mask"][row, P:].sum())
    return (
        out.batch["responses"][row, :length].tolist(),
        out.batch["response_mask"][row, :length].tolist(),
        out.batch["rollout_log_probs"][row, :length].tolist(),
    )


async def test_mcp_tool_episode_masks_tool_tokens(make_worker, verl_tokenizer, monkeypatch, close_states):
    from verl_testkit import MCP_URL_ENV, StubServer

    from aworld_core.testing import McpHttpServer

    entry = {"name": "aworld_mcp", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:mcp_agent"}
    server = StubServer(verl_tokenizer, script=[_tool_call("add", {"a": 2, "b": 3}), "The sum is 5."])
    async with McpHttpServer(name="calc", tools=["add"]) as mcp:
        monkeypatch.setenv(MCP_URL_ENV, mcp.url)
        worker = make_worker([entry], server)
        out = await worker.generate_sequences(_batch([_row("aworld_mcp", "What is 2 + 3?")]))

    assert out.non_tensor_batch["status"][0] == "success"
    calls = server.calls
    assert len(calls) == 2, [c.request_id for c in calls]
    assert calls[0].request_id == calls[1].request_id  # one sticky session per episode
    ids, mask, logprobs = _response(out, 0)
    runs = _segments(mask)
    assert [value for value, _, _ in runs] == [1, 0, 1]
    (_, a0, a1), (_, t0, t1), (_, b0, b1) = runs
    # sampled ids verbatim, with the server's logprobs
    assert ids[a0:a1] == calls[0].token_ids and logprobs[a0:a1] == pytest.approx(calls[0].log_probs)
    assert ids[b0:b1] == calls[1].token_ids and logprobs[b0:b1] == pytest.approx(calls[1].log_probs)
    # the tool's answer is in the masked part, with logprob 0
    tool_text = verl_tokenizer.decode(ids[t0:t1])
    assert "5" in tool_text and "tool_response" in tool_text
    assert logprobs[t0:t1] == [0.0] * (t1 - t0)
    # the second call's prompt is the first call's prompt + everything the response holds so far
    prompt = out.batch["prompts"][0][out.batch["attention_mask"][0, :P].bool()].tolist()
    assert calls[0].prompt_ids == prompt
    assert calls[1].prompt_ids == prompt + ids[:b0]
    assert out.non_tensor_batch["__num_turns__"][0] == 4  # user, assistant, tool, assistant


async def test_swarm_only_the_trained_agent_calls_verl(make_worker, verl_tokenizer, monkeypatch, close_states):
    from verl_testkit import OTHER_LLM_MODEL_ENV, OTHER_LLM_URL_ENV, StubServer

    from support.openai_stub import OpenAIStub

    entry = {"name": "aworld_team", "_target_": "aworld_verl.AworldAgentLoop", "agent": "verl_testkit:lead_swarm"}
    server = StubServer(
        verl_tokenizer, script=[_tool_call("researcher", {"task": "find the capital of France"}), "Paris."]
    )
    async with OpenAIStub(["The capital of France is Paris."]) as other:
        monkeypatch.setenv(OTHER_LLM_URL_ENV, other.base_url)
        monkeypatch.setenv(OTHER_LLM_MODEL_ENV, other.model)
        worker = make_worker([entry], server)
        out = await worker.generate_sequences(_batch([_row("aworld_team", "What is the capital of France?")]))

    assert out.non_tensor_batch["status"][0] == "success"
    assert len(server.calls) == 2  # the lead's two turns went to verl
    assert len(other.requests) == 1  # the researcher used its own endpoint
    assert other.requests[0]["messages"][-1]["content"] == "find the capital of France"
    ids, mask, _ = _response(out, 0)
    runs = _segments(mask)
    assert [value for value, _, _ in runs] == [1, 0, 1]
    member_answer = verl_tokenizer.decode(ids[runs[1][1] : runs[1][2]])
    assert "The capital of France is Paris." in member_answer  # trained on as environment text only
