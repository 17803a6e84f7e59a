"""Job config loading, overrides and error reporting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aworld_core import Agent, AgentConfig, AgentTrainer
from aworld_core.config import flatten_dotted, load_job_config, names_local_path, parse_override
from aworld_core.errors import ConfigError


def test_yaml_with_overrides_and_paths_relative_to_the_config(tmp_path: Path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n")
    cfg = tmp_path / "job.yaml"
    cfg.write_text("name: x\ntrain_dataset: {path: data/train.jsonl}\nbackends: {trl: {lr: 1}}\n")
    job = load_job_config(cfg, ["backends.trl.lr=0.5", "agent.max_steps=2", "rollout.concurrency=4"])
    assert job.backend_section("trl") == {"lr": 0.5}
    assert job.agent.max_steps == 2 and job.rollout.concurrency == 4
    assert job.resolve_path(job.train_dataset.path) == str((tmp_path / "data" / "train.jsonl").resolve())


def test_errors_carry_field_value_and_expected_form():
    with pytest.raises(ConfigError) as info:
        load_job_config(data={"agent": {"max_steps": "x"}, "logging": {"level": "LOUD"}})
    fields = {field: (value, expected) for field, value, expected in info.value.problems}
    assert fields["agent.max_steps"][0] == "x"
    assert fields["logging.level"] == ("LOUD", "one of 'DEBUG', 'INFO', 'WARNING' or 'ERROR'")
    assert info.value.exit_code == 2


def test_dataset_needs_exactly_one_source():
    with pytest.raises(ConfigError, match="give exactly one of 'path'"):
        load_job_config(data={"train_dataset": {}})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a=1", 1), ("a=1.5", 1.5), ("a=1e-5", 1e-5), ("a=true", True), ("a=null", None), ("a=[1, 2]", [1, 2]),
     ("a=hello", "hello"), ("a=", ""), ("a=some words", "some words"), ('a={"k": 1}', {"k": 1}),
     ("a=Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B")],
)
def test_override_values_are_typed(text: str, expected: object):
    assert parse_override(text) == (["a"], expected)


@pytest.mark.parametrize("text", ["novalue", "=3", "a..b=1", ".a=1"])
def test_malformed_overrides(text: str):
    with pytest.raises(ConfigError, match="expected the form key.path=value"):
        parse_override(text)


def test_not_a_mapping_and_bad_yaml(tmp_path: Path):
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_job_config(listing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_job_config(broken)


def test_flatten_dotted():
    assert flatten_dotted({"a": {"b": 1, "c": {"d": 2}}, "e.f": 3, "g": {}}) == {"a.b": 1, "a.c.d": 2, "e.f": 3, "g": {}}


# ---------------------------------------------------------------------------------------------
# Paths: file values beside the config, overrides and Python arguments from the current directory
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A config directory and a different current directory (the shell's), which is entered."""
    conf, shell = (tmp_path / "conf").resolve(), (tmp_path / "shell").resolve()
    conf.mkdir()
    shell.mkdir()
    monkeypatch.chdir(shell)
    return conf, shell


def _write(conf: Path, job: dict) -> Path:
    path = conf / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_relative_paths_in_a_file_resolve_beside_it_even_when_they_do_not_exist_yet(dirs):
    conf, shell = dirs
    for name in ("train.jsonl", "rewards.py", "out"):  # the same names in the shell's directory are not used
        (shell / name).write_text("")
    cfg = _write(conf, {
        "output_dir": "out",
        "model": {"path": "./model", "tokenizer": "../tok", "chat_template": "templates/t.jinja"},
        "train_dataset": {"path": "train.jsonl"},
        "test_dataset": {"path": "data/test.jsonl"},
        "reward": {"name": "rewards.py:score"},
        "agent": {"tools": ["tools.py:add", "my_pkg.tools:mul"]},
    })
    job = load_job_config(cfg)
    assert job.base_dir == str(conf)
    assert job.output_dir == str(conf / "out") and job.resolved_output_dir() == conf / "out"
    assert job.model.path == str(conf / "model") and job.model.tokenizer == str(conf.parent / "tok")
    assert job.model.chat_template == str(conf / "templates" / "t.jinja")
    assert job.train_dataset.path == str(conf / "train.jsonl")
    assert job.test_dataset.path == str(conf / "data" / "test.jsonl")
    assert job.reward.name == f"{conf / 'rewards.py'}:score"
    assert job.agent.tools == [f"{conf / 'tools.py'}:add", "my_pkg.tools:mul"]
    assert job.resolve_path("later/file.txt") == str(conf / "later" / "file.txt")
    factory = load_job_config(_write(conf, {"agent": {"factory": "agents.py:make"}, "model": {"path": "m", "build": "b.py:f"}}))
    assert factory.agent.factory == f"{conf / 'agents.py'}:make"
    assert factory.model.path == str(conf / "m")  # model.build makes it: always a local path
    assert factory.model.build == f"{conf / 'b.py'}:f"


