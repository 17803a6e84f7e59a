"""``AworldWorkflow`` on a real tiny model, a real MCP server, and AReaL's own classes.

These tests call ``arun_episode`` with ``FakeArealEngine`` (which records every request); the
tests in ``test_dispatch.py`` go through AReaL's real ``RemoteInfEngine.submit``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
from areal.infra.workflow_executor import check_trajectory_format
from areal_fake_engine import FakeArealEngine
from areal_tool_model import ANSWER_TEXT, QUESTION, job_dict, make_workflow

from aworld_areal.data import SAMPLE_COLUMN, sample_rows
from aworld_areal.workflow import close_workflow_states
from aworld_core.errors import UsageError
from aworld_core.worker.outcomes import MCP_UNREACHABLE

REWARDS = Path(__file__).resolve().parent / "areal_rewards.py"
GSM8K_ROW = {"question": QUESTION, "answer": "2 + 3 = 5\n#### 5"}
KEYS = {"input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards"}


@pytest.fixture(autouse=True)
def fresh_states():
    """Workflow state (counters included) is per process; each test starts from none."""
    close_workflow_states()
    yield
    close_workflow_states()


def run(workflow, engine, data=GSM8K_ROW):
    return asyncio.run(workflow.arun_episode(engine, dict(data)))


def test_whole_tool_episode_is_one_trajectory_of_exact_tokens(tool_model_dir, mcp_server):
    workflow = make_workflow(tool_model_dir, mcp_server)
    engine = FakeArealEngine(tool_model_dir)
    out = run(workflow, engine)

    assert out is not None, workflow.rejected
    assert set(out) == KEYS
    assert check_trajectory_format(out, batch_size=1, expected_keys=KEYS)
    ids = out["input_ids"][0].tolist()
    length = len(ids)
    assert out["input_ids"].dtype == torch.int32 and out["input_ids"].shape == (1, length)
    assert out["attention_mask"].dtype == torch.bool and bool(out["attention_mask"].all())
    assert out["logprobs"].dtype == torch.float32 and out["versions"].dtype == torch.int32
    assert out["rewards"].shape == (1,) and out["rewards"].dtype == torch.float32

    # two LLM calls (tool call, then the answer), both sent to AReaL's engine as one episode
    assert len(engine.requests) == 2
    rids = {req.rid for req in engine.requests}
    assert len(rids) == 1 and next(iter(rids)).startswith("ep-")
    assert all(req.gconfig.n_samples == 1 for req in engine.requests)
    text = workflow.tokenizer.decode(engine.responses[0].output_tokens)
    assert '<tool_call>' in text and '"add"' in text
    assert ANSWER_TEXT in workflow.tokenizer.decode(engine.responses[1].output_tokens)

    # trained tokens are exactly the sampled ones, where the engine sampled them
    mask = out["loss_mask"][0].tolist()
    logprobs = out["logprobs"][0].tolist()
    for req, resp in zip(engine.requests, engine.responses, strict=True):
        start, end = len(req.input_ids), len(req.input_ids) + len(resp.output_tokens)
        assert ids[:start] == list(req.input_ids)
        assert ids[start:end] == resp.output_tokens
        assert mask[start:end] == [1] * len(resp.output_tokens)
        assert logprobs[start:end] == pytest.approx(resp.output_logprobs)
    sampled = [t for r in engine.responses for t in r.output_tokens]
    assert [t for t, m in zip(ids, mask, strict=True) if m] == sampled
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)

    # the tool's answer (from the real MCP server) sits between the turns, masked out
    first_end = len(engine.requests[0].input_ids) + len(engine.responses[0].output_tokens)
    tool_span = workflow.tokenizer.decode(ids[first_end : len(engine.requests[1].input_ids)])
    assert "<tool_response>" in tool_span and "5" in tool_span
    assert set(mask[first_end : len(engine.requests[1].input_ids)]) == {0}
    assert mask[: len(engine.requests[0].input_ids)] == [0] * len(engine.requests[0].input_ids)
    assert out["rewards"].tolist() == [1.0]
    assert workflow.accepted == 1 and not workflow.rejected


def test_versions_follow_weight_updates_per_token(tool_model_dir, mcp_server):
    workflow = make_workflow(tool_model_dir, mcp_server)
    engine = FakeArealEngine(tool_model_dir, version=3, interrupt_after=4)
    engine.after_response = lambda e: e.set_version(e.version + 1)  # a weight update between turns
    out = run(workflow, engine)
    assert out is not None
    versions = out["versions"][0].tolist()
    mask = out["loss_mask"][0].tolist()
    assert all(v == -1 for v, m in zip(versions, mask, strict=True) if not m)
    for req, resp in zip(engine.requests, engine.responses, strict=True):
        start = len(req.input_ids)
        assert versions[start : start + len(resp.output_versions)] == resp.output_versions
    # turn 1: 4 tokens at v3, the rest at v4 (interrupted); update to v5; turn 2 starts at v5
    first = engine.responses[0].output_versions
    assert first[:4] == [3, 3, 3, 3] and set(first[4:]) == {4}
    assert engine.responses[1].output_versions[0] == 5
    assert sorted(set(versions) - {-1}) == [3, 4, 5, 6]


def test_reward_is_discounted_once_per_episode(tool_model_dir, mcp_server):
    workflow = make_workflow(tool_model_dir, mcp_server, turn_discount=0.5)
    out = run(workflow, FakeArealEngine(tool_model_dir))
    # reward 1.0, 2 turns: 1.0 * 0.5 ** 1 (applying it twice would give 0.25)
    assert out["rewards"].tolist() == [0.5]


def test_rows_in_areal_shape_and_packed_samples_both_work(tool_model_dir, mcp_server):
    from aworld_core.schemas import Sample

    workflow = make_workflow(tool_model_dir, mcp_server)
    messages_row = {"messages": [{"role": "user", "content": QUESTION}], "answer": "5"}
    packed = sample_rows([Sample(id="s1", prompt=[{"role": "user", "content": QUESTION}], ground_truth="5")])[0]
    assert SAMPLE_COLUMN in packed
    for row in (messages_row, packed):
        out = run(workflow, FakeArealEngine(tool_model_dir), row)
        assert out is not None and out["rewards"].tolist() == [1.0]


def test_failed_llm_call_rejects_the_episode(tool_model_dir, mcp_server):
    workflow = make_workflow(tool_model_dir, mcp_server)
    engine = FakeArealEngine(tool_model_dir, fail_with=RuntimeError("sglang server went away"))
    assert run(workflow, engine) is None
    assert workflow.rejected == {"failed": 1} and workflow.accepted == 0
    assert "sglang server went away" in workflow.recent_rejections[-1][2]


def test_timed_out_episode_is_rejected(tool_model_dir, mcp_server):
    workflow = make_workflow(tool_model_dir, mcp_server, episode_timeout_s=0.3)
    assert run(workflow, FakeArealEngine(tool_model_dir, delay_s=5.0)) is None
    assert workflow.rejected == {"timeout": 1}


def test_failing_reward_rejects_instead_of_scoring_zero(tool_model_dir, mcp_server):
    job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:broken"})
    workflow = make_workflow(tool_model_dir, mcp_server, job=job)
    assert run(workflow, FakeArealEngine(tool_model_dir)) is None
    assert workflow.rejected == {"reward_failed": 1}
    reason, episode_id, detail = workflow.recent_rejections[-1]
    assert reason == "reward_failed" and episode_id.startswith("ep-")
    assert "ValueError: this reward always fails" in detail


def test_unreachable_mcp_server_rejects_the_episode(tool_model_dir, mcp_server, unused_port):
    job = job_dict(tool_model_dir, mcp_server)
    job["agent"]["mcp_config"] = {"mcpServers": {"calc": {"type": "streamable-http", "url": f"http://127.0.0.1:{unused_port}/mcp", "timeout": 2}}}
    workflow = make_workflow(tool_model_dir, mcp_server, job=job)
    engine = FakeArealEngine(tool_model_dir)
    assert run(workflow, engine) is None
    assert workflow.rejected == {MCP_UNREACHABLE: 1} and engine.requests == []
    assert str(unused_port) in workflow.recent_rejections[-1][2]


def test_one_call_runs_the_whole_group_in_areals_layout(tool_model_dir, mcp_server):
    gconfig = GenerationHyperparameters(n_samples=3, temperature=1.0, max_new_tokens=32, max_tokens=2048)
    workflow = make_workflow(tool_model_dir, mcp_server, gconfig=gconfig)
    engine = FakeArealEngine(tool_model_dir)
    out = run(workflow, engine)

    assert check_trajectory_format(out, batch_size=3, expected_keys=KEYS)  # concat_padded_tensors' layout
    assert out["rewards"].shape == (3,)
    by_rid = {}
    for req, resp in zip(engine.requests, engine.responses, strict=True):
        by_rid.setdefault(req.rid, []).append((req, resp))
    assert len(by_rid) == 3  # each member is its own engine session
    # a member's row is its last call's prompt plus what that call sampled, padded to the longest
    episodes = [list(calls[-1][0].input_ids) + list(calls[-1][1].output_tokens) for calls in by_rid.values()]
    lengths = out["attention_mask"].sum(-1).tolist()
    trained = [row for row in range(3) if out["loss_mask"][row].sum() > 0]
    assert len(trained) == workflow.accepted
    for row in trained:
        assert out["input_ids"][row, : lengths[row]].tolist() in episodes
        assert out["loss_mask"][row, lengths[row] :].sum().item() == 0
    assert workflow.accepted + sum(workflow.rejected.values()) == 3


def test_a_workflow_areal_groups_again_refuses(tool_model_dir, mcp_server):
    """Wrapped in AReaL's GroupedRolloutWorkflow (submit(group_size>1)) it would run n x n episodes."""
    gconfig = GenerationHyperparameters(n_samples=2, greedy=True, max_new_tokens=48, max_tokens=2048)
    workflow = make_workflow(tool_model_dir, mcp_server, gconfig=gconfig)
    grouped = GroupedRolloutWorkflow(workflow, 2, logging.getLogger("test"))
    with pytest.raises(UsageError, match="group_size=1"):
        asyncio.run(grouped.arun_episode(FakeArealEngine(tool_model_dir), dict(GSM8K_ROW)))


