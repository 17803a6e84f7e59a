"""AgentTrainer: inputs validated before launch and serialized for workers; evaluation end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aworld_core import Agent, AgentConfig, AgentTrainer, Swarm
from aworld_core.errors import DatasetError, UsageError
from aworld_core.testing import McpHttpServer
from support.fake_dists import run_cli
from support.openai_stub import OpenAIStub, reply, tool_call

ROWS = [{"question": "What is 2+3?", "answer": "5"}, {"question": "What is 6*7?", "answer": "42"}]


def exact_reward(data_source, solution_str, ground_truth, extra_info):
    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0


def trajectory_reward(episode, sample):
    return float(len(episode.steps))


def double(x: int) -> int:
    """Double a number.

    Args:
        x: the number
    """
    return 2 * x


def _agent(**kw) -> Agent:
    return Agent("solver", system_prompt="Answer after ####.",
                 conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="m"), **kw)


def _config(tmp_path: Path) -> dict:
    (tmp_path / "model").mkdir(exist_ok=True)  # validation checks that a local model.path exists
    return {"backend": "trl", "output_dir": str(tmp_path / "out"), "model": {"path": str(tmp_path / "model")}}


def test_agent_data_and_reward_are_serialized_as_config_and_refs(tmp_path: Path):
    trainer = AgentTrainer(agent=_agent(tools=[double]), config=_config(tmp_path), reward_func=exact_reward,
                           train_dataset=ROWS, test_dataset=ROWS[:1])
    job = trainer.job
    assert job.agent.name == "solver" and job.agent.system_prompt == "Answer after ####."
    assert job.agent.tools == [f"{double.__module__}:double"]
    assert job.reward.name == f"{exact_reward.__module__}:exact_reward" and job.reward.trajectory_aware is False
    train_file = Path(job.train_dataset.path)
    assert train_file.parent == (tmp_path / "out" / "data").resolve()
    assert [json.loads(line) for line in train_file.read_text().splitlines()] == ROWS
    assert len(trainer.train_samples) == 2 and trainer.train_samples[0].ground_truth == "5"
    plan = trainer.plan()
    assert plan.backend == "trl" and plan.entrypoint == "aworld_trl.trainer:train"
    json.dumps(plan.entrypoint_kwargs)  # everything that travels is plain JSON


def test_trajectory_aware_reward_is_detected(tmp_path: Path):
    trainer = AgentTrainer(agent=_agent(), config=_config(tmp_path), reward_func=trajectory_reward, train_dataset=ROWS)
    assert trainer.job.reward.trajectory_aware is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reward_func": None}, "no reward"),
        ({"reward_func": "no_such_reward"}, "unknown reward 'no_such_reward'. Registered rewards: "),
        ({"reward_func": lambda data_source, solution_str, ground_truth, extra_info: 0.0}, "define it at module level"),
        ({"train_dataset": None}, "no training data"),
        ({"train_dataset": 42}, "train_dataset must be a file path"),
        ({"agent": "aworld_core.nosuchmodule:make"}, "cannot import module 'aworld_core.nosuchmodule'"),
        ({"config_extra": {"backend": "areal-typo"}}, "backend 'areal-typo' is not installed"),
    ],
)
def test_bad_inputs_fail_before_launch(tmp_path: Path, kwargs: dict, message: str):
    config = {**_config(tmp_path), **kwargs.pop("config_extra", {})}
    args = {"agent": _agent(), "config": config, "reward_func": "gsm8k", "train_dataset": ROWS, **kwargs}
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(".", r"\.")):
        AgentTrainer(**args)


def test_agent_with_a_local_tool_or_a_swarm_object_cannot_travel(tmp_path: Path):
    def local_tool(x: int) -> int:
        return x

    with pytest.raises(UsageError, match="define it at module level"):
        AgentTrainer(agent=_agent(tools=[local_tool]), config=_config(tmp_path), reward_func="gsm8k",
                     train_dataset=ROWS)
    swarm = Swarm(_agent(), Agent("second", conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="m")))
    with pytest.raises(UsageError, match="pass an importable factory instead"):
        AgentTrainer(agent=swarm, config=_config(tmp_path), reward_func="gsm8k", train_dataset=ROWS)


def test_malformed_rows_are_reported_with_index_and_field(tmp_path: Path):
    rows = [ROWS[0], {"question": "no answer here"}, {"answer": "1"}]
    with pytest.raises(DatasetError) as info:
        AgentTrainer(agent=_agent(), config=_config(tmp_path), reward_func="gsm8k", train_dataset=rows)
    text = str(info.value)
    assert "1" in text and "2" in text and ("answer" in text or "ground" in text) and "question" in text


def test_evaluate_with_an_openai_compatible_endpoint_and_mcp_tools(tmp_path: Path):
    with McpHttpServer(token="secret") as mcp, OpenAIStub() as llm:
        def script(request: dict) -> object:
            last = request["messages"][-1]
            if last["role"] == "user":
                return reply(tool_calls=[tool_call("add", {"a": 2, "b": 3})])
            return f"The sum is #### {last['content'].strip()}"

        llm.set_script(script)
        agent = Agent("solver", conf=AgentConfig(llm_base_url=llm.base_url, llm_model_name=llm.model),
                      mcp_config={"mcpServers": {"calc": mcp.config()}})
        trainer = AgentTrainer(agent=agent, config=_config(tmp_path), reward_func="gsm8k",
                               train_dataset=ROWS, test_dataset=ROWS)
        report = trainer.evaluate(progress=False, output=tmp_path / "eval.jsonl")
    assert report.n == 2 and report.statuses == {"success": 2}
    assert report.accuracy == 0.5  # the tool adds 2+3 for both questions: right once
    lines = (tmp_path / "eval.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["steps"][0]["exp_data"]["actions"][0]["name"] == "add"
                                   for line in lines)


def test_cli_eval_reports_accuracy_and_writes_trajectories(tmp_path: Path):
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with OpenAIStub(lambda request: "#### 42") as llm:
        job = tmp_path / "job.yaml"
        job.write_text(
            f"name: ev\nagent: {{name: a, llm_base_url: '{llm.base_url}', llm_model_name: '{llm.model}'}}\n"
            f"test_dataset: {{path: test.jsonl}}\nreward: {{name: gsm8k}}\noutput_dir: {tmp_path / 'o'}\n"
        )
        result = run_cli("--config", str(job), "--eval")
    assert result.returncode == 0, result.stderr
    assert "evaluated 2 tasks" in result.stdout and "accuracy 0.500" in result.stdout
    assert len((tmp_path / "o" / "eval.jsonl").read_text().splitlines()) == 2


def test_cli_eval_against_a_dead_endpoint_records_failures(tmp_path: Path):
    data = tmp_path / "test.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n")
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: ev\nagent: {name: a, llm_base_url: 'http://127.0.0.1:9/v1', llm_model_name: m}\n"
        f"test_dataset: {{path: test.jsonl}}\nreward: {{name: gsm8k}}\noutput_dir: {tmp_path / 'o'}\n"
    )
    result = run_cli("--config", str(job), "--eval")
    assert result.returncode == 0, result.stderr
    assert "accuracy 0.000" in result.stdout and "failed=1" in result.stdout
    episode = json.loads((tmp_path / "o" / "eval.jsonl").read_text())
    assert episode["status"] == "failed" and episode["error"] and episode["reward"] is None


SCRIPT = '''
from aworld_core import Agent, AgentConfig, AgentTrainer


def shout(text: str) -> str:
    """Shout a text.

    Args:
        text: what to shout
    """
    return text.upper()


def make_agent():
    return Agent("scripted", system_prompt="be loud", tools=[shout],
                 conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="m"))


def my_reward(data_source, solution_str, ground_truth, extra_info):
    return 1.0


if __name__ == "__main__":
    import json, sys
    trainer = AgentTrainer(agent=make_agent(), config={"backend": "trl", "output_dir": sys.argv[1]},
                           reward_func=my_reward, train_dataset=[{"question": "hi", "answer": "HI"}])
    print(json.dumps(trainer.job.model_dump(mode="json")))
'''

WORKER = '''
import json, sys
from aworld_core.config import load_job_config
from aworld_core.plugins import get_plugin_manager
from aworld_core.rewards.registry import resolve_reward
from aworld_core.settings import get_settings

job = load_job_config(data=json.loads(open(sys.argv[1]).read()))
agent = get_plugin_manager().hook.build_agents(job=job, settings=get_settings())
reward = resolve_reward(job.reward.name, base_dir=job.base_dir)
print(agent.name, agent.system_prompt, [t.name for t in agent.tools], agent.tools[0].fn("hey"), reward.func("", "", "", {}))
'''


def test_an_agent_defined_in_a_user_script_reaches_a_worker_process(tmp_path: Path):
    """The script builds an AgentTrainer; a separate worker process rebuilds agent and reward from the job."""
    import subprocess
    import sys

    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT)
    made = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    job = json.loads(made.stdout.strip().splitlines()[-1])
    assert job["agent"]["tools"] == [f"{script}:shout"] and job["reward"]["name"] == f"{script}:my_reward"
    (tmp_path / "job.json").write_text(json.dumps(job))
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    rebuilt = subprocess.run([sys.executable, str(worker), str(tmp_path / "job.json")], capture_output=True,
                             text=True, cwd=tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.strip() == "scripted be loud ['shout'] HEY 1.0"
