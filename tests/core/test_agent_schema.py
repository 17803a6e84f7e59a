"""One agent schema: every ``AgentConfig`` field goes Agent -> AgentTrainer -> job JSON -> worker
unchanged, a job file can set each of them, and bad values fail at validation naming the field."""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from aworld_core import Agent, AgentConfig, AgentTrainer
from aworld_core.agents.compaction import CompactionConfig
from aworld_core.agents.factory import agent_from_job
from aworld_core.config import AgentSection, load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.plugins import get_plugin_manager
from aworld_core.settings import AworldSettings
from aworld_core.trainer import agent_section
from aworld_core.validation import AGENT_SAMPLING
from support.fake_dists import run_cli

ROWS = [{"question": "What is 2+3?", "answer": "5"}]
JOB_ONLY = {"name", "desc", "system_prompt", "mcp_config", "mcp_servers", "tools", "options", "factory",
            "openai_agent"}


def make_solver(steps: int = 3) -> Agent:
    return Agent("solver", conf=AgentConfig(max_steps=steps))


def _non_default(name: str, info: FieldInfo) -> Any:
    """A valid value of an AgentConfig field other than its default (where it allows another)."""
    default = info.get_default(call_default_factory=True)
    if typing.get_origin(info.annotation) is typing.Literal:
        others = [choice for choice in typing.get_args(info.annotation) if choice != default]
        return others[0] if others else default
    kinds = [kind for kind in typing.get_args(info.annotation) or (info.annotation,) if kind is not type(None)]
    if kinds == [str]:
        return f"{name}-value"
    if kinds == [int]:
        return default + 1 if isinstance(default, int) else 3
    if kinds == [float]:
        return default * 2 if isinstance(default, float) else 0.5
    if name == "compaction":  # a nested section travels as its full JSON form
        return CompactionConfig(strategy="summary", max_context_tokens=512, summary_max_tokens=64).model_dump()
    pytest.fail(f"teach _non_default a value for AgentConfig.{name} ({info.annotation})")


def _values() -> dict[str, Any]:
    values = {name: _non_default(name, info) for name, info in AgentConfig.model_fields.items()}
    AgentConfig.model_validate(values)  # the values obey the fields' bounds
    return values


def _config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    (tmp_path / "model").mkdir(exist_ok=True)  # validation checks that a local model.path exists
    return {"backend": "trl", "output_dir": str(tmp_path / "out"), "model": {"path": str(tmp_path / "model")},
            **extra}


def _assert_same_conf(built: Any, values: dict[str, Any]) -> None:
    assert isinstance(built, Agent)
    for name in AgentConfig.model_fields:
        value = getattr(built.conf, name)
        assert (value.model_dump() if isinstance(value, BaseModel) else value) == values[name], name


def test_the_job_section_extends_agent_config_and_lists_no_field_twice():
    assert issubclass(AgentSection, AgentConfig)
    assert not set(AgentSection.__annotations__) & set(AgentConfig.model_fields)  # nothing redefined
    assert set(AgentSection.model_fields) == set(AgentConfig.model_fields) | JOB_ONLY
    section = agent_section(Agent("a"))  # the trainer serializes every field but factory / options / openai_agent
    assert set(section) == set(AgentSection.model_fields) - {"factory", "options", "openai_agent"}


def test_every_agent_config_field_travels_from_agent_to_worker(tmp_path: Path):
    values = _values()
    for name, info in AgentConfig.model_fields.items():
        choices = typing.get_args(info.annotation) if typing.get_origin(info.annotation) is typing.Literal else ()
        if len(choices) != 1:  # llm_provider has one allowed value
            assert values[name] != info.get_default(call_default_factory=True), name
    # training samples with rollout.sampling (one owner): the agent's own sampling is refused there
    agent = Agent("solver", system_prompt="Answer after ####.", conf=AgentConfig(**values))
    with pytest.raises(ConfigError, match="rollout.sampling"):
        AgentTrainer(agent=agent, config=_config(tmp_path), reward_func="gsm8k", train_dataset=ROWS).plan()
    values = {**values, **{name: AgentConfig.model_fields[name].default for name in AGENT_SAMPLING}}
    agent = Agent("solver", system_prompt="Answer after ####.", conf=AgentConfig(**values))
    trainer = AgentTrainer(agent=agent, config=_config(tmp_path), reward_func="gsm8k", train_dataset=ROWS)
    plan = trainer.plan()
    sent = json.loads(json.dumps(plan.entrypoint_kwargs["job"]))  # as the TRL worker gets it
    # the API key is the one field that never travels in the job: the launch exports LLM_API_KEY
    assert values["llm_api_key"] not in json.dumps(plan.model_dump(mode="json"))
    assert {name: sent["agent"][name] for name in values if name != "llm_api_key"} == {
        k: v for k, v in values.items() if k != "llm_api_key"}
    assert trainer.job.agent.llm_api_key == values["llm_api_key"]  # kept in memory for the launch
    worker_env = AworldSettings(LLM_API_KEY=values["llm_api_key"])  # what the worker's environment holds
    worker_job = load_job_config(data=sent)
    _assert_same_conf(get_plugin_manager().hook.build_agents(job=worker_job, settings=worker_env), values)
    _assert_same_conf(agent_from_job(worker_job, worker_env), values)


def test_the_launch_hands_the_api_key_to_workers_through_the_environment(monkeypatch, tmp_path: Path):
    from aworld_core.jobs import _export_llm_api_key
    from aworld_core.settings import get_settings

    monkeypatch.delenv("LLM_API_KEY", raising=False)
    job = load_job_config(data={"agent": {"llm_api_key": "sk-job-secret"}})
    assert "sk-job-secret" not in job.model_dump_json() and "sk-job-secret" not in repr(job)
    _export_llm_api_key(job)
    assert os.environ["LLM_API_KEY"] == "sk-job-secret" and get_settings().llm_api_key == "sk-job-secret"
    monkeypatch.delenv("LLM_API_KEY")
    get_settings.cache_clear()