@pytest.mark.slow
def test_rewards_in_a_process_pool(tool_model_dir, mcp_server):
    from aworld_core.worker.scoring import shutdown_pools

    try:
        job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:says_five"})
        workflow = make_workflow(tool_model_dir, mcp_server, job=job, reward_processes=1, reward_timeout_s=60)
        out = run(workflow, FakeArealEngine(tool_model_dir))
        assert out is not None and out["rewards"].tolist() == [1.0]

        job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:slow"})
        workflow = make_workflow(tool_model_dir, mcp_server, job=job, reward_processes=1, reward_timeout_s=0.5)
        assert run(workflow, FakeArealEngine(tool_model_dir)) is None
        assert workflow.rejected == {"reward_failed": 1}
    finally:
        shutdown_pools()


@pytest.mark.slow
def test_a_dying_reward_process_fails_its_episode_and_the_next_one_gets_a_fresh_pool(tool_model_dir, mcp_server):
    from aworld_core.worker import scoring

    try:
        broken = scoring._pool(1)
        job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:dies"})
        workflow = make_workflow(tool_model_dir, mcp_server, job=job, reward_processes=1, reward_timeout_s=60)
        assert run(workflow, FakeArealEngine(tool_model_dir)) is None  # recorded, not raised
        assert workflow.rejected == {"reward_failed": 1}
        assert "BrokenProcessPool" in workflow.recent_rejections[-1][2]
        assert scoring._POOLS.get(1) is not broken

        job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:says_five"})
        workflow = make_workflow(tool_model_dir, mcp_server, job=job, reward_processes=1, reward_timeout_s=60)
        out = run(workflow, FakeArealEngine(tool_model_dir))
        assert out is not None and out["rewards"].tolist() == [1.0], workflow.recent_rejections
    finally:
        scoring.shutdown_pools()


