"""The ``verl`` backend's launch: the planned command loads against verl's own config, the parquet
files read back through verl's dataset, the planned agent-loop YAML runs an episode in verl's
worker, and the reward wrapper works when verl's reward manager calls it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

REWARD_FILE = '''
def score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when the expected value appears in the answer."""
    return 1.0 if str(ground_truth) in solution_str else 0.0
'''

AGENT_FILE = '''
from aworld_core import Agent, AgentConfig


def make_agent():
    return Agent("job_agent", system_prompt="Answer with a number.", conf=AgentConfig(max_steps=2))
'''


def _job(tmp_path: Path, model_dir: Path, **extra: Any) -> Any:
    from aworld_core.config import load_job_config

    (tmp_path / "reward_fn.py").write_text(REWARD_FILE)
    (tmp_path / "job_agents.py").write_text(AGENT_FILE)
    train = tmp_path / "train.jsonl"
    rows = [
        {"id": "q1", "question": "What is 2 + 3?", "answer": "5", "difficulty": "easy"},
        {"id": "q2", "prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "2 + 2?"}],
         "answer": "4", "extra_info": {"tags": {}, "source": "hand"}},
    ]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"id": "t1", "question": "1 + 1?", "answer": [2, "two"]}) + "\n")
    data = {
        "name": "verl-job",
        "backend": "verl",
        "model": {"path": str(model_dir)},
        "agent": {"factory": "job_agents:make_agent"},
        "train_dataset": {"path": "train.jsonl"},
        "test_dataset": {"path": "test.jsonl"},
        "reward": {"name": "reward_fn.py:score"},
        "rollout": {"max_turns": 3, "episode_timeout_s": 60},
        "output_dir": str(tmp_path / "out"),
        "backends": {
            "verl": {
                "aworld": {"device": "gpu"},  # verl's own plan (its vLLM replica), whatever this machine has
                "actor_rollout_ref": {"rollout": {"n": 4}},
                "data.max_prompt_length": 768,
                "data.max_response_length": 256,
                "trainer.n_gpus_per_node": 1,
                "reward.custom_reward_function.reward_kwargs.aworld_base_dir": str(tmp_path),
            }
        },
        **extra,
    }
    config = tmp_path / "job.yaml"
    import yaml

    config.write_text(yaml.safe_dump(data))
    return load_job_config(config)


def _plan(job: Any) -> Any:
    from aworld_core.jobs import plan_job

    plan, _ = plan_job("verl", job)
    return plan


def test_plan_has_the_seed_defaults_and_the_user_wins(tmp_path, tiny_model_dir):
    job = _job(tmp_path, tiny_model_dir)
    plan = _plan(job)
    assert plan.command[1:3] == ["-m", "verl.trainer.main_ppo"]
    args = {key: value.strip("'") for key, value in (arg.split("=", 1) for arg in plan.command[3:])}
    assert args["algorithm.adv_estimator"] == "grpo"
    assert args["actor_rollout_ref.rollout.name"] == "vllm"
    assert args["actor_rollout_ref.rollout.mode"] == "async"
    assert args["actor_rollout_ref.rollout.multi_turn.format"] == "hermes"
    assert args["actor_rollout_ref.rollout.calculate_log_probs"] == "true"
    assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "aworld_agent"
    assert args["actor_rollout_ref.rollout.n"] == "4"  # the user's nested key won
    assert args["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == "3"
    assert args["reward.custom_reward_function.path"] == "pkg://aworld_verl.reward"
    # the user's bare spelling of a key we add with '+' keeps the '+' (verl's schema lacks it)
    assert args["+reward.custom_reward_function.reward_kwargs.aworld_base_dir"] == str(tmp_path)
    assert "reward.custom_reward_function.reward_kwargs.aworld_base_dir" not in args
    out = (tmp_path / "out").resolve()
    assert args["actor_rollout_ref.rollout.agent.agent_loop_config_path"] == str(out / "verl/agent_loop.yaml")
    assert args["data.train_files"] == f"[{out / 'verl/data/train.parquet'}]"
    assert set(plan.files) == {"verl/agent_loop.yaml", "verl/aworld_job.json"}
    assert any("train.parquet" in note for note in plan.notes)
    # V1's replay buffer with aworld's per-step counts and the all-failed stop
    assert args["trainer.v1.sampler.custom_sampler.path"] == "pkg://aworld_verl.sampler"
    assert args["trainer.v1.sampler.custom_sampler.name"] == "aworld_replay_buffer"
    assert args["+trainer.v1.sampler.sampler_kwargs.aworld_max_failed_steps"] == "3"


def test_dry_run_prints_the_command_and_files(tmp_path, tiny_model_dir):
    _job(tmp_path, tiny_model_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "aworld_core.run", "--config", str(tmp_path / "job.yaml"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "verl.trainer.main_ppo" in proc.stdout and "algorithm.adv_estimator=grpo" in proc.stdout
    assert "--- file" in proc.stdout and "_target_: aworld_verl.agent_loop.AworldAgentLoop" in proc.stdout
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Disabled critic")
async def test_planned_launch_runs_through_verl(tmp_path, tiny_model_dir, verl_tokenizer, close_states):
    """From the plan to verl: compose verl's config from the planned command (unknown keys would
    fail), validate it as main_ppo does, write the files and parquet as launch does, read the
    rows with verl's RLHFDataset, run them through verl's worker with the planned agent-loop YAML,
    and score with verl's reward manager over our reward wrapper."""
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl_testkit import StubServer, compose_verl_config

    from aworld_core.launch import write_plan_files
    from aworld_verl.launch import write_datasets
    from aworld_verl.rows import sample_from_row

    job = _job(tmp_path, tiny_model_dir)
    plan = _plan(job)
    config = compose_verl_config(plan.command[3:])
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "aworld_agent"
    assert config.reward.custom_reward_function.reward_kwargs.aworld_reward.endswith("reward_fn.py:score")
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))

    out = Path(plan.cwd)
    write_plan_files(plan, out)
    written = write_datasets(job, out)
    assert set(written) == {"verl/data/train.parquet", "verl/data/val.parquet"}

    dataset = RLHFDataset(list(config.data.train_files), verl_tokenizer, config.data)
    items = [dataset[i] for i in range(len(dataset))]
    assert [item["index"] for item in items] == [0, 1]
    assert items[1]["raw_prompt"][0] == {"role": "system", "content": "Be exact."}
    assert items[0]["agent_name"] == "aworld_agent"
    samples = [sample_from_row(item) for item in items]
    assert [s.id for s in samples] == ["q1", "q2"] and [s.ground_truth for s in samples] == ["5", "4"]
    assert samples[0].extra_info["difficulty"] == "easy"
    val = RLHFDataset(list(config.data.val_files), verl_tokenizer, config.data)
    assert sample_from_row(val[0]).ground_truth == [2, "two"]  # a non-text truth survives parquet

    server = StubServer(verl_tokenizer, script=["The answer is 5."])
    worker = AgentLoopWorker(config, llm_client=server)
    batch = DataProto.from_single_dict(collate_fn(items))
    result = await worker.generate_sequences(batch)
    assert list(result.non_tensor_batch["status"]) == ["success", "success"]
    assert result.batch["rm_scores"].sum(dim=1).tolist() == [1.0, 0.0]  # the job's reward, in the loop
    assert all("Answer with a number." in server.tokenizer.decode(c.prompt_ids) for c in server.calls)

    # verl's reward manager calling the wrapper (as for rows the loop leaves unscored)
    manager = NaiveRewardManager(config, verl_tokenizer, get_custom_reward_fn(config))
    scored = [await manager.run_single(result[i : i + 1]) for i in range(len(result))]
    assert [s["reward_score"] for s in scored] == [1.0, 0.0]


def test_reward_wrapper_errors_are_explicit(tmp_path):
    from aworld_core.errors import UsageError
    from aworld_verl.reward import compute_score

    (tmp_path / "r.py").write_text(REWARD_FILE)
    assert compute_score("d", "so 5", "5", {}, aworld_reward="r.py:score", aworld_base_dir=str(tmp_path)) == 1.0
    assert compute_score("d", "[2, 3]", json.dumps([2, 3]), {"aworld_ground_truth_json": True},
                         aworld_reward="r.py:score", aworld_base_dir=str(tmp_path)) == 1.0
    with pytest.raises(UsageError, match="which reward"):
        compute_score("d", "5", "5", {})
    with pytest.raises(UsageError, match="unknown reward"):
        compute_score("d", "5", "5", {}, aworld_reward="nope")
    (tmp_path / "bad.py").write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 'x'\n")
    with pytest.raises(ValueError, match="must return a\\s+finite number"):
        compute_score("d", "5", "5", {}, aworld_reward="bad.py:score", aworld_base_dir=str(tmp_path))


def test_rows_leave_out_empty_dicts_and_name_bad_columns(tmp_path):
    from aworld_core.errors import UsageError
    from aworld_core.schemas import Sample
    from aworld_verl.rows import to_verl_rows, write_parquet

    samples = [
        Sample(id="a", prompt=[{"role": "user", "content": "hi"}], ground_truth="1", extra_info={"k": {}, "m": {"n": {}}}),
        Sample(id="b", prompt=[{"role": "user", "content": "yo"}], ground_truth="2", extra_info={"k": 3}),
    ]
    rows = to_verl_rows(samples, split="train")
    assert "k" not in rows[0]["extra_info"] and "m" not in rows[0]["extra_info"]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "1"}
    write_parquet(rows, tmp_path / "ok.parquet")
    rows[1]["extra_info"]["index"] = "one"
    with pytest.raises(UsageError, match="column 'extra_info'"):
        write_parquet(rows, tmp_path / "bad.parquet")
    with pytest.raises(UsageError, match="text 'role' and 'content'"):
        to_verl_rows([Sample(id="c", prompt=[{"role": "user", "content": [{"type": "text", "text": "x"}]}])], split="t")


def test_rollout_sampling_becomes_verls_rollout_keys_and_a_conflict_is_refused(tmp_path, tiny_model_dir):
    """The job's rollout.sampling is verl's actor_rollout_ref.rollout.temperature/top_p/top_k in the planned
    command (as verl's own config composes it: what its agent loop puts in every sample's sampling_params);
    top_k 0 ("off") is verl's -1. The same key written in backends.verl with another value is refused
    naming both; with the same value it is accepted."""
    from verl_testkit import compose_verl_config

    from aworld_core.config import load_job_config
    from aworld_core.errors import ConfigError

    _job(tmp_path, tiny_model_dir)
    sampling = ["rollout.sampling.temperature=0.7", "rollout.sampling.top_p=0.9", "rollout.sampling.top_k=0"]
    plan = _plan(load_job_config(tmp_path / "job.yaml", sampling))
    args = dict(arg.split("=", 1) for arg in plan.command[3:])
    assert (args["actor_rollout_ref.rollout.temperature"], args["actor_rollout_ref.rollout.top_p"],
            args["actor_rollout_ref.rollout.top_k"]) == ("0.7", "0.9", "-1")
    rollout = compose_verl_config(plan.command[3:]).actor_rollout_ref.rollout
    assert (rollout.temperature, rollout.top_p, rollout.top_k) == (0.7, 0.9, -1)

    same = _plan(load_job_config(tmp_path / "job.yaml", [*sampling, "backends.verl.actor_rollout_ref.rollout.top_k=-1",
                                                         "backends.verl.actor_rollout_ref.rollout.temperature=0.7"]))
    assert "actor_rollout_ref.rollout.top_k=-1" in same.command
    with pytest.raises(ConfigError) as refused:
        _plan(load_job_config(tmp_path / "job.yaml", [*sampling, "backends.verl.actor_rollout_ref.rollout.temperature=1.0"]))
    assert "rollout.sampling.temperature=0.7 and backends.verl.actor_rollout_ref.rollout.temperature=1.0" in str(refused.value)


def test_launch_needs_a_model_and_data_but_a_dry_run_plans(tmp_path):
    from aworld_core.config import load_job_config
    from aworld_core.errors import UsageError
    from aworld_verl.launch import launch

    job = load_job_config(data={"backend": "verl", "output_dir": str(tmp_path / "out"),
                                "backends": {"verl": {"aworld": {"device": "gpu"}}}})
    plan = _plan(job)
    assert any("model.path" in note for note in plan.notes) and any("train_dataset" in n for n in plan.notes)
    with pytest.raises(UsageError, match="set model.path .* and train_dataset"):
        launch(job, plan)
    assert not (tmp_path / "out").exists()


def test_agent_trainer_plans_the_verl_backend(tmp_path, tiny_model_dir):
    from verl_testkit import exact_answer_reward

    from aworld_core.agents import Agent
    from aworld_core.trainer import AgentTrainer

    trainer = AgentTrainer(
        agent=Agent("solver", system_prompt="Answer."),
        config={"backend": "verl", "model": {"path": str(tiny_model_dir)}, "output_dir": str(tmp_path / "out"),
                "backends": {"verl": {"aworld": {"device": "gpu"}}}},
        reward_func=exact_answer_reward,
        train_dataset=[{"question": "1 + 1?", "answer": "2"}],
    )
    plan = trainer.plan()
    assert plan.backend == "verl" and "verl.trainer.main_ppo" in plan.command
    job = json.loads(plan.files["verl/aworld_job.json"])
    assert job["agent"]["name"] == "solver" and job["reward"]["name"] == "verl_testkit:exact_answer_reward"


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_the_example_job_plans_against_verls_config(tmp_path):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl_testkit import compose_verl_config

    from aworld_core.config import load_job_config

    example = Path(__file__).resolve().parents[2] / "examples" / "verl" / "gsm8k" / "job.yaml"
    job = load_job_config(example, overrides=[f"output_dir={tmp_path / 'out'}"])  # the file pins device: gpu
    plan = _plan(job)
    config = compose_verl_config(plan.command[3:])
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert config.actor_rollout_ref.rollout.n == 4 and config.data.train_batch_size == 4
    assert config.reward.custom_reward_function.reward_kwargs.aworld_reward == "gsm8k"
    from aworld_verl.launch import write_datasets

    written = write_datasets(job, tmp_path / "out")
    assert set(written) == {"verl/data/train.parquet", "verl/data/val.parquet"}


@pytest.mark.filterwarnings("ignore:Disabled critic")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_planned_sampler_is_the_one_verls_trainer_builds(tmp_path, tiny_model_dir):
    """verl's own V1 trainer, built from the planned command, loads aworld's replay buffer with the
    job's max_failed_steps; DAPO settings, which verl hands only to its own buffer, reach ours."""
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl_testkit import compose_verl_config

    from aworld_verl.sampler import AworldReplayBuffer, AworldReplayBufferAsync

    job = _job(tmp_path, tiny_model_dir, rollout={"max_turns": 3, "max_failed_steps": 5})
    config = compose_verl_config(_plan(job).command[3:])
    trainer = get_trainer_cls("sync")(config)
    buffer = trainer.replay_buffer
    assert isinstance(buffer, AworldReplayBuffer) and isinstance(buffer, ReplayBuffer)
    assert buffer.watch.failed_steps.limit == 5 and buffer.filter_groups_metric is None

    dapo = {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "reward",
            "data.train_batch_size": 4, "actor_rollout_ref.actor.ppo_mini_batch_size": 4}
    job = _job(tmp_path, tiny_model_dir, backends={"verl": {**_job(tmp_path, tiny_model_dir).backends["verl"], **dapo}})
    config = compose_verl_config(_plan(job).command[3:])
    buffer = get_trainer_cls("sync")(config).replay_buffer
    assert buffer.filter_groups_metric == "reward" and buffer.gen_batch_size == 1 and buffer.train_batch_size == 4
    config.trainer.v1.trainer_mode = "separate_async"
    assert isinstance(get_trainer_cls("sync")(config).replay_buffer, AworldReplayBufferAsync)


def test_v0_refuses_a_batch_the_agent_loop_workers_would_split(tmp_path, tiny_model_dir):
    """verl's V0 trainer cuts the repeated batch into one equal chunk per agent-loop worker: a
    prompt count the worker count does not divide splits GRPO groups across workers."""
    from verl_testkit import compose_verl_config

    from aworld_core.errors import ConfigError
    from aworld_verl.launch import VERL_AGENT_NUM_WORKERS_DEFAULT, VERL_USE_V1_DEFAULT

    # the defaults the check assumes are verl's own
    defaults = compose_verl_config([])
    assert defaults.actor_rollout_ref.rollout.agent.num_workers == VERL_AGENT_NUM_WORKERS_DEFAULT
    assert defaults.trainer.use_v1 is VERL_USE_V1_DEFAULT

    base = dict(_job(tmp_path, tiny_model_dir).backends["verl"])

    def plan(**settings: Any) -> Any:
        return _plan(_job(tmp_path, tiny_model_dir, backends={"verl": {**base, **settings}}))

    # 6 prompts over verl's default 8 workers
    with pytest.raises(ConfigError, match=r"num_workers=8, verl default\), but data.train_batch_size=6 ") as info:
        plan(**{"trainer.use_v1": False, "data.train_batch_size": 6})
    assert "trainer.use_v1=false" in str(info.value) and info.value.problems[0][0] == "data.train_batch_size"
    # nested spelling, an explicit worker count, and validation with n > 1
    with pytest.raises(ConfigError, match=r"num_workers=4\), but data.val_batch_size=5 ") as info:
        plan(trainer={"use_v1": False}, actor_rollout_ref={"rollout": {"n": 4, "agent": {"num_workers": 4},
                                                                       "val_kwargs": {"n": 2}}},
             **{"data.train_batch_size": 8, "data.val_batch_size": 5})
    assert [p[0] for p in info.value.problems] == ["data.val_batch_size"]
    assert "make data.val_batch_size a multiple of 4" in str(info.value).lower()

    # divisible setups plan (and verl's V0 chunking keeps every group in one worker)
    v0 = plan(**{"trainer.use_v1": False, "data.train_batch_size": 16, "data.val_batch_size": 5})  # val n=1
    assert any("V0 trainer" in note for note in v0.notes)
    config = compose_verl_config(v0.command[3:])
    assert config.trainer.use_v1 is False and config.data.train_batch_size % config.actor_rollout_ref.rollout.agent.num_workers == 0
    plan(**{"trainer.use_v1": "false", "data.train_batch_size": 6, "actor_rollout_ref.rollout.agent.num_workers": 3})
    # V1 groups by prompt, not by chunk: no refusal
    plan(**{"data.train_batch_size": 6})


def test_v0_chunks_keep_groups_whole_exactly_when_the_workers_divide_the_prompts():
    """What the refusal guards: verl's ``DataProto.chunk`` over a batch repeated ``n`` times."""
    import numpy as np
    from verl.protocol import DataProto

    def groups_per_chunk(prompts: int, n: int, workers: int) -> list[set[str]]:
        batch = DataProto.from_dict(non_tensors={"uid": np.array([f"p{i}" for i in range(prompts)], dtype=object)})
        batch = batch.repeat(repeat_times=n, interleave=True)
        return [set(chunk.non_tensor_batch["uid"]) for chunk in batch.chunk(workers)]

    whole = groups_per_chunk(8, 4, 4)
    assert all(not (a & b) for i, a in enumerate(whole) for b in whole[i + 1:])
    split = groups_per_chunk(6, 4, 8)  # 24 rows in chunks of 3: every other group spans two workers
    assert any(a & b for i, a in enumerate(split) for b in split[i + 1:])
