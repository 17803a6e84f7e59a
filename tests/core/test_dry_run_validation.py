"""A dry-run refuses what a run refuses, with the same message (one ``validate_job`` for both);
``--eval`` starts the job's environment and refuses an empty dataset; the environment's output
reaches the job's log; TRL-style rewards; where upstream verl keys go."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from aworld_core.errors import ConfigError, UsageError
from aworld_core.run import main
from support.openai_stub import OpenAIStub, reply, tool_call

ROW = {"question": "What is 2+3?", "answer": "5"}

BAD_SIGNATURE = "def reward(text):\n    return 1.0\n"
TRL_REWARD = "def reward(completions, ground_truth, **kwargs):\n    return [1.0 for _ in completions]\n"
TRL_NEEDS_COLUMN = "def reward(completions, solution):\n    return [1.0 for _ in completions]\n"


def _job(tmp_path: Path, **changes: Any) -> Path:
    """A complete trl job (model directory, data, reward) with ``changes`` applied (None deletes)."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    data: dict[str, Any] = {
        "name": "check", "backend": "trl", "output_dir": str(tmp_path / "out"),
        "model": {"path": "./model"}, "agent": {"name": "a", "max_steps": 2},
        "train_dataset": {"path": "train.jsonl"}, "reward": {"name": "gsm8k"},
    }
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name