@pytest.mark.slow
def test_a_hung_reward_times_out_and_does_not_hold_the_pool(tool_model_dir, mcp_server):
    import multiprocessing
    import time

    from aworld_core.worker import scoring

    try:
        stuck = scoring._pool(1)
        before = {p.pid for p in multiprocessing.active_children()}
        job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:hangs"})
        workflow = make_workflow(tool_model_dir, mcp_server, job=job, reward_processes=1, reward_timeout_s=1)
        assert run(workflow, FakeArealEngine(tool_model_dir)) is None
        assert workflow.rejected == {"reward_failed": 1}
        assert "TimeoutError" in workflow.recent_rejections[-1][2]
        assert scoring._POOLS.get(1) is not stuck
        stuck_processes = [p for p in multiprocessing.active_children() if p.pid not in before]
        assert stuck_processes  # the old pool's worker, still sleeping

        # the only worker of the old pool sleeps for 120 s; this reward runs in a fresh pool
        job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:says_five"})
        workflow = make_workflow(tool_model_dir, mcp_server, job=job, reward_processes=1, reward_timeout_s=30)
        out = run(workflow, FakeArealEngine(tool_model_dir))
        assert out is not None and out["rewards"].tolist() == [1.0], workflow.recent_rejections

        # once nobody waits on the old pool (a timeout later), its stuck process is killed
        deadline = time.monotonic() + 10
        while any(p.is_alive() for p in stuck_processes) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(p.is_alive() for p in stuck_processes)
    finally:
        scoring.shutdown_pools()


