"""The multi-policy demo's pieces, cheaply (``examples/multi_policy_demo``; its training runs take
minutes and are measured in its README and docs/multi-policy.md).

The job plans (both policies trained, and the ablation's override); the warm start's conversations
hold each role's weak start at the stated rates and train only the assistant's tokens; the model
build runs (two steps); and episodes of the demo's task, through the job's own swarm with its real
MCP calculator (the job's environment), are scored per role by the demo's reward: the right
expression and the tag, the wrong operator, the bare number. The policy is scripted (the point is
the swarm, the tool and the credit, not the model).
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from aworld_core.config import load_job_config
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.testing import assistant_turn_text
from aworld_core.tokens import ScriptedTokenEngine
from aworld_core.worker import build_agent, build_token_llm
from aworld_cpu_grpo_demo.tasks import QUESTION

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "multi_policy_demo"
JOB = DEMO / "job.yaml"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("multi_policy_demo_module", DEMO / "multi_policy_demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def tokenizer():
    from aworld_cpu_grpo_demo.build import train_tokenizer

    return train_tokenizer(0)


@pytest.mark.parametrize("overrides", [[], ["policies.answerer.train=false"]], ids=["both", "planner-only"])
def test_the_job_plans_both_policies_and_the_ablation(tmp_path, overrides):
    from aworld_core.run import main

    out = tmp_path / "plan.txt"
    with out.open("w") as handle:
        code = main(["--config", str(JOB), "--dry-run", f"output_dir={tmp_path / 'run'}", *overrides], out=handle)
    text = out.read_text()
    assert code == 0, text
    assert "aworld_trl.trainer:train" in text
    job = load_job_config(JOB, overrides)
    assert dict(job.agent_policies) == {"planner": "planner", "answerer": "answerer"}
    assert [n for n, p in job.policies.items() if p.trained] == (["planner"] if overrides else ["planner", "answerer"])
    assert not (tmp_path / "run").exists()


def test_the_warm_start_is_weak_on_both_roles_and_trains_the_assistant_only(demo, tokenizer):
    from aworld_cpu_grpo_demo.warm_start import IGNORE, encode

    traces = demo.traces(random.Random(0), 4000)
    decisions = [t.messages for i, t in enumerate(traces) if i % 4 == 0]
    extra = [t for i, t in enumerate(traces) if i % 4 == 1]
    answerer = [t.messages for i, t in enumerate(traces) if i % 4 >= 2]
    assert all(t.messages[0]["content"].startswith("What is") for t in extra)
    calls = [m for m in decisions if m[1].get("tool_calls")]
    assert abs(len(calls) / len(decisions) - demo.CALL_RATE) < 0.05
    for m in calls + [t.messages for t in extra]:  # the right expression; the planner relays the tool's result
        a, b = (int(x) for x in m[0]["content"].removeprefix("What is ").rstrip("?").split(" * "))
        assert json.loads(m[1]["tool_calls"][0]["function"]["arguments"]) == {"expr": f"{a}*{b}"}
        assert m[3]["content"] == m[2]["content"] == str(a * b)
    assert not any(t.train_first_token for t in extra)  # they teach the call, not the decision
    tagged = [m[1]["content"].startswith("<answer>") for m in answerer]
    assert abs(sum(tagged) / len(answerer) - demo.TAG_RATE) < 0.05
    assert all(m[1]["content"].removeprefix("<answer>").removesuffix("</answer>") == m[0]["content"] for m in answerer)
    ids, labels = encode(tokenizer, traces[:4])
    for row, row_labels, trace in zip(ids, labels, traces[:4], strict=True):
        trained = tokenizer.decode([t for t, y in zip(row, row_labels, strict=True) if y != IGNORE])
        said = "".join(assistant_turn_text(tokenizer, tokenizer.chat_template, m) for m in trace.messages
                       if m["role"] == "assistant")
        if not trace.train_first_token:
            said = said[len("<tool_call>"):]
        assert trained == said  # the assistant's turns (with their end marker) and nothing else


def test_the_model_build_runs(demo, tmp_path):
    path = demo.build_model(str(tmp_path / "model"), steps=2, batch_size=4)
    assert (path / "config.json").exists() and (path / "tokenizer.json").exists()
    assert not (tmp_path / "model.building").exists()
    assert demo.build_model(str(path)) == path  # a rerun reuses it


def _episode(demo, tokenizer, job, a: int, b: int, guess: int | None, tagged: bool):
    """One episode through the job's swarm and calculator; the planner and answerer scripted."""
    said = demo.planner_messages(a, b, guess)
    turns = [*said[1::2], demo.answerer_messages(int(said[-1]["content"]), tagged)[1]]
    script = [tokenizer.encode(assistant_turn_text(tokenizer, tokenizer.chat_template, t), add_special_tokens=False)
              for t in turns]
    llm = build_token_llm(ScriptedTokenEngine(script), tokenizer, job, chat_template=tokenizer.chat_template,
                          max_response_tokens=job.backends["trl"]["max_completion_length"])
    return run_episode(build_agent(job, cache=False), QUESTION.format(a=a, b=b), llm=llm)


async def test_each_role_is_credited_on_its_own_part(demo, tokenizer):
    """The job's swarm with the job's calculator environment: per-policy rewards and the episode's."""
    from aworld_core.jobs import job_environment
    from aworld_core.policies import POLICY_REWARDS
    from aworld_cpu_grpo_demo.tasks import make_sample

    job = load_job_config(JOB)
    a, b = 4321, 5678
    sample = make_sample(0, a, b, "test")
    cases = {(None, True): ({"planner": 1.0, "answerer": 1.0}, 1.0),
             (24534567, True): ({"planner": 0.0, "answerer": 1.0}, 0.0),  # a guess: the answerer tags it right
             (None, False): ({"planner": 1.0, "answerer": 0.0}, 0.0)}  # the bare number: no answer
    with job_environment(job):
        for (guess, tagged), (roles, reward) in cases.items():
            episode = await _episode(demo, tokenizer, job, a, b, guess, tagged)
            assert episode.status is EpisodeStatus.SUCCESS, episode.error
            calls = [c for s in episode.steps if s.exp_meta.agent_id == "planner" for c in s.exp_data.actions]
            assert [json.loads(c.arguments) for c in calls] == ([] if guess else [{"expr": f"{a}*{b}"}])
            if guess is None:  # the real calculator answered: the result in the planner's context
                results = [r.content for s in episode.steps for r in s.exp_data.state.action_result]
                assert results == [str(a * b)], results
            assert demo.role_reward(episode, sample) == reward
            assert episode.metadata[POLICY_REWARDS] == roles, (guess, tagged)
