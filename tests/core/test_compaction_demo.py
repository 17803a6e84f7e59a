"""The compaction demo's pieces, cheaply (``examples/compaction_demo``; the training run itself takes
minutes and is measured in its README and docs/performance.md).

The committed data is what the data writer writes; the job plans with and without compaction; and
one episode of the demo's task, through the job's own agent, tool, reward, token client and the
demo's real tokenizer and template, needs compaction to answer within the job's response budget:
with it, two segments, each within the budget, every sampled token trained; without it, the
episode is cut by length before it answers. The policy is scripted (the right calls and answer):
the point is the budget, not the model.
"""

from __future__ import annotations

import filecmp
import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from aworld_core.config import load_job_config
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.testing import assistant_turn_text, check_segments
from aworld_core.tokens import ScriptedTokenEngine
from aworld_core.worker import build_agent, build_token_llm

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "compaction_demo"
JOB = DEMO / "job.yaml"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("compaction_chain_demo", DEMO / "chain_demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic/dataclass lookups by module name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def tokenizer(demo):
    return demo._tokenizer(random.Random(0))  # the build's tokenizer (trained in a second, no model)


def test_the_committed_data_is_what_the_writer_writes(demo, tmp_path):
    demo.write_data(tmp_path)
    for name in ("train.jsonl", "test.jsonl"):
        assert filecmp.cmp(tmp_path / name, DEMO / "data" / name, shallow=False), (
            f"data/{name} differs from `python chain_demo.py --data`: regenerate it")
    rows = {name: [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
            for name in ("train", "test")}
    keys = {name: {row["extra_info"]["key"] for row in split} for name, split in rows.items()}
    assert len(keys["test"]) == demo.TEST_KEYS and not keys["test"] & keys["train"]  # held out: other start words
    for row in rows["train"] + rows["test"]:
        key = row["extra_info"]["key"]
        assert row["ground_truth"] == demo.TABLE[demo.TABLE[key]] and key in row["prompt"][0]["content"]


@pytest.mark.parametrize("overrides", [[], ["agent.compaction=null"]], ids=["compaction", "without"])
def test_the_job_plans_with_and_without_compaction(tmp_path, overrides):
    from aworld_core.run import main

    out = tmp_path / "plan.txt"
    with out.open("w") as handle:
        code = main(["--config", str(JOB), "--dry-run", f"output_dir={tmp_path / 'run'}", *overrides], out=handle)
    text = out.read_text()
    assert code == 0, text
    assert "aworld_trl.trainer:train" in text and "max_completion_length: 100" in text
    assert ("truncate_tool_results" in text) is not bool(overrides)
    assert not (tmp_path / "run").exists()


def _episode(demo, tokenizer, overrides: list[str]):
    """One episode of the demo's task with the job's agent and token client, the policy scripted."""
    job = load_job_config(JOB, overrides)
    template = tokenizer.chat_template
    key = "kestrel"
    first, second = demo.TABLE[key], demo.TABLE[demo.TABLE[key]]
    turns = [demo._call(key, "call_0"), demo._call(first, "call_1"),
             {"role": "assistant", "content": f"<answer>{second}</answer>"}]
    script = [tokenizer.encode(assistant_turn_text(tokenizer, template, turn), add_special_tokens=False)
              for turn in turns]
    budget = job.backends["trl"]["max_completion_length"]
    llm = build_token_llm(ScriptedTokenEngine(script), tokenizer, job, chat_template=template,
                          max_response_tokens=budget)
    episode = run_episode(build_agent(job), demo.QUESTION.format(key=key), llm=llm)
    return episode, llm, budget, second


async def test_with_compaction_an_episode_answers_in_two_segments_within_the_budget(demo, tokenizer):
    episode, llm, budget, answer = _episode(demo, tokenizer, [])
    episode = await episode
    assert episode.status is EpisodeStatus.SUCCESS, episode.error
    assert demo.chain_answer("chain", episode.final_answer, answer, {}) == 1.0
    segments = episode.training.segments()
    assert [s.start for s in segments] == ["first", "compaction"]
    assert check_segments(episode.training, llm.engine.calls) == [[0, 1], [2]]  # every sampled token, once
    assert all(len(s.response_ids) <= budget for s in segments)  # each segment is one row within the budget
    # the compaction: before the answer the context passes max_context_tokens; compacted, it fits again
    limit = load_job_config(JOB).agent.compaction.max_context_tokens
    [compaction] = episode.metadata["compactions"]
    assert compaction["strategy"] == "truncate_tool_results" and compaction["context_tokens"] > limit
    assert len(segments[1].prompt_ids) <= limit
    second_prompt = tokenizer.decode(segments[1].prompt_ids)
    assert demo.TRUNCATED in second_prompt and "scanned rows" in second_prompt  # the newest result whole


async def test_without_compaction_the_episode_is_cut_before_it_answers(demo, tokenizer):
    episode, llm, budget, answer = _episode(demo, tokenizer, ["agent.compaction=null"])
    episode = await episode
    assert demo.chain_answer("chain", episode.final_answer, answer, {}) == 0.0
    assert [s.start for s in episode.training.segments()] == ["first"]
    assert len(episode.training.response_ids) <= budget
    assert len(llm.engine.calls) < 3 or llm.engine.calls[-1].output.stop_reason == "length"
