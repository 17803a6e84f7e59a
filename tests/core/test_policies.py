"""Several policies in one job (issue 31, M1): the ``policies:`` / ``agent_policies:`` sections,
what they refuse, the Swarm's agents against the mapping, and a backend that does not declare it
trains several policies refused by name (a dry-run as a run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aworld_core import Agent, Swarm
from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.policies import (
    check_agent_mapping,
    trained_policies,
)
from aworld_core.run import main

TWO = {
    "planner": {"lora": {"r": 4}},
    "answerer": {"lora": {"r": 4, "alpha": 8}},
}
MAP = {"planner": "planner", "answerer": "answerer"}


def make_swarm(train: list[str] | None = None) -> Swarm:
    return Swarm(Agent("planner", system_prompt="Plan."), Agent("answerer", system_prompt="Answer."),
                 train=train)


def make_swarm_only_planner_trained() -> Swarm:
    return make_swarm(train=["planner"])


def job(**changes: Any) -> Any:
    data: dict[str, Any] = {"model": {"path": "/nonexistent/base"}, "policies": TWO, "agent_policies": MAP}
    data.update(changes)
    return load_job_config(data={k: v for k, v in data.items() if v is not None})


def test_policies_load_with_kinds_and_trained():
    loaded = job(policies={
        **TWO,
        "critic": {"model": {"path": "/nonexistent/small"}},
        "judge": {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model_name": "judge"}},
        "frozen": {"lora": {"r": 2}, "train": False},
    }, agent_policies={**MAP, "critic": "critic", "judge": "judge", "frozen_agent": "frozen"})
    kinds = {name: p.kind for name, p in loaded.policies.items()}
    assert kinds == {"planner": "adapter", "answerer": "adapter", "critic": "model", "judge": "endpoint",
                     "frozen": "adapter"}
    assert trained_policies(loaded) == ["planner", "answerer", "critic"]
    assert loaded.policies["answerer"].lora.alpha == 8
    # a single-policy job is unchanged: no sections, nothing to map
    plain = load_job_config(data={"model": {"path": "/x"}})
    assert plain.policies == {} and plain.agent_policies == {}


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"agent_policies": {**MAP, "answerer": "answer"}},
         r"agent_policies\.answerer: unknown policy 'answer'; the job's policies are planner, answerer"),
        ({"policies": None}, r"agent_policies maps agents to policies but the job has no 'policies' section"),
        ({"agent_policies": None}, r"no agent is mapped to one; set agent_policies"),
        ({"agent_policies": {"planner": "planner", "answerer": "planner"}},
         r"policies \['answerer'\] are mapped to no agent"),
        ({"policies": {**TWO, "judge": {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model_name": "j"},
                                         "lora": {"r": 2}}}, "agent_policies": {**MAP, "j": "judge"}},
         r"policies\.judge is a fixed endpoint; policies\.judge\.lora would be ignored"),
        ({"policies": {**TWO, "judge": {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model_name": "j"},
                                         "train": True}}, "agent_policies": {**MAP, "j": "judge"}},
         r"policies\.judge\.train: true, but an endpoint is never trained"),
        ({"policies": {"a": {}, "b": {}}, "agent_policies": {"planner": "a", "answerer": "b"}},
         r"policies a and b both train every weight of '/nonexistent/base'"),
        ({"policies": {"full": {}, "b": {"lora": {}}}, "agent_policies": {"planner": "full", "answerer": "b"}},
         r"policy full trains every weight of '/nonexistent/base', which policy b adapts with LoRA"),
        ({"policies": {"a.b": {"lora": {}}}, "agent_policies": {"planner": "a.b"}}, r"policy name 'a\.b'"),
        ({"model": None}, r"policies\.planner runs on the job's model, but the job has no model\.path"),
        ({"policies": {**TWO, "planner": {"lora": {"rank": 4}}}}, r"policies\.planner\.lora\.rank"),
    ],
    ids=["unknown-policy", "map-without-policies", "policies-without-map", "unused-policy", "endpoint-with-lora",
         "endpoint-trained", "two-full-weight", "full-under-adapter", "bad-name", "no-base-model", "typo"],
)
def test_refused_sections(changes: dict[str, Any], pattern: str):
    with pytest.raises(ConfigError, match=pattern):
        job(**changes)


def test_allowed_weight_sharing():
    # a frozen full-weight base beside trained adapters is fine (the base does not move)
    job(policies={"base": {"train": False}, "b": {"lora": {}}}, agent_policies={"planner": "base", "answerer": "b"})
    # two models of their own, trained in full
    job(policies={"a": {"model": {"path": "/m/a"}}, "b": {"model": {"path": "/m/b"}}},
        agent_policies={"planner": "a", "answerer": "b"})


def test_agent_mapping_against_the_swarm():
    loaded = job()
    check_agent_mapping(make_swarm(), loaded)  # both mapped, both trainable
    with pytest.raises(UsageError, match=r"maps no policy to agent\(s\) \['answerer'\] of swarm 'swarm'"):
        check_agent_mapping(make_swarm(), job(policies={"planner": TWO["planner"]}, agent_policies={"planner": "planner"}))
    with pytest.raises(UsageError, match=r"agent_policies names \['writer'\], which is not an agent"):
        check_agent_mapping(make_swarm(), job(agent_policies={**MAP, "writer": "planner"}))
    with pytest.raises(UsageError, match=r"agent 'answerer' is marked not trained in swarm 'swarm'"):
        check_agent_mapping(make_swarm(train=["planner"]), loaded)
    # ... unless it is mapped to a policy that does not train
    check_agent_mapping(make_swarm(train=["planner"]), job(policies={**TWO, "answerer": {"lora": {}, "train": False}}))
    # a lone agent is mapped by its name
    lone = job(policies={"p": {"lora": {}}}, agent_policies={"solo": "p"})
    check_agent_mapping(Agent("solo"), lone)
    with pytest.raises(UsageError, match=r"maps no policy to agent\(s\) \['other'\] of the job's agent"):
        check_agent_mapping(Agent("other"), lone)


# -- the CLI: a dry-run refuses what a run refuses ----------------------------------------------


def _write_job(tmp_path: Path, **changes: Any) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "What is 2+3?", "answer": "5"}) + "\n")
    data: dict[str, Any] = {
        "name": "multi", "backend": "trl", "output_dir": str(tmp_path / "out"),
        "model": {"path": "./model"},
        "agent": {"factory": f"{Path(__file__).resolve()}:make_swarm"},
        "train_dataset": {"path": "train.jsonl"}, "reward": {"name": "gsm8k"},
        "policies": TWO, "agent_policies": MAP,
    }
    data.update(changes)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in data.items() if v is not None}, sort_keys=False))
    return path


def _backend_multi_policy(backend: str) -> bool:
    from aworld_core.plugins import get_plugin_manager

    return get_plugin_manager().catalog().backend(backend).capabilities.multi_policy


@pytest.mark.parametrize("backend", ["verl", "areal", "swift"])
def test_backend_without_multi_policy_is_refused_by_name(tmp_path, capsys, backend):
    from aworld_core.config import load_job_config
    from aworld_core.validation import JobProblems, validate_backend

    loaded = load_job_config(_write_job(tmp_path, backend=backend))
    problems = JobProblems()
    validate_backend(backend, loaded, problems)
    messages = [str(e) for field, e in problems.errors if field == "policies"]
    assert len(messages) == 1, problems.errors
    assert f"backend '{backend}' does not train several policies in one run" in messages[0]
    assert "planner, answerer" in messages[0]


def test_dry_run_refuses_an_unmapped_agent(tmp_path, capsys):
    path = _write_job(tmp_path, agent_policies={"planner": "planner", "helper": "answerer"})
    code = main(["--config", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "maps no policy to agent(s) ['answerer']" in err


def test_dry_run_of_a_mapped_swarm_on_trl(tmp_path, capsys):
    """trl accepts the job only once it declares multi_policy (then the plan is made); until then it is
    refused with its name, exactly as a run would be."""
    code = main(["--config", str(_write_job(tmp_path)), "--dry-run"])
    err = capsys.readouterr().err
    if _backend_multi_policy("trl"):
        assert code == 0, err
    else:
        assert code == 2 and "backend 'trl' does not train several policies" in err