def test_a_job_file_sets_every_agent_config_field(tmp_path: Path):
    values = _values()
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({**_config(tmp_path), "agent": {"name": "from_yaml", **values}}))
    _assert_same_conf(agent_from_job(load_job_config(job_file), AworldSettings()), values)
    trainer = AgentTrainer(config=job_file, reward_func="gsm8k", train_dataset=ROWS)
    _assert_same_conf(get_plugin_manager().hook.build_agents(job=trainer.job, settings=AworldSettings()), values)
    (tmp_path / "bare.yaml").write_text("name: bare\n")
    overrides = [f"agent.{name}={json.dumps(value)}" for name, value in values.items()]
    _assert_same_conf(agent_from_job(load_job_config(tmp_path / "bare.yaml", overrides), AworldSettings()), values)


def test_llm_temperature_is_accepted_where_temperature_is():
    assert Agent("a", conf={"llm_temperature": 0.6}).conf.temperature == 0.6
    job = load_job_config(data={"agent": {"llm_temperature": 0.4}})
    assert agent_from_job(job, AworldSettings()).conf.temperature == 0.4


def test_an_unsupported_provider_in_a_job_fails_at_load_naming_the_field(tmp_path: Path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: x\nagent: {name: a, llm_provider: anthropic}\n")
    with pytest.raises(ConfigError) as info:
        load_job_config(job_file)
    assert ("agent.llm_provider", "anthropic", "one of 'openai'") in info.value.problems
    assert "agent.llm_provider: got 'anthropic'; expected one of 'openai'" in str(info.value)
    result = run_cli("--config", str(job_file), "--dry-run")
    assert result.returncode == 2, result.stderr
    assert "agent.llm_provider" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("conf", "field", "expected"),
    [
        ({"llm_provider": "anthropic"}, "conf.llm_provider", "one of 'openai' (only OpenAI-compatible endpoints"),
        ({"max_step": 3}, "conf.max_step", "no such field; the fields are llm_provider, "),
        ({"tool_timeout_s": 0}, "conf.tool_timeout_s", "greater than 0"),
    ],
)
def test_a_bad_agent_conf_is_a_config_error_naming_the_field(conf: dict, field: str, expected: str):
    with pytest.raises(ConfigError) as info:
        Agent("a", conf=conf)
    (problem,) = info.value.problems
    assert problem[0] == field and expected in problem[2]
    assert str(info.value).startswith("invalid AgentConfig for agent 'a':") and field in str(info.value)
    assert info.value.exit_code == 2


def test_a_bad_api_key_is_reported_without_its_value():
    with pytest.raises(ConfigError) as info:
        Agent("a", conf={"llm_api_key": 123456789})
    assert "conf.llm_api_key" in str(info.value) and "123456789" not in str(info.value)
    with pytest.raises(UsageError, match="conf must be an AgentConfig or a dict of its fields"):
        Agent("a", conf=42)  # type: ignore[arg-type]


def test_agent_trainer_reports_bad_agent_fields_in_its_config(tmp_path: Path):
    args = {"reward_func": "gsm8k", "train_dataset": ROWS}
    with pytest.raises(ConfigError) as info:
        AgentTrainer(config=_config(tmp_path, agent={"name": "a", "llm_provider": "anthropic"}), **args)
    assert [p[0] for p in info.value.problems] == ["agent.llm_provider"]
    with pytest.raises(ConfigError) as info:
        AgentTrainer(agent=Agent("a"), config=_config(tmp_path, agent={"tool_timeout_s": 0}), **args)
    assert [p[0] for p in info.value.problems] == ["agent.tool_timeout_s"]


def test_agent_trainer_refuses_config_agent_fields_that_disagree_with_agent(tmp_path: Path):
    args = {"reward_func": "gsm8k", "train_dataset": ROWS}
    with pytest.raises(ConfigError, match="disagrees with agent=") as info:
        AgentTrainer(agent=Agent("a"), config=_config(tmp_path, agent={"tool_timeout_s": 5, "name": "a"}), **args)
    assert info.value.problems == [("agent.tool_timeout_s", 5.0, "60.0 (as agent= has it) or unset")]
    agreeing = AgentTrainer(agent=Agent("a", conf={"tool_timeout_s": 5}),
                            config=_config(tmp_path, agent={"tool_timeout_s": 5}), **args)
    assert agreeing.job.agent.tool_timeout_s == 5
    factory = AgentTrainer(agent=f"{__name__}:make_solver", config=_config(tmp_path, agent={"options": {"steps": 2}}),
                           **args)
    assert factory.job.agent.options == {"steps": 2}
    assert get_plugin_manager().hook.build_agents(job=factory.job, settings=AworldSettings()).conf.max_steps == 2


def test_a_factory_with_agent_fields_beside_it_fails_at_load():
    with pytest.raises(ConfigError) as info:
        load_job_config(data={"agent": {"factory": f"{__name__}:make_solver", "max_steps": 3, "name": "x"}})
    ((field, _, expected),) = info.value.problems
    assert field == "agent.factory" and "agent.max_steps, agent.name would be ignored" in expected
    job = load_job_config(data={"agent": {"factory": f"{__name__}:make_solver", "options": {"steps": 4}}})
    worker_job = load_job_config(data=json.loads(job.model_dump_json()))  # every field, all at defaults
    assert agent_from_job(worker_job, AworldSettings()).conf.max_steps == 4