def test_episode_stats_reach_areals_stats_tracker(tool_model_dir, mcp_server):
    from areal.utils import stats_tracker

    stats_tracker.get("rollout").export(reset=True)
    workflow = make_workflow(tool_model_dir, mcp_server)
    run(workflow, FakeArealEngine(tool_model_dir))
    run(workflow, FakeArealEngine(tool_model_dir, fail_with=RuntimeError("down")))
    stats = stats_tracker.get("rollout").export(reset=True)
    assert stats["rollout/aworld/reward"] == 1.0 and stats["rollout/aworld/num_turns"] == 2.0
    assert stats["rollout/aworld/accepted"] == 0.5 and stats["rollout/aworld/accepted__count"] == 2  # groups
    # per-step counts (summed over the step's groups) and rates (averaged)
    assert stats["rollout/aworld/groups"] == 2 and stats["rollout/aworld/episodes"] == 2
    assert stats["rollout/aworld/trained"] == 1 and stats["rollout/aworld/untrained/failed"] == 1
    assert stats["rollout/aworld/untrained/reward_failed"] == 0
    assert stats["rollout/aworld/failed_rate"] == 0.5 and stats["rollout/aworld/tool_call_rate"] == 0.5


OPENAI_AGENT = Path(__file__).resolve().parent / "areal_openai_agent.py"


def _openai_job(model_dir: Path, server: Any, function: str, path: Path = OPENAI_AGENT) -> dict[str, Any]:
    return job_dict(model_dir, server, agent={"openai_agent": f"{path}:{function}"})


def test_openai_api_agent_trains_through_the_gateway(tool_model_dir, mcp_server, monkeypatch):
    monkeypatch.setenv("AREAL_TEST_MCP_URL", mcp_server.url)
    workflow = make_workflow(tool_model_dir, mcp_server, job=_openai_job(tool_model_dir, mcp_server, "adder_agent"))
    engine = FakeArealEngine(tool_model_dir)
    out = run(workflow, engine)
    assert out is not None, workflow.recent_rejections
    assert check_trajectory_format(out, batch_size=1, expected_keys=KEYS)
    # the agent's two calls went through AReaL's engine as one episode, exact tokens trained
    assert len(engine.requests) == 2 and len({r.rid for r in engine.requests}) == 1
    ids, mask = out["input_ids"][0].tolist(), out["loss_mask"][0].tolist()
    for req, resp in zip(engine.requests, engine.responses, strict=True):
        start = len(req.input_ids)
        assert ids[start : start + len(resp.output_tokens)] == resp.output_tokens
    assert [t for t, m in zip(ids, mask, strict=True) if m] == [t for r in engine.responses for t in r.output_tokens]
    assert out["rewards"].tolist() == [1.0]


