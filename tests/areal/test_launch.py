"""The ``areal`` backend's plan: the GRPO config AReaL loads, the entry's workflow kwargs, the example."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from areal.api.cli_args import GRPOConfig, load_expr_config
from areal.infra.rpc.serialization import deserialize_value, serialize_value
from areal_sglang_server import submit_all
from areal_tool_model import QUESTION, job_dict

from aworld_areal.plugin import CONFIG_FILE, JOB_FILE
from aworld_areal.plugin import plan as areal_plan
from aworld_areal.train import split_job_arg, workflow_kwargs
from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.launch import write_plan_files

pytest_plugins = ["areal_fixtures"]  # the sglang_server and real_engine fixtures

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gsm8k_areal" / "job.yaml"


def write_rows(path: Path) -> Path:
    rows = [{"question": QUESTION, "answer": "#### 5"}, {"question": "What is 4 plus 4?", "answer": "#### 8"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def planned(job, tmp_path: Path):
    out = tmp_path / "out"
    plan = areal_plan(job, out)
    write_plan_files(plan, out)
    return plan, out


def test_the_registered_backend_carries_its_planner_and_launcher():
    from aworld_areal.plugin import launch, register_backends

    (backend,) = register_backends()
    assert (backend.name, backend.planner, backend.launcher, backend.sft) == ("areal", areal_plan, launch, False)
    assert backend.capabilities.asynchronous and backend.capabilities.segments


def test_planned_config_loads_with_load_expr_config(tmp_path, tool_model_dir, mcp_server):
    data = write_rows(tmp_path / "train.jsonl")
    job = load_job_config(
        data=job_dict(
            tool_model_dir,
            mcp_server,
            name="my_areal job",
            seed=7,
            train_dataset={"path": str(data)},
            test_dataset={"path": str(data)},
            backends={"areal": {"gconfig": {"n_samples": 2}, "actor": {"optimizer": {"lr": 2e-6}}}},
        )
    )
    plan, out = planned(job, tmp_path)
    assert plan.command[1:4] == ["-m", "aworld_areal.train", "--config"]
    assert plan.command[4] == str(out.resolve() / CONFIG_FILE) and plan.command[6] == str(out.resolve() / JOB_FILE)

    config, config_file = load_expr_config(["--config", str(out / CONFIG_FILE), "rollout.max_head_offpolicyness=4"], GRPOConfig)
    assert isinstance(config, GRPOConfig) and config_file == str((out / CONFIG_FILE).resolve())
    assert config.experiment_name == "my-areal-job" and config.trial_name == "trial0" and config.seed == 7
    assert config.actor.path == str(tool_model_dir) and config.tokenizer_path == str(tool_model_dir)
    assert config.gconfig.n_samples == 2 and config.actor.reward_norm.group_size == 2
    assert config.actor.optimizer.lr == 2e-6
    assert config.rollout.max_head_offpolicyness == 4  # a hydra override, as for any AReaL script
    assert config.actor.mb_spec.max_tokens_per_mb == config.gconfig.max_tokens
    assert config.scheduler.type == "local"
    assert config.train_dataset.path == str(data) and config.valid_dataset is not None
    assert config.cluster.fileroot == str(out.resolve() / "areal")

    saved = json.loads((out / JOB_FILE).read_text())
    assert saved.pop("base_dir") == os.getcwd()  # the job had none: relative paths stay relative to here
    assert load_job_config(data=saved).model_dump(exclude={"base_dir"}) == job.model_dump(exclude={"base_dir"})


def test_relative_paths_are_made_absolute_for_workers_started_elsewhere(tmp_path, monkeypatch, tool_model_dir):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "train.jsonl")
    (tmp_path / "model").symlink_to(tool_model_dir)
    job = load_job_config(data={"model": {"path": "model"}, "train_dataset": {"path": "train.jsonl"}, "reward": {"name": "gsm8k"}})
    plan = areal_plan(job, Path("out"))
    assert plan.config["actor"]["path"] == str(tmp_path / "model")
    assert plan.config["train_dataset"]["path"] == str(tmp_path / "train.jsonl")
    assert plan.command[4] == str(tmp_path / "out" / CONFIG_FILE) and plan.cwd == str(tmp_path / "out")
    assert json.loads(plan.files[JOB_FILE])["base_dir"] == str(tmp_path)
    hub = load_job_config(data={"model": {"path": "Qwen/Qwen2.5-1.5B-Instruct"}, "train_dataset": {"name": "gsm8k"}})
    hub_plan = areal_plan(hub, Path("out"))
    assert hub_plan.config["actor"]["path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert hub_plan.config["train_dataset"]["path"] == "gsm8k"


@pytest.mark.parametrize("scheduler", ["ray", "slurm"])
def test_scheduler_types(tmp_path, scheduler):
    job = load_job_config(
        data={"model": {"path": "m"}, "train_dataset": {"path": "t.jsonl"}, "backends": {"areal": {"scheduler": {"type": scheduler}}}}
    )
    plan = areal_plan(job, tmp_path)
    assert plan.config["scheduler"]["type"] == scheduler


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"actor": {"behav_imp_weight_cap": 5.0}}, "actor.behav_imp_weight_cap"),
        ({"gconfig": {"n_sample": 4}}, "gconfig.n_sample"),
        ({"scheduler": {"type": "kubernetes"}}, "backends.areal.scheduler.type"),
        ({"workflow": {"turn_discunt": 0.9}}, "turn_discunt"),
        ({"workflow": {"turn_discount": 0.9}, "nonsense_section": {}}, "nonsense_section"),
    ],
)
def test_bad_areal_settings_fail_at_plan_time_naming_the_key(tmp_path, section, named):
    job = load_job_config(data={"model": {"path": "m"}, "train_dataset": {"path": "t.jsonl"}, "backends": {"areal": section}})
    with pytest.raises(ConfigError) as info:
        areal_plan(job, tmp_path)
    assert named in str(info.value)


@pytest.mark.parametrize(
    ("workflow", "named"),
    [
        ({"openai_agent": "agent.py:run"}, "agent: {openai_agent: 'module:function'}"),  # the job's spelling now
        ({"max_steps": 3}, "backends.areal.workflow.max_steps cannot limit agent.openai_agent"),
    ],
)
def test_openai_agent_settings_the_workflow_refuses_at_plan_time(tmp_path, workflow, named):
    job = load_job_config(data={"model": {"path": "m"}, "train_dataset": {"path": "t.jsonl"},
                                "agent": {"openai_agent": "agent.py:run"}, "backends": {"areal": {"workflow": workflow}}})
    with pytest.raises(ConfigError) as info:
        areal_plan(job, tmp_path)
    assert named in str(info.value)


def test_a_job_without_model_data_or_reward_plans_but_does_not_launch(tmp_path):
    from aworld_areal.config import missing_inputs
    from aworld_areal.plugin import launch

    job = load_job_config(data={"name": "incomplete"})
    plan = areal_plan(job, tmp_path)  # --dry-run still shows it
    assert [n for n in plan.notes if n.startswith("cannot launch yet")] == [
        "cannot launch yet: the areal backend needs the model to train: set model.path in the job config",
        "cannot launch yet: the areal backend needs training data: set train_dataset in the job config",
        "cannot launch yet: the areal backend trains on rewards: set reward.name in the job config",
    ]
    with pytest.raises(UsageError, match=r"set model\.path .* set train_dataset .* set reward\.name"):
        launch(job, plan)
    complete = load_job_config(data={"model": {"path": "m"}, "train_dataset": {"path": "t.jsonl"}, "reward": {"name": "gsm8k"}})
    assert missing_inputs(complete) == []  # launch runs its plan with the core's launcher


def test_split_job_arg():
    assert split_job_arg(["--config", "c.yaml", "--job", "j.json", "seed=3"]) == ("j.json", ["--config", "c.yaml", "seed=3"])
    assert split_job_arg(["--job=j.json", "--config", "c.yaml"]) == ("j.json", ["--config", "c.yaml"])
    with pytest.raises(UsageError, match="--job"):
        split_job_arg(["--config", "c.yaml"])


def test_workflow_kwargs_cross_areal_rpc_and_run_a_group(tmp_path, tool_model_dir, mcp_server, real_engine):
    """What train.py hands PPOTrainer survives AReaL's RPC serialization and runs in a worker, through
    RemoteInfEngine.submit (the workflow built there from its import path and these kwargs)."""
    data = write_rows(tmp_path / "train.jsonl")
    job = load_job_config(
        data=job_dict(
            tool_model_dir,
            mcp_server,
            train_dataset={"path": str(data)},
            backends={"areal": {"gconfig": {"greedy": True, "max_new_tokens": 48, "n_samples": 2},
                                "workflow": {"turn_discount": 0.5, "reward_processes": 0}}},
        )
    )
    _, out = planned(job, tmp_path)
    config, _ = load_expr_config(["--config", str(out / CONFIG_FILE)], GRPOConfig)
    kwargs = workflow_kwargs(load_job_config(out / JOB_FILE), config.gconfig, config.tokenizer_path)
    json.dumps(kwargs)  # plain JSON, nothing pickled
    assert kwargs["turn_discount"] == 0.5 and kwargs["reward_processes"] == 0 and kwargs["gconfig"]["n_samples"] == 2
    received = deserialize_value(serialize_value(kwargs))

    (group,) = submit_all(real_engine, [{"question": QUESTION, "answer": "5"}], received)
    assert group is not None and group["rewards"].tolist() == [0.5, 0.5]  # the group: n_samples rows

    eval_kwargs = workflow_kwargs(job.model_copy(update={"backends": {"areal": {"workflow": {"eval_temperature": 0.6}}}}),
                                  config.eval_gconfig, config.tokenizer_path, eval=True)
    assert eval_kwargs["gconfig"]["temperature"] == 0.6 and "eval_temperature" not in eval_kwargs


def test_example_job_plans_loads_and_its_parts_resolve(tmp_path):
    from aworld_core.datasets import load_dataset_section
    from aworld_core.plugins import get_plugin_manager
    from aworld_core.rewards.builtin import gsm8k_reward
    from aworld_core.settings import get_settings

    job = load_job_config(EXAMPLE, [f"output_dir={tmp_path / 'run'}"])
    plan, out = planned(job, tmp_path)
    config, _ = load_expr_config(["--config", str(out / CONFIG_FILE)], GRPOConfig)
    assert config.actor.path == "Qwen/Qwen2.5-1.5B-Instruct" and config.gconfig.n_samples == 4
    assert config.rollout.backend == "sglang:d4p1t1" and config.actor.backend == "fsdp:d4p1t1"
    assert any("8 GPUs" in note for note in plan.notes)

    train = load_dataset_section(job.train_dataset, job.base_dir)
    test = load_dataset_section(job.test_dataset, job.base_dir)
    assert len(train) == 16 and len(test) == 8
    for sample in train + test:  # the binary reward scores each sample's own worked answer 1.0
        assert gsm8k_reward(sample.data_source, sample.ground_truth, sample.ground_truth, {}) == 1.0
        assert gsm8k_reward(sample.data_source, "#### 99999", sample.ground_truth, {}) == 0.0

    agent = get_plugin_manager().hook.build_agents(job=job, settings=get_settings())
    assert [tool.name for tool in agent.tools] == ["calculate"]
    calculate = agent.tools[0]
    result = asyncio.run(calculate.run({"expression": "(48 / 2) + 48"}))
    assert result.content == "72" and not result.is_error
    with pytest.raises(ValueError, match="only numbers"):  # the runtime turns this into a tool error
        asyncio.run(calculate.run({"expression": "__import__('os')"}))


@pytest.mark.slow
def test_cli_dry_run_prints_the_command_and_files_and_writes_nothing(tmp_path):
    env = {**os.environ, "AWORLD_OUTPUT_ROOT": str(tmp_path / "runs")}
    proc = subprocess.run(
        [sys.executable, "-m", "aworld_core.run", "--config", str(EXAMPLE), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "-m aworld_areal.train --config" in proc.stdout and "--job" in proc.stdout
    assert f"--- file {tmp_path / 'runs' / 'gsm8k-areal' / CONFIG_FILE}" in proc.stdout
    assert f"/{JOB_FILE} ---" in proc.stdout
    planned_yaml = proc.stdout.split(f"{CONFIG_FILE} ---\n", 1)[1].split("\n--- ", 1)[0]
    assert yaml.safe_load(planned_yaml)["scheduler"] == {"type": "local"}
    assert not (tmp_path / "runs").exists()


def test_prepare_builds_what_ppotrainer_gets_and_a_row_runs_as_a_group(tmp_path, tool_model_dir, mcp_server,
                                                                        real_engine):
    """Everything main() hands PPOTrainer, from the planned files; then one dataset row, as AReaL's
    dataloader yields it, submitted as PPOTrainer submits it (group_size=gconfig.n_samples)."""
    from aworld_areal.data import SAMPLE_COLUMN
    from aworld_areal.train import prepare

    data = write_rows(tmp_path / "rows.jsonl")
    job = load_job_config(
        data=job_dict(
            tool_model_dir,
            mcp_server,
            train_dataset={"path": str(data)},
            test_dataset={"path": str(data)},
            backends={"areal": {"gconfig": {"greedy": True, "max_new_tokens": 48}, "workflow": {"reward_processes": 0}}},
        )
    )
    _, out = planned(job, tmp_path)
    prepared = prepare(["--config", str(out / CONFIG_FILE), "--job", str(out / JOB_FILE), "gconfig.n_samples=2"])
    # the workflow forms the group (2 members); AReaL must not group it again
    assert prepared.group_size == 2 and prepared.workflow_kwargs["gconfig"]["n_samples"] == 2
    assert prepared.config.gconfig.n_samples == 1 and prepared.config.eval_gconfig.n_samples == 1
    assert prepared.config.actor.reward_norm.group_size == 2  # AReaL's stride: the group's rows
    assert prepared.workflow_kwargs["groups_per_step"] == prepared.config.train_dataset.batch_size
    assert len(prepared.train_dataset) == 2 and len(prepared.valid_dataset) == 2
    assert set(prepared.train_dataset.column_names) == {"id", SAMPLE_COLUMN}
    assert prepared.eval_workflow_kwargs is not None
    json.dumps(prepared.workflow_kwargs)

    kwargs = deserialize_value(serialize_value(prepared.workflow_kwargs))
    (group,) = submit_all(real_engine, [prepared.train_dataset[0]], kwargs, group_size=prepared.config.gconfig.n_samples)
    assert group is not None and group["rewards"].tolist() == [1.0, 1.0]

    incomplete = load_job_config(data={"model": {"path": str(tool_model_dir)}, "train_dataset": {"path": str(data)}})
    (out / "incomplete.json").write_text(incomplete.model_dump_json())
    with pytest.raises(UsageError, match="reward.name"):
        prepare(["--config", str(out / CONFIG_FILE), "--job", str(out / "incomplete.json")])


def test_a_group_norm_stride_other_than_the_group_size_is_refused(tmp_path, tool_model_dir, mcp_server):
    from aworld_areal.train import prepare

    data = write_rows(tmp_path / "rows.jsonl")
    job = load_job_config(data=job_dict(tool_model_dir, mcp_server, train_dataset={"path": str(data)}))
    _, out = planned(job, tmp_path)
    args = ["--config", str(out / CONFIG_FILE), "--job", str(out / JOB_FILE), "gconfig.n_samples=4"]
    with pytest.raises(UsageError, match=r"actor\.reward_norm\.group_size is 3 but gconfig\.n_samples is 4"):
        prepare([*args, "actor.reward_norm.group_size=3"])
    with pytest.raises(UsageError, match=r"actor\.adv_norm\.group_size"):
        prepare([*args, "actor.adv_norm.mean_level=group", "+actor.adv_norm.group_size=2"])
    assert prepare([*args, "actor.reward_norm.mean_level=batch", "actor.reward_norm.std_level=batch",
                    "actor.reward_norm.group_size=3"]).group_size == 4  # batch-level: no stride


def test_rollout_sampling_is_the_samplers_and_the_actors_and_a_conflict_is_refused(tmp_path):
    """The job's rollout.sampling is AReaL's gconfig (what every request samples with) and its temperature
    also the actor's (AReaL recomputes logprobs at actor.temperature); top_k 0 ("off") is AReaL's
    all-tokens default. As AReaL loads the planned file. backends.areal setting one of those keys to
    another value is refused naming both; the same value is accepted."""
    from aworld_areal.config import AREAL_ALL_TOKENS

    base = {"model": {"path": "m"}, "train_dataset": {"path": "t.jsonl"},
            "rollout": {"sampling": {"temperature": 0.7, "top_p": 0.9, "top_k": 0}}}
    plan, out = planned(load_job_config(data=base), tmp_path)
    config, _ = load_expr_config(["--config", str(out / CONFIG_FILE)], GRPOConfig)
    assert (config.gconfig.temperature, config.gconfig.top_p, config.gconfig.top_k) == (0.7, 0.9, AREAL_ALL_TOKENS)
    assert config.actor.temperature == 0.7

    same = {**base, "backends": {"areal": {"gconfig": {"temperature": 0.7}, "actor": {"temperature": 0.7}}}}
    assert planned(load_job_config(data=same), tmp_path)[0].config["gconfig"]["temperature"] == 0.7
    for section, key in (({"gconfig": {"temperature": 1.0}}, "gconfig.temperature"),
                         ({"actor": {"temperature": 1.0}}, "actor.temperature")):
        with pytest.raises(ConfigError) as refused:
            planned(load_job_config(data={**base, "backends": {"areal": section}}), tmp_path)
        assert f"rollout.sampling.temperature=0.7 and backends.areal.{key}=1.0" in str(refused.value)