BAD_JOBS: dict[str, tuple[Any, str]] = {
    "missing model": (lambda t: {"model": {"path": "./no-model"}}, r"model\.path: '.*no-model' does not exist"),
    "missing data": (lambda t: {"train_dataset": {"path": "nope.jsonl"}}, r"train_dataset\.path: '.*nope\.jsonl' does not exist"),
    "empty data": (lambda t: {"train_dataset": {"path": _write(t, "empty.jsonl", "")}}, r"train_dataset '.*empty\.jsonl' has no rows"),
    "no model": (lambda t: {"model": None}, r"the trl backend cannot train this job: set model\.path"),
    "unknown environment": (lambda t: {"environment": {"name": "nosuch-env"}}, r"environment 'nosuch-env' is not installed.*calculator"),
    "misspelt MCP key": (
        lambda t: {"agent": {"name": "a", "mcp_config": {"mcpServers": {"s": {"url": "http://127.0.0.1:9/mcp",
                                                                            "hedaers": {"Authorization": "x"}}}}}},
        r"agent\.mcp_config: invalid MCP config:\n  mcp_config\.mcpServers\.s\.hedaers: no such key",
    ),
    "MCP server name": (
        lambda t: {"agent": {"name": "a", "mcp_servers": ["other"],
                             "mcp_config": {"mcpServers": {"s": {"url": "http://127.0.0.1:9/mcp"}}}}},
        r"mcp_servers names \['other'\] are not in mcp_config",
    ),
    "GRPOConfig key": (lambda t: {"backends": {"trl": {"learnig_rate": 1e-5}}}, r"'learnig_rate' \(did you mean learning_rate"),
    "reward signature": (lambda t: {"reward": {"name": _write(t, "bad_reward.py", BAD_SIGNATURE) + ":reward"}},
                         r"has signature reward\(text\).*TRL.s \(completions, \*\*kwargs\) from aworld-trl"),
    "TRL reward needing a column": (
        lambda t: {"reward": {"name": _write(t, "trl_col.py", TRL_NEEDS_COLUMN) + ":reward"}},
        r"looks like a TRL reward function .* requires \['solution'\].*add \*\*kwargs",
    ),
    "unknown reward": (lambda t: {"reward": {"name": "no_such_reward"}}, r"unknown reward 'no_such_reward'"),
    "report_to": (lambda t: {"logging": {"report_to": ["trackio"]}}, r"'trackio' \(install it with: pip install trackio\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_a_dry_run_refuses_what_a_run_refuses_with_the_same_message(case: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    make, pattern = BAD_JOBS[case]
    job = _job(tmp_path, **make(tmp_path))
    dry = _run(capsys, "--config", str(job), "--dry-run")
    real = _run(capsys, "--config", str(job))
    assert dry[0] == 2 and real[0] == 2, (dry, real)
    assert dry[1] == "" and real[1] == ""  # no plan printed, nothing launched
    assert dry[2] == real[2]
    assert re.search(pattern, dry[2], re.S), dry[2]
    assert not (tmp_path / "out").exists()


def test_a_missing_framework_is_refused_by_a_dry_run_with_the_install_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aworld_core.plugins import get_plugin_manager

    spec = get_plugin_manager().catalog().backend("verl")
    if spec.framework_installed():
        pytest.skip("verl is installed here")
    job = _job(tmp_path)
    dry = _run(capsys, "--config", str(job), "--backend", "verl", "--dry-run")
    real = _run(capsys, "--config", str(job), "--backend", "verl")
    assert dry[0] == real[0] == 2 and dry[2] == real[2]
    assert "needs the 'verl' framework" in dry[2] and "pip install 'aworld-verl[verl]'" in dry[2]


def test_a_trl_style_reward_is_accepted_and_a_complete_job_plans(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, reward={"name": _write(tmp_path, "trl_reward.py", TRL_REWARD) + ":reward"},
               backends={"trl": {"learning_rate": 1e-5}})
    code, out, err = _run(capsys, "--config", str(job), "--dry-run")
    assert code == 0, err
    assert out.startswith("backend: trl\n")


async def test_a_trl_style_reward_scores_an_episode_as_a_batch_of_one(tmp_path: Path) -> None:
    from aworld_core.rewards.registry import RewardStats, score_episode
    from aworld_core.schemas import Episode, EpisodeStatus, Sample

    (tmp_path / "rewards.py").write_text(
        "SEEN = []\n"
        "def reward(prompts, completions, ground_truth, level, **kwargs):\n"
        "    SEEN.append((prompts, completions, ground_truth, level, sorted(kwargs)))\n"
        "    return [1.0 if c[-1]['content'].endswith(str(t)) else 0.0 for c, t in zip(completions, ground_truth)]\n"
        "def not_a_list(completions, **kwargs):\n"
        "    return 1.0\n"
    )
    prompt = [{"role": "user", "content": "What is 2+3?"}]
    sample = Sample(id="s", prompt=prompt, ground_truth="5", extra_info={"level": 2})
    episode = Episode(task_id="s", agent_id="a", final_answer="It is 5")
    episode.messages = [*prompt, {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
                        {"role": "tool", "content": "5"}, {"role": "assistant", "content": "It is 5"}]
    episode.finish(EpisodeStatus.SUCCESS)
    name = f"{tmp_path / 'rewards.py'}:reward"
    await score_episode(episode, sample, name, stats=RewardStats(), notify=False)
    assert episode.reward == 1.0
    from aworld_core.imports import import_ref

    prompts, completions, truths, level, rest = import_ref(name).__globals__["SEEN"][-1]
    assert prompts == [prompt] and truths == ["5"] and level == [2]
    assert [m["role"] for m in completions[0]] == ["assistant", "tool", "assistant"]
    assert {"completion_ids", "data_source", "extra_info", "trainer_state"} <= set(rest)
    # a value that is not a list of one is that episode's reward failure, not a 0
    await score_episode(episode, sample, f"{tmp_path / 'rewards.py'}:not_a_list", stats=RewardStats(), notify=False)
    assert episode.reward is None and "must return a list of one number" in next(iter(episode.reward_errors.values()))


def test_eval_refuses_an_empty_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, test_dataset={"path": _write(tmp_path, "empty.jsonl", "")})
    code, out, err = _run(capsys, "--config", str(job), "--eval")
    assert code == 2 and "test_dataset" in err and "has no rows; evaluation needs at least one task" in err
    assert "accuracy" not in out


def test_eval_starts_the_jobs_environment_and_its_output_reaches_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The calculator environment (a real MCP server process) is started for --eval as for training;
    an agent without mcp_config gets it from MCP_SERVER_URL; the stub model calls its tool."""
    seen_tools: list[list[str]] = []

    def script(request: dict[str, Any]) -> Any:
        last = request["messages"][-1]
        if last["role"] == "user":
            names = [tool["function"]["name"] for tool in request.get("tools") or []]
            seen_tools.append(names)
            a, b = re.findall(r"\d+", last["content"])[:2]
            return reply(tool_calls=[tool_call(names[0], {"expr": f"{a}*{b}"})])
        return f"<answer>{last['content'].strip()}</answer>"

    with OpenAIStub() as llm:
        llm.set_script(script)
        job = _job(tmp_path, environment={"name": "calculator"}, reward={"name": "exact_answer"},
                   agent={"name": "a", "max_steps": 3, "llm_base_url": llm.base_url, "llm_model_name": llm.model},
                   test_dataset={"name": "arith", "split": "test", "options": {"n": 2, "seed": 0}})
        code, out, err = _run(capsys, "--config", str(job), "--eval")
    assert code == 0, err
    assert "evaluated 2 tasks" in out and "accuracy 1.000" in out, out
    assert seen_tools and all(any("calc" in n for n in names) for names in seen_tools)
    lines = [line for line in err.splitlines() if line.startswith("[env calculator] ")]
    assert lines and '"token": "***"' in lines[0]  # its start-up line, the token masked


def test_the_environments_output_goes_to_the_log_with_a_prefix_and_its_token_masked() -> None:
    import io
    import time

    from aworld_core.environments import running_environment

    script = (
        "import json, sys, time\n"
        "print('starting up', flush=True)\n"
        "print(json.dumps({'ip': '127.0.0.1', 'port': 9, 'token': 'tok-ABCDEFGH12345678'}), flush=True)\n"
        "time.sleep(0.2)\n"
        "print('tool failed: bad input', flush=True)\n"
        "print('token tok-ABCDEFGH12345678 in a log line', file=sys.stderr, flush=True)\n"
        "time.sleep(30)\n"
    )
    log = io.StringIO()
    with running_environment([sys.executable, "-c", script], name="demo", log=log):
        deadline = time.monotonic() + 10
        while "in a log line" not in log.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    text = log.getvalue()
    assert "[env demo] starting up\n" in text and "[env demo] tool failed: bad input\n" in text
    assert "[env demo] token *** in a log line\n" in text
    assert "tok-ABCDEFGH12345678" not in text


def test_an_upstream_verl_config_says_where_its_keys_go(tmp_path: Path) -> None:
    from aworld_core import AgentTrainer

    verl_config = {"data": {"train_batch_size": 8}, "trainer": {"total_epochs": 1},
                   "actor_rollout_ref": {"rollout": {"name": "vllm"}}}
    with pytest.raises(ConfigError) as caught:
        AgentTrainer(config=verl_config)
    text = str(caught.value)
    for key in verl_config:
        assert f"{key}: got" in text
    assert "put it under backends.verl" in text and "docs/migration.md" in text
    assert {loc for loc, _, _ in caught.value.problems} == set(verl_config)


def test_agent_trainer_runs_the_same_validation(tmp_path: Path) -> None:
    from aworld_core import AgentTrainer

    config = {"backend": "trl", "output_dir": str(tmp_path / "out"), "model": {"path": str(tmp_path / "absent")},
              "agent": {"name": "a"}}
    with pytest.raises(UsageError, match=r"model\.path: '.*absent' does not exist"):
        AgentTrainer(config=config, reward_func="gsm8k", train_dataset=[ROW])


def test_upstream_agent_trainer_keywords_map_to_the_job(tmp_path: Path) -> None:
    from aworld_core import AgentTrainer

    (tmp_path / "model").mkdir()
    config = {"name": "up", "model": {"path": str(tmp_path / "model")}, "agent": {"name": "a"}}
    trainer = AgentTrainer(config=config, reward_func="gsm8k", train_dataset=[ROW], train_backend="trl",
                           run_path=tmp_path / "runs")
    assert trainer.backend == "trl" and trainer.job.output_dir == str(tmp_path / "runs" / "up")
    with pytest.raises(UsageError, match="train_backend='verl' disagrees with the config's backend 'trl'"):
        AgentTrainer(config={**config, "backend": "trl"}, reward_func="gsm8k", train_dataset=[ROW],
                     train_backend="verl")
