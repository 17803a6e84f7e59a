"""The worker's group rendezvous (``aworld_verl.groups``) on its own: who belongs to a group, and
what happens when a member raises instead of finishing. (Through verl's real workers:
test_v1_groups.py and test_failures_and_limits.py.)"""

from __future__ import annotations

import asyncio

import pytest

from aworld_core.schemas import Episode, EpisodeStatus, Sample, TrainingView
from aworld_core.worker import GroupPolicy, apply_group_policy

SAMPLE = Sample(id="s", prompt=[{"role": "user", "content": "2+3?"}], ground_truth="5")


def _decide(group_id, sample, episodes, any_left):
    policy = GroupPolicy("drop_group") if any_left else GroupPolicy()
    return apply_group_policy(group_id, sample, episodes, policy)


def _episode(i: int, reward: float | None) -> Episode:
    episode = Episode(id=f"e{i}", task_id="s", agent_id="a")
    episode.training = TrainingView(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-0.1],
                                    response_versions=[0])
    episode.reward = reward
    episode.finish(EpisodeStatus.SUCCESS if reward is not None else EpisodeStatus.FAILED)
    return episode


async def test_members_started_together_form_one_group_and_a_late_one_its_own():
    from aworld_verl.groups import Rendezvous, neutral_rewards

    rendezvous = Rendezvous()
    members = []

    async def member(reward: float | None, delay: float) -> list[float | None]:
        me = rendezvous.join("uid-1", _decide)  # before the first await, as AworldAgentLoop.run does
        members.append(me)
        await asyncio.sleep(delay)
        group = await me.finish(_episode(me.index, reward), SAMPLE)
        return neutral_rewards(group, scored_in_loop=True)

    # created in one synchronous stretch, as verl's _run_prompt creates a prompt's sessions
    tasks = [asyncio.ensure_future(member(r, d)) for r, d in ((1.0, 0.02), (None, 0.0), (0.0, 0.01))]
    results = await asyncio.gather(*tasks)
    assert [m.index for m in members] == [0, 1, 2] and len({id(m.group) for m in members}) == 1
    assert results == [[1.0, 0.5, 0.0]] * 3  # the failed member: the survivors' mean
    assert rendezvous.open_groups() == 0

    late = await member(1.0, 0.0)  # joins after the group closed: a group of its own
    assert late == [1.0] and members[-1].group is not members[0].group


async def test_a_member_that_raises_drops_its_group():
    from aworld_verl.groups import Rendezvous

    rendezvous = Rendezvous()

    async def member(i: int) -> object:
        me = rendezvous.join("uid-2", _decide)
        try:
            await asyncio.sleep(0.01)
            if i == 1:
                raise RuntimeError("the loop broke")
            return await me.finish(_episode(i, 1.0), SAMPLE)
        except BaseException as exc:
            me.leave(exc)
            raise

    results = await asyncio.gather(*[member(i) for i in range(3)], return_exceptions=True)
    assert isinstance(results[1], RuntimeError)
    for group in (results[0], results[2]):
        assert group.dropped and "drop_group" in group.dropped
        assert "the agent loop raised RuntimeError: the loop broke" in group.episodes[1].error
        assert group.trained() == [False, False, False]


def test_neutral_rewards_without_the_reward_in_the_loop():
    from aworld_verl.groups import neutral_rewards

    ok = apply_group_policy("g", SAMPLE, [_episode(0, None), _episode(1, None)], GroupPolicy())
    assert neutral_rewards(ok, scored_in_loop=False) == [0.0, 0.0]  # failed: dropped, identical rewards
    scored_later = [_episode(0, 1.0), _episode(1, 1.0)]
    for e in scored_later:
        e.reward = None
    group = apply_group_policy("g", SAMPLE, scored_later, GroupPolicy(), needs_reward=False)
    assert neutral_rewards(group, scored_in_loop=False) == [None, None]  # verl's reward manager scores them


@pytest.mark.parametrize("n", [1, 4])
async def test_a_group_closes_one_loop_turn_after_its_first_member(n):
    from aworld_verl.groups import Rendezvous

    rendezvous = Rendezvous()
    first = rendezvous.join("u", _decide)
    for _ in range(n - 1):
        rendezvous.join("u", _decide)
    assert rendezvous.open_groups() == 1 and first.group.open
    await asyncio.sleep(0)
    assert rendezvous.open_groups() == 0 and not first.group.open and first.group.members == n


def test_a_v0_group_of_another_size_than_n_warns_once(caplog):
    """Under V0 the loop knows the phase only from its sampling settings: training's ``n`` or
    validation's ``val_kwargs.n``; a group of another size was cut across workers."""
    from omegaconf import OmegaConf

    import aworld_verl.agent_loop as loop

    rollout = OmegaConf.create({"n": 4, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                "val_kwargs": {"n": 2, "temperature": 1.0, "top_p": 0.6, "top_k": -1}})
    train = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    val = {**train, "top_p": 0.6}
    assert loop.expected_group_sizes(rollout, train) == {4}
    assert loop.expected_group_sizes(rollout, val) == {2}
    assert loop.expected_group_sizes(rollout, {**train, "temperature": 0}) == set()  # neither: unchecked
    same = OmegaConf.merge(rollout, {"val_kwargs": {"top_p": 1.0}})
    assert loop.expected_group_sizes(same, train) == {2, 4}

    loop._warned_v0_group = False
    with caplog.at_level("WARNING", logger="aworld_verl.agent_loop"):
        assert loop.check_v0_group_size(4, {4}, "u0") and loop.check_v0_group_size(3, set(), "u0")
        assert "closed in this worker" not in caplog.text
        assert not loop.check_v0_group_size(3, {4}, "u1")
        assert not loop.check_v0_group_size(1, {4}, "u2")
    assert caplog.text.count("closed in this worker") == 1
    assert "u1" in caplog.text and "expected 4" in caplog.text and "num_workers" in caplog.text
    loop._warned_v0_group = False
