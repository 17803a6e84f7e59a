"""Segmented episodes on verl (issue 27): an agent that compacts its context runs through verl's
own V1 trainer step (its TransferQueue worker, list outputs, GRPO advantage) and V0 worker.

V1: every training segment is an output of its session, holding exactly the ids the server
sampled for it with mask 1 and nothing else; the session's outputs share the episode's reward and
GRPO advantage (verl broadcasts the final output's: the core's credit rule). V0 takes one output
per sample: a segmented episode keeps its group place as a masked row with its reward, counted
untrained. A per-sequence loss_agg_mode is refused for segmented episodes.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import numpy as np
from segment_agents import SUMMARY_PROMPT
from verl_testkit import verl_row

from aworld_core.agents.compaction import SUMMARY_HEADER

pytestmark = pytest.mark.slow

ENTRY = {"name": "aworld_compact", "_target_": "aworld_verl.AworldAgentLoop", "agent": "segment_agents:compacting_agent",
         "reward": "verl_testkit:exact_answer_reward"}


def _script(tokenizer: Any):
    def script(call: Any) -> str:
        text = tokenizer.decode(call.prompt_ids)
        if SUMMARY_HEADER in text:  # the second segment: answer (member 0 right, member 1 wrong)
            return "It is 5." if call.member == 0 else "It is 4."
        if text.rstrip().endswith("assistant") and SUMMARY_PROMPT in text[-200:]:
            return "a is lorem."
        return '<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>'

    return script


def _sampled(ids: list[int], mask: list[int]) -> list[int]:
    return [t for t, m in zip(ids, mask, strict=True) if m]


async def test_v1_trains_every_segment_as_an_output_with_the_episodes_advantage(make_v1, verl_tokenizer, close_states):
    from verl_testkit import StubServer

    server = StubServer(verl_tokenizer, script=_script(verl_tokenizer))
    v1 = make_v1([ENTRY], server, ["actor_rollout_ref.rollout.n=2"])
    step = await v1.step([verl_row("aworld_compact", "Look up a, then say 2 + 3.")])
    group = step.group(step.uids()[0])
    assert [(r.session, r.index) for r in group] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for session in (0, 1):
        first, second = [r for r in group if r.session == session]
        episode = first.extra["trajectory_id"]
        calls = server.calls_for(episode)
        assert len(calls) == 3  # the tool call, the summary (segment 0), the answer (segment 1)
        # each output holds exactly its segment's sampled ids, mask 1, with their logprobs
        assert _sampled(first.response_ids, first.response_mask) == calls[0].token_ids + calls[1].token_ids
        assert _sampled(second.response_ids, second.response_mask) == calls[2].token_ids
        sampled_logprobs = [x for x, m in zip(second.logprobs, second.response_mask, strict=True) if m]
        assert sampled_logprobs == pytest.approx(calls[2].log_probs)
        # one reward and one GRPO advantage per episode, on every segment
        assert first.score == second.score and first.advantage == second.advantage
    scores = sorted(r.score for r in group if r.index == 1)
    assert scores == [0.0, 1.0]
    advantages = {r.session: r.advantage for r in group}
    assert advantages[0] > 0 > advantages[1]
    assert step.metrics["aworld/segments"] == 2.0 and step.metrics["aworld/segmented_rate"] == 1.0


async def test_v1_refuses_a_per_sequence_loss_for_segmented_episodes(make_v1, verl_tokenizer, close_states, caplog):
    from verl_testkit import StubServer

    from aworld_core.errors import UsageError
    from aworld_verl.output import segment_refusal

    server = StubServer(verl_tokenizer, script=_script(verl_tokenizer))
    v1 = make_v1([ENTRY], server, ["actor_rollout_ref.rollout.n=1"])
    step = await v1.step([verl_row("aworld_compact", "Look up a.")])
    # the episode is segmented; had the actor averaged rows first, it could not train
    episode_rows = step.group(step.uids()[0])
    assert len(episode_rows) == 2
    from aworld_core.schemas import Episode, TrainingSegment, TrainingView

    def seg() -> TrainingSegment:
        return TrainingSegment(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-0.1],
                               response_versions=[0])

    two = Episode(task_id="t", agent_id="a", training=TrainingView.of_segments([seg(), seg()]))
    with pytest.raises(UsageError, match="loss_agg_mode='seq-mean-token-mean'"):
        segment_refusal(two, v1=True, loss_agg_mode="seq-mean-token-mean")
    assert segment_refusal(two, v1=True, loss_agg_mode="token-mean") is None
    assert segment_refusal(two, v1=False, loss_agg_mode="token-mean") == "segmented_on_v0"
    two.training.later_segments[0].reward = 1.0
    with pytest.raises(UsageError, match="per-segment rewards"):
        segment_refusal(two, v1=True, loss_agg_mode="token-mean")


async def test_v0_keeps_a_segmented_episode_as_a_masked_row_with_its_reward(make_worker, verl_tokenizer, close_states,
                                                                            caplog):
    from verl.protocol import DataProto
    from verl_testkit import StubServer

    server = StubServer(verl_tokenizer, script=_script(verl_tokenizer))
    worker = make_worker([ENTRY], server)
    rows = [verl_row("aworld_compact", "Look up a, then say 2 + 3.", 0)]
    columns = {}
    for key in rows[0]:
        columns[key] = np.empty(len(rows), dtype=object)
        columns[key][:] = [row[key] for row in rows]
    out = await worker.generate_sequences(DataProto.from_dict(non_tensors=columns))
    assert int(out.batch["response_mask"][0].sum()) == 0  # nothing of it trains under V0
    assert out.non_tensor_batch["aworld"][0]["untrained"] == "segmented_on_v0"
    assert float(out.batch["rm_scores"][0].sum()) == 1.0  # its reward stays in its group's statistics
    assert "trainer.use_v1=true" in caplog.text


SMOLAGENTS = "segment_agents:smolagents_agent"


async def test_v1_trains_every_segment_of_a_smolagents_episode(make_v1, verl_tokenizer, close_states, tmp_path):
    """Real smolagents (``ToolCallingAgent`` over ``OpenAIServerModel``) as the job's ``agent.openai_agent``,
    through verl's V1 TransferQueue worker step: it sends its tool call back as assistant text and the
    result as a user "Observation:" message, so each episode is two segments (the tool call; smolagents'
    final-answer call), each an output holding exactly the ids the server sampled (mask 1, their
    logprobs) and nothing else; both share the episode's reward and advantage."""
    pytest.importorskip("smolagents")
    import json

    from verl_testkit import StubServer

    def script(call: Any) -> str:
        if verl_tokenizer.decode(call.prompt_ids).replace(" ", "").endswith('{"name":"'):  # the forced call opening
            return 'add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
        return "It is 5." if call.member == 0 else "It is 4."

    job = tmp_path / "job.json"
    job.write_text(json.dumps({"name": "verl-smolagents", "agent": {"openai_agent": SMOLAGENTS},
                               "rollout": {"episode_timeout_s": 60}}))
    entry = {"name": "aworld_smol", "_target_": "aworld_verl.AworldAgentLoop", "job_config_path": str(job),
             "reward": "verl_testkit:exact_answer_reward"}
    # this suite's tiny tokenizer spells smolagents' three tool schemas in about 700 tokens
    server = StubServer(verl_tokenizer, script=script, prompt_length=1536)
    v1 = make_v1([entry], server, ["actor_rollout_ref.rollout.n=2", "data.max_prompt_length=1536"])
    step = await v1.step([verl_row("aworld_smol", "What is 2 + 3?")])
    group = step.group(step.uids()[0])
    assert [(r.session, r.index) for r in group] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for session in (0, 1):
        outputs = [r for r in group if r.session == session]
        calls = server.calls_for(outputs[0].extra["trajectory_id"])
        assert len(calls) == 2  # the tool call, then smolagents' final-answer call on its re-serialized memory
        assert "Observation:" in verl_tokenizer.decode(calls[1].prompt_ids)
        for output, call in zip(outputs, calls, strict=True):
            assert _sampled(output.response_ids, output.response_mask) == call.token_ids
            logprobs = [x for x, m in zip(output.logprobs, output.response_mask, strict=True) if m]
            assert logprobs == pytest.approx(call.log_probs)
        assert outputs[0].score == outputs[1].score and outputs[0].advantage == outputs[1].advantage
    assert sorted(r.score for r in group if r.index == 1) == [0.0, 1.0]
    assert step.metrics["aworld/segments"] == 2.0 and step.metrics["aworld/segmented_rate"] == 1.0
