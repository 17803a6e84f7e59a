"""What rollout_func hands TRL, built from recorded episodes grouped by the worker kit: exact tokens,
masks, placeholders, and the group policy (keep_group_neutral / drop_group)."""

from __future__ import annotations

import math

import pytest

from aworld_core.schemas import (
    ActionResult,
    Episode,
    EpisodeStatus,
    ExpData,
    ExpMeta,
    ExpState,
    Sample,
    ToolCall,
    TrainingView,
    TrajectoryStep,
)
from aworld_core.worker import GroupPolicy, apply_group_policy, step_metrics
from aworld_trl.rollout import REWARD_FIELD, make_reward_func, trl_batch

EOS = 2
SAMPLE = Sample(id="t", prompt=[{"role": "user", "content": "2*3?"}])


def _episode(status=EpisodeStatus.SUCCESS, reward=1.0, view=True, tool_error=False) -> Episode:
    episode = Episode(task_id="t", agent_id="a")
    call = ToolCall(id="c1", name="calc", arguments='{"expr": "2*3"}')
    episode.steps.append(TrajectoryStep(
        exp_meta=ExpMeta(task_id="t", agent_id="a", step=1),
        exp_data=ExpData(state=ExpState(action_result=[ActionResult(tool_name="calc", content="6",
                                                                    is_error=tool_error)]),
                         actions=[call]),
    ))
    if view:
        episode.training = TrainingView(
            prompt_ids=[5, 6, 7],
            response_ids=[10, 11, EOS, 20, 21, 12, EOS],
            response_mask=[1, 1, 1, 0, 0, 1, 1],
            response_logprobs=[-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5],
            response_versions=[3, 3, 3, -1, -1, 3, 3],
            num_turns=2,
        )
    episode.reward = reward
    episode.finish(status, None if status is EpisodeStatus.SUCCESS else "tool server down")
    return episode


def _groups(members: list[list[Episode]], policy: str = "keep_group_neutral") -> list:
    return [apply_group_policy(f"g{i}", SAMPLE, group, GroupPolicy(policy)) for i, group in enumerate(members)]


def test_successful_episode_goes_to_trl_exactly():
    batch = trl_batch(_groups([[_episode()]]), EOS)
    assert batch["prompt_ids"] == [[5, 6, 7]]
    assert batch["completion_ids"] == [[10, 11, EOS, 20, 21, 12, EOS]]
    assert batch["env_mask"] == [[1, 1, 1, 0, 0, 1, 1]]
    assert batch["logprobs"] == [[-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5]]
    assert batch[REWARD_FIELD] == [1.0]


def _mixed_group() -> list[Episode]:
    """A trained member, a failed one, one whose reward failed, and another trained one."""
    unscored = _episode(reward=None)
    unscored.reward_errors["exact"] = "ValueError: no answer"
    return [_episode(reward=1.0), _episode(status=EpisodeStatus.FAILED, reward=None, view=False), unscored,
            _episode(reward=0.0)]


def test_keep_group_neutral_masks_failed_members_and_keeps_the_group_whole():
    groups = _groups([_mixed_group(), [_episode(reward=0.5), _episode(reward=1.0)]])
    batch = trl_batch(groups, EOS)
    assert len(batch["completion_ids"]) == 6  # never shrunk: TRL groups rows by a fixed stride
    assert batch["completion_ids"][1:3] == [[EOS], [EOS]]
    assert batch["env_mask"][1:3] == [[0], [0]]
    assert batch[REWARD_FIELD] == [1.0, None, None, 0.0, 0.5, 1.0]  # None: left out of TRL's group stats
    assert batch["prompt_ids"][1] == [EOS] and batch["prompt_ids"][2] == [5, 6, 7]
    for row in (0, 3, 4, 5):  # the members that ran train exactly what they sampled
        assert batch["env_mask"][row] == [1, 1, 1, 0, 0, 1, 1]
    assert batch["aworld_episode_id"] == [e.id for g in groups for e in g.episodes]


def test_drop_group_masks_every_member_of_a_group_with_a_failure():
    groups = _groups([_mixed_group(), [_episode(reward=0.5), _episode(reward=1.0)]], policy="drop_group")
    batch = trl_batch(groups, EOS)
    assert len(batch["completion_ids"]) == 6
    assert batch["env_mask"][:4] == [[0]] * 4 and batch["completion_ids"][:4] == [[EOS]] * 4
    assert batch[REWARD_FIELD] == [None, None, None, None, 0.5, 1.0]
    assert batch["env_mask"][4] == [1, 1, 1, 0, 0, 1, 1]
    assert groups[0].dropped and "drop_group" in groups[0].dropped


def test_a_group_whose_members_all_failed_trains_nothing():
    failed = [_episode(status=EpisodeStatus.TIMEOUT, reward=None, view=False) for _ in range(2)]
    batch = trl_batch(_groups([failed]), EOS)
    assert batch["env_mask"] == [[0], [0]] and batch[REWARD_FIELD] == [None, None]


def test_reward_func_hands_over_core_rewards_and_none():
    reward = make_reward_func("exact_answer")
    assert reward.__name__ == "exact_answer"
    assert reward(completions=["a", "b"], **{REWARD_FIELD: [1.0, None]}) == [1.0, None]


def test_step_metrics_count_failures_and_tool_use():
    """The kit's step_metrics: the keys the progress line and metrics.png read are there."""
    episodes = [_episode(), _episode(tool_error=True), _episode(status=EpisodeStatus.FAILED, reward=None, view=False)]
    episodes[2].steps.clear()
    metrics = step_metrics(episodes)
    assert math.isclose(metrics["aworld/failed_rate"], 1 / 3)
    assert math.isclose(metrics["aworld/tool_call_rate"], 2 / 3)
    assert math.isclose(metrics["aworld/tool_error_rate"], 0.5)
    assert metrics["aworld/sampled_tokens"] == 5
    assert metrics["aworld/untrained/failed"] == 1.0


def test_a_batch_that_is_not_whole_groups_is_refused():
    from aworld_core.errors import AworldError
    from aworld_trl.rollout import SAMPLE_ID, AworldRollout

    other = Sample(id="u", prompt=[{"role": "user", "content": "2+3?"}])
    rollout = AworldRollout(None, [SAMPLE, other], loop=None, placeholder_id=EOS)
    rows = lambda ids: [{SAMPLE_ID: i} for i in ids]  # noqa: E731
    assert [s.id for s in rollout.batch_samples(rows("ttuu"), 2)] == list("ttuu")
    with pytest.raises(AworldError, match="not whole groups of num_generations=2"):
        rollout.batch_samples(rows("ttu"), 2)
    with pytest.raises(AworldError, match="not one prompt repeated"):
        rollout.batch_samples(rows("tutu"), 2)
