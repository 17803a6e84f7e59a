"""A GRPO group with a failed member, on TRL's real ``GRPOTrainer``, under each group policy.

A real rollout plugin (the ``rollout`` hook, registered in-process) fails member 1 of the first
group of every step by raising, as a plugin that loses its tool server would; everything else is
the real path: the kit's ``EpisodeRunner``, the token engine over the tiny model, the core's
reward registry, TRL's advantage computation. The reward is the member's index in its group, so
every group's statistics are known.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aworld_core.errors import AworldError
from aworld_core.export import read_jsonl
from aworld_core.hookspecs import hookimpl
from aworld_core.plugins import get_plugin_manager

REWARD_FILE = Path(__file__).resolve().parent / "episode_rewards.py"
GROUP = 4


class FailMembers:
    """Fails member 1 of each step's first group (``every``: every episode); passes the rest on."""

    def __init__(self, every: bool = False) -> None:
        self.every = every
        self.failed: list[str] = []

    @hookimpl(tryfirst=True)
    def rollout(self, agent: Any, sample: Any, llm: Any, context: Any) -> None:
        if self.every or (context.group_index == 1 and context.group_id.endswith("-0")):
            self.failed.append(context.episode_id)
            raise RuntimeError("the tool server went away")
        return None


@pytest.fixture
def failing() -> Iterator[Any]:
    manager = get_plugin_manager()
    plugins: list[FailMembers] = []

    def install(every: bool = False) -> FailMembers:
        plugin = FailMembers(every)
        manager.register(plugin, name=f"fail-members-{len(plugins)}")
        plugins.append(plugin)
        return plugin

    yield install
    for index in range(len(plugins)):
        manager.pm.unregister(name=f"fail-members-{index}")


def _job(tmp_path: Path, model_dir: Path, write_samples: Any, steps: int = 1, **rollout: Any) -> dict[str, Any]:
    return {
        "name": "trl-failed-members",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "solver", "max_steps": 1},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 8))},
        "reward": {"name": f"{REWARD_FILE}:index_reward", "trajectory_aware": True},
        "rollout": {"concurrency": 8, "episode_timeout_s": 60, **rollout},
        "backends": {"trl": {
            "max_steps": steps, "per_device_train_batch_size": 2 * GROUP, "num_generations": GROUP,
            "learning_rate": 1e-4, "temperature": 1.0, "max_completion_length": 24, "beta": 0.0,
            "aworld": {"progress": False, "print_every": 0, "eval_before": False, "eval_after": False,
                       "plot": False, "save_checkpoint": False},
        }},
    }


def _grpo_advantages(rewards: list[float]) -> list[float]:
    """TRL's default (scale_rewards='group'): (r - mean) / (std + 1e-4), unbiased std."""
    values = torch.tensor(rewards)
    return ((values - values.mean()) / (values.std() + 1e-4)).tolist()


def _trained_tokens(batch: dict[str, Any]) -> list[int]:
    return (batch["completion_mask"] * batch["tool_mask"]).sum(dim=1).tolist()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["keep_group_neutral", "drop_group"])
def test_a_failed_member_trains_nothing_and_its_group_keeps_its_size(
    policy, tmp_path, tool_model_dir, recorded, write_samples, failing
):
    from aworld_trl.trainer import train

    plugin = failing()
    result = train(_job(tmp_path, tool_model_dir, write_samples, failed_episodes=policy), str(tmp_path / "run"))

    assert len(recorded) == 1 and len(plugin.failed) == 1
    batch = recorded[0]
    rows = batch["inputs"]
    assert len(rows) == 2 * GROUP  # the group was neither shrunk nor shifted
    episodes = {e.id: e for e in read_jsonl(result.artifacts["trajectories"])}
    members = [episodes[row["aworld_episode_id"]] for row in rows]
    assert [e.metadata["group_index"] for e in members] == [0, 1, 2, 3] * 2
    assert members[1].id == plugin.failed[0] and "the tool server went away" in members[1].error
    rewards = [row["aworld_reward"] for row in rows]
    advantages = batch["advantages"].tolist()
    trained = _trained_tokens(batch)
    assert trained[1] == 0 and advantages[1] == 0.0 and rewards[1] is None  # the failed member
    # the other group trains as usual, its advantages from its own four members
    assert rewards[4:] == [0.0, 1.0, 2.0, 3.0] and all(t > 0 for t in trained[4:])
    assert advantages[4:] == pytest.approx(_grpo_advantages([0.0, 1.0, 2.0, 3.0]), abs=1e-5)
    if policy == "keep_group_neutral":
        # the members that ran train, with the baseline taken from them only (TRL's nanmean/nanstd)
        assert rewards[:4] == [0.0, None, 2.0, 3.0]
        assert all(trained[i] > 0 for i in (0, 2, 3))
        expected = _grpo_advantages([0.0, 2.0, 3.0])
        assert [advantages[i] for i in (0, 2, 3)] == pytest.approx(expected, abs=1e-5)
    else:
        # every member of the group with a failure is masked the same way
        assert rewards[:4] == [None] * 4
        assert trained[:4] == [0] * 4 and advantages[:4] == [0.0] * 4
        assert batch["completion_mask"][:4].sum(dim=1).tolist() == [1] * 4  # one-token placeholders
        assert all("drop_group" in e.metadata["group_dropped"] for e in members[:4])
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"aworld/failed_rate": 0.125' in logged


@pytest.mark.slow
def test_steps_where_every_episode_fails_stop_training_naming_the_setting(
    tmp_path, tool_model_dir, recorded, write_samples, failing
):
    from aworld_trl.trainer import train

    failing(every=True)
    job = _job(tmp_path, tool_model_dir, write_samples, steps=3, max_failed_steps=2)
    with pytest.raises(AworldError, match=r"every episode failed in 2 consecutive training steps.*"
                                          r"the tool server went away.*raise rollout\.max_failed_steps"):
        train(job, str(tmp_path / "run"))
    assert len(recorded) == 1  # step 2's rollout raised
    assert _trained_tokens(recorded[0]) == [0] * 2 * GROUP
