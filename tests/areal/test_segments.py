"""Segmented episodes on AReaL (issue 27): an agent that compacts its context, through AReaL's real
dispatch (``RemoteInfEngine.submit``, its workflow executor, an SGLang-shaped server over a real tiny
model); the group's rows then go through AReaL's own ``batched_call`` and ``Normalization``.

Each episode is two segments (the tool call and the policy's summary; the answer after the
compaction), so the group is two layers of ``n`` rows: AReaL's fixed-stride group normalization
gives every segment its episode's advantage, each row holds exactly its segment's sampled ids
(mask 1, their logprobs and versions) and nothing else trains.
"""

from __future__ import annotations

import json

import pytest
import torch
from areal.api.cli_args import NormConfig
from areal.utils.data import Normalization, batched_call
from areal_sglang_server import submit_all
from areal_tool_model import QUESTION, agent_section, job_dict

from aworld_areal.workflow import close_workflow_states
from aworld_core.schemas import Sample, TrainingSegment
from aworld_core.testing import check_segments
from aworld_core.tokens.engine import TokenOutput

pytest_plugins = ["areal_fixtures"]

GCONFIG = {"greedy": True, "max_new_tokens": 48, "max_tokens": 4096}
REWARDS = "areal_rewards.py:scripted"


@pytest.fixture(autouse=True)
def fresh_states():
    close_workflow_states()
    yield
    close_workflow_states()


def _segments_of_rows(out: dict, rows: list[int], prompts: list[list[int]]) -> list[TrainingSegment]:
    """The rows as training segments: each row's prompt is the shortest request prompt it starts with."""
    segments = []
    for r in rows:
        n = int(out["attention_mask"][r].sum())
        ids = out["input_ids"][r][:n].tolist()
        p = min(len(q) for q in prompts if ids[: len(q)] == q)
        mask = out["loss_mask"][r][:n].tolist()
        assert mask[:p] == [0] * p
        segments.append(TrainingSegment(prompt_ids=ids[:p], response_ids=ids[p:], response_mask=mask[p:],
                                        response_logprobs=out["logprobs"][r][p:n].tolist(),
                                        response_versions=out["versions"][r][p:n].tolist()))
    return segments


def test_a_compacting_groups_segments_keep_areals_group_stride(tool_model_dir, mcp_server, real_engine, sglang_server):
    from pathlib import Path

    here = Path(__file__).resolve().parent
    compaction = {"strategy": "summary", "max_context_tokens": 16, "summary_prompt": "Summarize.", "max_compactions": 1}
    job = job_dict(tool_model_dir, mcp_server, agent=agent_section(mcp_server, compaction=compaction),
                   reward={"name": str(here / REWARDS), "trajectory_aware": True})
    sample = Sample(id="seg", prompt=[{"role": "user", "content": QUESTION}], ground_truth="5",
                    extra_info={"rewards": [1.0, 0.0]})
    before = len(sglang_server.outputs)
    kwargs = {"job": json.dumps(job), "gconfig": {**GCONFIG, "n_samples": 2}, "tokenizer": str(tool_model_dir),
              "reward_processes": 0}
    (out,) = submit_all(real_engine, [{"aworld_sample": sample.model_dump_json()}], kwargs)
    served = sglang_server.outputs[before:]
    assert out is not None and out["input_ids"].shape[0] == 4  # two layers of the group's two members
    assert out["rewards"].tolist() == [1.0, 0.0, 1.0, 0.0]  # each member's reward on each of its rows

    _check_group(out, served)

    # AReaL's group normalization over its fixed stride: every segment gets its episode's advantage
    config = NormConfig(mean_level="group", std_level="group", group_size=2)
    normalized = batched_call(lambda b: Normalization(config)(b["rewards"]), [out], unpack=False).tolist()
    episode_level = Normalization(config)(torch.tensor([1.0, 0.0])).tolist()
    assert normalized == pytest.approx(episode_level * 2, abs=1e-5)


def _check_group(out: dict, served: list) -> None:
    """A group of two two-segment members (rows m and 2 + m) against the server's generations: each
    member's segments hold exactly its generations' ids and logprobs (mask 1), nothing else trains."""
    prompts = [list(payload["input_ids"]) for payload, _ in served]
    rows = [out["input_ids"][r][: int(out["attention_mask"][r].sum())].tolist() for r in range(4)]
    calls_of: dict[int, list] = {0: [], 1: []}  # each request to the member whose rows it extends

    def holds(r: int, prompt: list[int], output) -> bool:  # the row holds this very generation: ids and logprobs
        at, ids = len(prompt), list(output.token_ids)
        return (rows[r][:at] == prompt and rows[r][at:at + len(ids)] == ids
                and out["logprobs"][r][at:at + len(ids)].tolist() == [float(x) for x in output.logprobs])

    for payload, output in served:
        prompt = list(payload["input_ids"])
        members = sorted({r % 2 for r in range(4) if rows[r][: len(prompt)] == prompt},
                         key=lambda m: len(calls_of[m]))  # greedy members may be identical: fill evenly
        # identical greedy ids may still differ in their last logprob digits (batched forwards): the
        # member whose row holds this generation's logprobs exactly comes first
        members.sort(key=lambda m: not any(holds(r, prompt, output) for r in (m, 2 + m)))
        calls_of[members[0]].append((prompt, TokenOutput(list(output.token_ids), list(output.logprobs), "stop", 0)))
    for member in (0, 1):
        segments = _segments_of_rows(out, [member, 2 + member], prompts)
        calls = calls_of[member]
        held = check_segments(segments, calls)  # every sampled token of the episode, and nothing else, trains
        assert len(held) == 2 and sum(len(h) for h in held) == len(calls)
    loss_tokens = int(out["loss_mask"].sum())
    assert loss_tokens == sum(len(o.token_ids) for _, o in served)


SMOLAGENTS = "aworld_core.testing.smolagents_client:smolagents_agent"


def test_a_smolagents_groups_segments_train_exactly(tool_model_dir, mcp_server, real_engine, sglang_server):
    """Real smolagents (``ToolCallingAgent`` over ``OpenAIServerModel``) as the job's ``agent.openai_agent``,
    through AReaL's dispatch: it sends its tool call back as assistant text, so each member is two
    segments (the tool call; smolagents' final-answer call on its re-serialized memory), two layers of
    rows that train exactly the server's sampled ids and logprobs, nothing else."""
    pytest.importorskip("smolagents")
    from pathlib import Path

    here = Path(__file__).resolve().parent
    job = job_dict(tool_model_dir, mcp_server, agent={"openai_agent": SMOLAGENTS},
                   reward={"name": str(here / REWARDS), "trajectory_aware": True})
    sample = Sample(id="smol", prompt=[{"role": "user", "content": QUESTION}], ground_truth="5",
                    extra_info={"rewards": [1.0, 0.0]})
    before = len(sglang_server.outputs)
    kwargs = {"job": json.dumps(job), "gconfig": {**GCONFIG, "n_samples": 2}, "tokenizer": str(tool_model_dir),
              "reward_processes": 0}
    (out,) = submit_all(real_engine, [{"aworld_sample": sample.model_dump_json()}], kwargs)
    served = sglang_server.outputs[before:]
    assert len(served) == 4  # two calls per member: smolagents' step, then its final-answer call
    assert out is not None and out["input_ids"].shape[0] == 4  # two layers of the group's two members
    assert out["rewards"].tolist() == [1.0, 0.0, 1.0, 0.0]
    _check_group(out, served)