@pytest.mark.parametrize(("agent", "why"), [("broken_agent", "the agent crashed"), ("wrong_type_agent", "must return")])
def test_failing_openai_api_agent_is_rejected(tool_model_dir, mcp_server, agent, why):
    workflow = make_workflow(tool_model_dir, mcp_server, job=_openai_job(tool_model_dir, mcp_server, agent))
    assert run(workflow, FakeArealEngine(tool_model_dir)) is None
    assert workflow.rejected == {"failed": 1} and why in workflow.recent_rejections[-1][2]


def test_truncated_episodes_are_not_trained_with_reject_truncated(tool_model_dir, mcp_server):
    workflow = make_workflow(tool_model_dir, mcp_server, max_response_tokens=8, reject_truncated=True)
    assert run(workflow, FakeArealEngine(tool_model_dir)) is None
    assert workflow.rejected == {"truncated": 1}
    kept = make_workflow(tool_model_dir, mcp_server, max_response_tokens=8)  # trained as cut
    out = run(kept, FakeArealEngine(tool_model_dir))
    assert out is not None and out["loss_mask"].sum() > 0


def test_max_failed_steps_stops_the_workers_rollouts(tool_model_dir, mcp_server):
    from aworld_core.errors import AworldError

    job = job_dict(tool_model_dir, mcp_server, rollout={"episode_timeout_s": 60, "max_failed_steps": 2})
    workflow = make_workflow(tool_model_dir, mcp_server, job=job, groups_per_step=1)
    down = FakeArealEngine(tool_model_dir, fail_with=RuntimeError("sglang server went away"))
    assert run(workflow, down) is None  # one step with nothing trainable
    with pytest.raises(AworldError, match=r"2 consecutive training steps.*sglang server went away.*max_failed_steps"):
        run(workflow, down)
    engine = FakeArealEngine(tool_model_dir)
    with pytest.raises(AworldError, match="max_failed_steps"):  # stopped: no more episodes run
        run(workflow, engine)
    assert engine.requests == []
    # without groups_per_step (a workflow built outside aworld_areal.train) nothing is counted as a step
    free = make_workflow(tool_model_dir, mcp_server, job=job, turn_discount=0.9)
    assert [run(free, down) for _ in range(3)] == [None, None, None]


def test_bad_options_fail_when_the_workflow_is_built(tool_model_dir, mcp_server):
    with pytest.raises(UsageError, match=r"unknown AworldWorkflow option\(s\) \['turn_discunt'\].*'turn_discount'"):
        make_workflow(tool_model_dir, mcp_server, turn_discunt=0.5)
    with pytest.raises(UsageError, match=r"workflow\.turn_discount must be in \(0, 1\]"):
        make_workflow(tool_model_dir, mcp_server, turn_discount=0.0)
    with pytest.raises(UsageError, match="no reward section"):
        make_workflow(tool_model_dir, mcp_server, job={**job_dict(tool_model_dir, mcp_server), "reward": None})
    with pytest.raises(UsageError, match="has no attribute 'REWARDS_MISSING'"):
        make_workflow(tool_model_dir, mcp_server, job=_openai_job(tool_model_dir, mcp_server, "REWARDS_MISSING",
                                                                  OPENAI_AGENT.parent / "areal_rewards.py"))
    with pytest.raises(UsageError, match=r"agent: \{openai_agent: 'module:function'\}"):  # the one spelling now
        make_workflow(tool_model_dir, mcp_server, openai_agent=f"{OPENAI_AGENT}:adder_agent")