def test_hub_ids_and_registered_names_are_left_as_written(dirs):
    conf, shell = dirs
    (conf / "tiny").mkdir()
    (shell / "Qwen" / "Qwen2-0.5B").mkdir(parents=True)  # only the config's directory counts
    cfg = _write(conf, {
        "model": {"path": "Qwen/Qwen2-0.5B", "tokenizer": "Qwen/Qwen2-0.5B-Instruct"},
        "train_dataset": {"name": "gsm8k", "split": "train"},
        "reward": {"name": "my_pkg.rewards:score"},
    })
    job = load_job_config(cfg)
    assert (job.model.path, job.model.tokenizer) == ("Qwen/Qwen2-0.5B", "Qwen/Qwen2-0.5B-Instruct")
    assert job.resolve_path(job.model.path) == "Qwen/Qwen2-0.5B"  # backends pass it on unchanged
    assert job.train_dataset.name == "gsm8k" and job.reward.name == "my_pkg.rewards:score"
    assert load_job_config(cfg, ["reward.name=gsm8k"]).reward.name == "gsm8k"
    local = load_job_config(_write(conf, {"model": {"path": "tiny", "tokenizer": "~/tok"}}))
    assert local.model.path == str(conf / "tiny")  # a bare name that exists beside the config
    assert local.model.tokenizer == str(Path("~/tok").expanduser())
    assert names_local_path("./x", conf) and names_local_path("../x", conf) and names_local_path("/x", conf)
    assert names_local_path("tiny", conf) and not names_local_path("Qwen/Qwen2-0.5B", conf)


def test_overrides_are_relative_to_the_current_directory(dirs):
    conf, shell = dirs
    cfg = _write(conf, {"output_dir": "out", "train_dataset": {"path": "train.jsonl"}, "model": {"path": "./m"}})
    job = load_job_config(cfg, [
        "output_dir=o2", "test_dataset.path=t.jsonl", "model.chat_template=tpl.jinja",
        "model.tokenizer=./tok", "reward.name=r.py:score", "agent.tools=[tools.py:add]",
    ])
    assert job.output_dir == str(shell / "o2") and job.resolved_output_dir() == shell / "o2"
    assert job.test_dataset.path == str(shell / "t.jsonl")
    assert job.model.chat_template == str(shell / "tpl.jinja") and job.model.tokenizer == str(shell / "tok")
    assert job.reward.name == f"{shell / 'r.py'}:score" and job.agent.tools == [f"{shell / 'tools.py'}:add"]
    assert job.train_dataset.path == str(conf / "train.jsonl") and job.model.path == str(conf / "m")  # not overridden
    whole = load_job_config(cfg, ['train_dataset={"path": "x.jsonl"}', "model.path=Qwen/Qwen2-0.5B"])
    assert whole.train_dataset.path == str(shell / "x.jsonl") and whole.model.path == "Qwen/Qwen2-0.5B"


def test_a_job_given_as_a_dict_is_relative_to_its_base_dir_else_the_current_directory(dirs, monkeypatch):
    conf, shell = dirs
    job = load_job_config(data={"name": "n", "output_dir": "out", "train_dataset": {"path": "d.jsonl"}})
    assert job.base_dir is None
    assert job.output_dir == str(shell / "out") and job.train_dataset.path == str(shell / "d.jsonl")
    assert load_job_config(data={"base_dir": str(conf), "output_dir": "out"}).output_dir == str(conf / "out")
    unset = load_job_config(data={"name": "n"})
    assert unset.resolved_output_dir("elsewhere") == shell / "elsewhere" / "n"
    assert unset.resolved_output_dir().is_absolute()
    # a loaded job travels as JSON to workers with other working directories: its paths hold there
    saved = json.loads(json.dumps(load_job_config(_write(conf, {"output_dir": "out"})).model_dump(mode="json")))
    (shell / "worker").mkdir()
    monkeypatch.chdir(shell / "worker")
    assert load_job_config(data=saved).resolved_output_dir() == conf / "out"


def test_agent_trainer_plans_with_an_absolute_output_dir_and_cwd_relative_arguments(dirs):
    conf, shell = dirs
    rows = [{"question": "What is 2+3?", "answer": "5"}]
    (shell / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    agent = Agent("solver", conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="m"))
    trainer = AgentTrainer(agent=agent, config={"backend": "trl", "output_dir": "out", "model": {"path": "m"}},
                           reward_func="gsm8k", train_dataset="train.jsonl")
    assert trainer.plan().entrypoint_kwargs["output_dir"] == str(shell / "out")
    assert trainer.job.train_dataset.path == str(shell / "train.jsonl")
    cfg = _write(conf, {"backend": "trl", "output_dir": "out", "model": {"path": "m"}})
    from_file = AgentTrainer(agent=agent, config=str(cfg), reward_func="gsm8k", train_dataset="train.jsonl")
    assert from_file.plan().entrypoint_kwargs["output_dir"] == str(conf / "out")  # the file's output_dir
    assert from_file.job.train_dataset.path == str(shell / "train.jsonl")  # the Python argument's
