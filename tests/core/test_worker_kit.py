"""The worker kit: typed rollout context, episodes and groups that always finish, the group policy,
the all-failed stop, views to tensors, and aborted generations resumed on the token path.

Real parts throughout: the core's runtime and built-in plugin, a real tokenizer and chat template,
a TokenLLM over the scripted engine, the core's reward registry, a real unreachable MCP address.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.errors import AworldError, UsageError
from aworld_core.hookspecs import hookimpl
from aworld_core.plugins import PluginManager
from aworld_core.schemas import Episode, EpisodeStatus, RolloutContext, Sample, TrainingView
from aworld_core.testing import (
    ScriptedTokenEngine,
    assistant_turn_text,
    get_tiny_model_dir,
    load_template,
    load_tiny_tokenizer,
)
from aworld_core.tokens import TokenLLM
from aworld_core.tokens.engine import ABORT, TokenOutput
from aworld_core.worker import (
    EpisodeRunner,
    FailedSteps,
    GroupPolicy,
    group_advantages,
    step_metrics,
    untrainable_reason,
    views_to_batch,
)

ANSWER = {"role": "assistant", "content": "#### 5"}
WRONG = {"role": "assistant", "content": "#### 4"}


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer(get_tiny_model_dir())


def ids(tok, message: dict) -> list[int]:
    return tok.encode(assistant_turn_text(tok, load_template("qwen2_5"), message), add_special_tokens=False)


def agent(**servers) -> Agent:
    return Agent("solver", conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="unused"), **servers)


def sample(i: int = 0) -> Sample:
    return Sample(id=f"s{i}", prompt=[{"role": "user", "content": "What is 2 + 3?"}], ground_truth="5")


class Observer:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def on_episode_end(self, episode: Episode) -> None:
        self.seen.append(episode.id)


class Broken:
    """A rollout plugin that fails in the ways the kit must record."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    @hookimpl
    def rollout(self, agent, sample, llm, context):
        if self.mode == "raise":
            raise RuntimeError("the plugin broke")
        if self.mode == "wrong_type":
            return _value({"not": "an episode"})
        if self.mode == "hang":
            return asyncio.sleep(3600)
        return None


async def _value(value):
    return value


@pytest.fixture
def observed() -> tuple[PluginManager, Observer]:
    pm = PluginManager(load_entry_points=False)
    observer = Observer()
    pm.register(observer, name="observer")
    return pm, observer


def test_rollout_context_is_typed_and_strict() -> None:
    ctx = RolloutContext.of({"episode_id": "e1", "max_steps": 2, "extras": {"uid": "u"}})
    assert ctx.max_steps == 2 and ctx.episode_metadata() == {"uid": "u"}
    with pytest.raises(UsageError, match=r"unknown rollout context keys \['max_step'\].*extras"):
        RolloutContext.of({"max_step": 2})
    with pytest.raises(Exception, match="max_steps"):
        RolloutContext(max_steps=0)


async def test_episode_is_scored_and_notified_once_with_context_metadata(tok, observed) -> None:
    pm, observer = observed
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER)]), tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm)
    ctx = RolloutContext(episode_id="ep-1", group_id="g", group_index=0, policy_version=3, extras={"uid": "u1"})
    episode = await runner.run(sample(), ctx)
    assert episode.status is EpisodeStatus.SUCCESS and episode.reward == 1.0
    assert untrainable_reason(episode) is None
    assert episode.training.response_ids == ids(tok, ANSWER)
    assert {k: episode.metadata[k] for k in ("group_id", "group_index", "policy_version", "uid")} == {
        "group_id": "g", "group_index": 0, "policy_version": 3, "uid": "u1"}
    assert observer.seen == ["ep-1"]


@pytest.mark.parametrize(
    "mode, status, needle",
    [
        ("raise", EpisodeStatus.FAILED, "RuntimeError: the plugin broke"),
        ("none", EpisodeStatus.FAILED, "no plugin answered"),
        ("wrong_type", EpisodeStatus.FAILED, "returned dict, expected an Episode"),
        ("hang", EpisodeStatus.TIMEOUT, "did not finish within its 2 s timeout"),
    ],
)
async def test_what_a_rollout_plugin_does_wrong_becomes_a_recorded_failure(tok, observed, monkeypatch, mode, status,
                                                                           needle) -> None:
    import aworld_core.worker.episodes as episodes

    monkeypatch.setattr(episodes, "DEADLINE_GRACE_S", 0.1)
    pm, observer = observed
    pm.register(Broken(mode), name="broken")
    if mode == "none":
        pm.pm.unregister(name="aworld_core.builtin")  # nobody answers
    llm = TokenLLM(ScriptedTokenEngine([]), tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm, timeout=2)  # instant modes: no race
    episode = await runner.run(sample(), {"episode_id": "ep-x"})
    assert episode.status is status and needle in episode.error
    assert episode.reward is None and episode.training is None
    assert observer.seen == ["ep-x"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_mcp_server_down_is_a_failed_episode_and_its_tokens_are_dropped(tok, observed) -> None:
    pm, observer = observed
    port = _free_port()  # nothing listens there
    mcp = {"mcpServers": {"tools": {"type": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp"}}}
    bot = Agent("solver", conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="u",
                                           mcp_connect_retries=0), mcp_config=mcp)
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER)]), tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(bot, llm, reward="gsm8k", manager=pm)
    episode = await runner.run(sample(), {"episode_id": "ep-down"})
    assert episode.status is EpisodeStatus.FAILED and "MCPConnectionError" in episode.error
    assert llm.session_ids() == [] and observer.seen == ["ep-down"]


async def test_configuration_errors_still_raise(tok, observed) -> None:
    pm, _ = observed
    runner = EpisodeRunner(agent(), object(), manager=pm)  # no chat(): a usage error every episode would hit
    with pytest.raises(UsageError, match="no chat"):
        await runner.run(sample())


async def test_callers_cancellation_propagates_and_drops_the_session(tok, observed) -> None:
    pm, observer = observed
    engine = ScriptedTokenEngine([ids(tok, ANSWER)], delay_s=30)
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, manager=pm)
    task = asyncio.ensure_future(runner.run(sample(), {"episode_id": "ep-c"}))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert llm.session_ids() == [] and observer.seen == []


def _group_runner(tok, pm, answers: list[dict | None], policy: GroupPolicy) -> EpisodeRunner:
    """Members answer in order; ``None`` makes that member's engine call fail."""
    plan = list(answers)

    def script(prompt_ids, sampling, request_id):
        answer = plan.pop(0)
        if answer is None:
            raise RuntimeError("engine lost")
        return ids(tok, answer)

    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=load_template("qwen2_5"))
    return EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm, policy=policy, concurrency=1)


async def test_group_keep_neutral_keeps_size_and_fills_failed_members_with_the_mean(tok, observed) -> None:
    pm, observer = observed
    runner = _group_runner(tok, pm, [ANSWER, None, WRONG, ANSWER], GroupPolicy("keep_group_neutral"))
    group = await runner.run_group(sample(), 4)
    assert len(group) == 4 and group.dropped is None
    assert group.trained() == [True, False, True, True]
    mean = (1.0 + 0.0 + 1.0) / 3
    assert group.rewards("mean") == pytest.approx([1.0, mean, 0.0, 1.0])
    assert group.rewards("none") == [1.0, None, 0.0, 1.0]
    assert [e.metadata["group_index"] for e in group.episodes] == [0, 1, 2, 3]
    assert len({e.metadata["group_id"] for e in group.episodes}) == 1
    assert sorted(observer.seen) == sorted(e.id for e in group.episodes)  # once each, after the policy


async def test_group_drop_trains_no_member_when_one_failed(tok, observed) -> None:
    pm, _ = observed
    runner = _group_runner(tok, pm, [ANSWER, None, WRONG], GroupPolicy("drop_group"))
    group = await runner.run_group(sample(), 3)
    assert group.dropped and "1 of 3 members failed" in group.dropped
    assert group.trained() == [False, False, False]
    assert all(untrainable_reason(e) in ("group_dropped", "failed") for e in group.episodes)


async def test_group_with_every_member_failed_is_dropped_under_either_policy(tok, observed) -> None:
    pm, _ = observed
    runner = _group_runner(tok, pm, [None, None], GroupPolicy("keep_group_neutral"))
    group = await runner.run_group(sample(), 2)
    assert group.dropped and "every member failed" in group.dropped


async def test_run_batch_groups_consecutive_rows(tok, observed) -> None:
    pm, observer = observed
    runner = _group_runner(tok, pm, [ANSWER, WRONG, None, ANSWER], GroupPolicy())
    groups = await runner.run_batch([sample(0), sample(0), sample(1), sample(1)], group_size=2, tag="t")
    assert [g.group_id for g in groups] == ["grp-t-0", "grp-t-1"]
    assert [e.id for g in groups for e in g.episodes] == ["ep-t-0", "ep-t-1", "ep-t-2", "ep-t-3"]
    assert groups[1].trained() == [False, True] and len(observer.seen) == 4
    with pytest.raises(UsageError, match="groups of 2"):
        await runner.run_batch([sample(0)] * 3, group_size=2)
    metrics = step_metrics([e for g in groups for e in g.episodes])
    assert metrics["aworld/failed_rate"] == 0.25 and metrics["aworld/untrained/failed"] == 1.0


def _as_worker_gets_it(data: dict):
    """The job as a backend worker receives it: dumped whole to JSON, loaded again."""
    from aworld_core.config import load_job_config

    return load_job_config(data=json.loads(load_job_config(data=data).model_dump_json()))


def test_from_job_caps_steps_only_when_the_job_sets_max_turns() -> None:
    pm = PluginManager(load_entry_points=False)
    job = _as_worker_gets_it({"name": "t", "agent": {"max_steps": 3}, "rollout": {"failed_episodes": "drop_group"}})
    runner = EpisodeRunner.from_job(job, agent=agent(), manager=pm)
    assert runner.max_steps is None  # unset rollout.max_turns leaves agent.max_steps in force
    assert runner.policy.failed_episodes == "drop_group"
    capped = _as_worker_gets_it({"name": "t", "rollout": {"max_turns": 2}})
    assert EpisodeRunner.from_job(capped, agent=agent(), manager=pm).max_steps == 2


def test_from_job_episode_timeout_rollout_then_agent_then_default() -> None:
    pm = PluginManager(load_entry_points=False)
    patient = Agent("a", conf=AgentConfig(episode_timeout_s=30, llm_base_url="http://127.0.0.1:9/v1"))
    plain = _as_worker_gets_it({"name": "t"})
    assert EpisodeRunner.from_job(plain, agent=patient, manager=pm).timeout is None  # the agent's 30 s applies
    assert EpisodeRunner.from_job(plain, agent=agent(), manager=pm).timeout == 600.0  # the default
    set_ = _as_worker_gets_it({"name": "t", "rollout": {"episode_timeout_s": 5}})
    assert EpisodeRunner.from_job(set_, agent=patient, manager=pm).timeout == 5.0


def test_failed_steps_stop_with_the_first_error() -> None:
    failed = Episode(id="e", task_id="t", agent_id="a")
    failed.finish(EpisodeStatus.FAILED, "MCPConnectionError: refused")
    steps = FailedSteps(2)
    steps.step([failed])
    with pytest.raises(AworldError, match="2 consecutive training steps.*MCPConnectionError: refused.*max_failed_steps"):
        steps.step([failed])


def test_group_advantages_leave_failed_members_out() -> None:
    adv = group_advantages([1.0, None, 0.0, 1.0, 2.0, 2.0], 3, scale=False)
    assert adv == pytest.approx([0.5, 0.0, -0.5, -2 / 3, 1 / 3, 1 / 3])
    with pytest.raises(UsageError):
        group_advantages([1.0, 2.0, 3.0], 2)


def kept(values: list, mask: list) -> list:
    return [v for v, m in zip(values, mask, strict=True) if m]


def test_views_to_batch_aligns_every_tensor_with_the_sampled_tokens() -> None:
    a = TrainingView(prompt_ids=[1, 2], response_ids=[10, 11, 12, 13], response_mask=[1, 1, 0, 1],
                     response_logprobs=[-0.1, -0.2, 0.0, -0.4], response_versions=[3, 3, -1, 4])
    b = TrainingView(prompt_ids=[5, 6, 7], response_ids=[20], response_mask=[1],
                     response_logprobs=[-0.9], response_versions=[2])
    batch = views_to_batch([a, b], pad_id=0, advantages=[1.0, -1.0])
    assert batch["input_ids"].tolist() == [[1, 2, 10, 11, 12, 13], [5, 6, 7, 20, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1, 1, 1, 1, 0, 0]]
    for row, view in enumerate((a, b)):
        mask = batch["loss_mask"][row].tolist()
        assert kept(batch["targets"][row].tolist(), mask) == kept(view.response_ids, view.response_mask)
        olds = kept(batch["old_logprobs"][row].tolist(), mask)
        assert olds == pytest.approx(kept(view.response_logprobs, view.response_mask))
        assert kept(batch["versions"][row].tolist(), mask) == kept(view.response_versions, view.response_mask)
    assert batch["advantages"].tolist() == [1.0, -1.0]
    with pytest.raises(UsageError, match="over max_length=5"):
        views_to_batch([a], max_length=5)
    bad = a.model_copy(update={"response_mask": [1, 1]})
    with pytest.raises(UsageError, match="inconsistent"):
        views_to_batch([bad])


async def test_aborted_generation_is_resumed_not_failed(tok) -> None:
    full = ids(tok, ANSWER)
    half = len(full) // 2
    engine = ScriptedTokenEngine([TokenOutput(full[:half], [-0.1] * half, ABORT, 7),
                                  TokenOutput(full[half:], [-0.2] * (len(full) - half), None, 8)])
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=PluginManager(load_entry_points=False))
    episode = await runner.run(sample())
    assert episode.status is EpisodeStatus.SUCCESS and episode.reward == 1.0
    view = episode.training
    assert view.response_ids == full
    assert view.response_versions == [7] * half + [8] * (len(full) - half)
    assert view.response_logprobs == pytest.approx([-0.1] * half + [-0.2] * (len(full) - half))
    first, second = engine.calls
    assert second.prompt_ids == [*first.prompt_ids, *full[:half]]  # resumed from the sampled tokens


async def test_abort_retries_are_bounded(tok) -> None:
    engine = ScriptedTokenEngine(lambda p, s, r: TokenOutput([], [], ABORT, 0))
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"), abort_retries=2)
    runner = EpisodeRunner(agent(), llm, manager=PluginManager(load_entry_points=False))
    episode = await runner.run(sample())
    assert episode.status is EpisodeStatus.FAILED and "aborted the generation" in episode.error
    assert len(engine.calls) == 3


async def test_abort_before_any_token_with_no_logprobs_is_resumed(tok) -> None:
    """vLLM (through verl) answers a request aborted before its first token with no tokens and
    ``log_probs=None``: nothing was sampled, so there is nothing to lose, and the resume must keep
    the logprobs of what is sampled next."""
    full = ids(tok, ANSWER)
    engine = ScriptedTokenEngine([TokenOutput([], None, ABORT, 7), TokenOutput(full, [-0.3] * len(full), None, 8)])
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=PluginManager(load_entry_points=False))
    episode = await runner.run(sample())
    assert episode.status is EpisodeStatus.SUCCESS, episode.error
    assert episode.training.response_ids == full
    assert episode.training.response_logprobs == pytest.approx([-0.3] * len(full))
    first, second = engine.calls
    assert second.prompt_ids == first.prompt_ids


def test_failed_steps_from_counts() -> None:
    steps = FailedSteps(2, setting="trainer.x")
    steps.record(0, "episode e: MCPConnectionError: refused")
    steps.record(3, lambda: "unused")  # a step that trained resets the count
    steps.record(0, lambda: "episode e: timeout")
    with pytest.raises(AworldError, match="2 consecutive.*episode e: timeout.*raise trainer.x"):
        steps.record(0, lambda: "episode e: timeout")


def test_group_policy_without_rewards_of_its_own() -> None:
    """A framework that scores members later (verl's reward manager) decides the group on status
    and tokens alone."""
    from aworld_core.worker import apply_group_policy

    def member(i: int, status: EpisodeStatus) -> Episode:
        e = Episode(id=f"e{i}", task_id="t", agent_id="a")
        e.training = TrainingView(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-0.1],
                                  response_versions=[0])
        e.finish(status)
        return e

    ok = apply_group_policy("g", sample(), [member(0, EpisodeStatus.SUCCESS), member(1, EpisodeStatus.SUCCESS)],
                            GroupPolicy(), needs_reward=False)
    assert ok.dropped is None and ok.trained() == [True, True]
    assert step_metrics(ok.episodes, needs_reward=False)["aworld/trained_rate"] == 1.0
    assert step_metrics(ok.episodes)["aworld/untrained/no_reward"] == 2.0
    assert apply_group_policy("g", sample(), [member(2, EpisodeStatus.SUCCESS)], GroupPolicy()).dropped  # no reward
    mixed = apply_group_policy("g", sample(), [member(3, EpisodeStatus.SUCCESS), member(4, EpisodeStatus.FAILED)],
                               GroupPolicy("drop_group"), needs_reward=False)
    assert mixed.dropped and mixed.trained() == [False, False]


class Raises:
    """An observer that fails."""

    @hookimpl
    def on_episode_end(self, episode: Episode) -> None:
        raise ValueError("observer broke")


async def test_a_failing_observer_does_not_silence_the_others(tok, observed) -> None:
    pm, observer = observed
    pm.register(Raises(), name="raises")  # registered last: pluggy would call it first and stop
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER)]), tok, chat_template=load_template("qwen2_5"))
    episode = await EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm).run(sample(), {"episode_id": "ep-o"})
    assert observer.seen == ["ep-o"]
    assert episode.metadata["on_episode_end_errors"] == ["ValueError: observer broke"]


async def test_one_bad_conversation_fails_its_episode_not_the_batch(tok, observed) -> None:
    pm, _ = observed
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER)]), tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm)
    empty = Sample(id="empty", prompt=[], ground_truth="5")
    bad = Sample(id="bad", prompt=[{"role": "user", "content": 42}], ground_truth="5")
    groups = await runner.run_batch([empty, bad, sample()], group_size=1, tag="b")
    first, second, third = (g.episodes[0] for g in groups)
    assert first.status is EpisodeStatus.FAILED and "empty prompt" in first.error
    assert second.status is EpisodeStatus.FAILED and "EpisodeInputError" in second.error
    assert third.status is EpisodeStatus.SUCCESS and third.reward == 1.0


async def test_a_runner_without_reward_leaves_groups_to_the_framework(tok, observed) -> None:
    pm, _ = observed
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER), ids(tok, WRONG)]), tok, chat_template=load_template("qwen2_5"))
    group = await EpisodeRunner(agent(), llm, manager=pm, concurrency=1).run_group(sample(), 2)
    assert group.dropped is None and all(e.reward is None for e in group.episodes)


async def test_run_groups_gives_each_group_its_own_ids(tok, observed) -> None:
    pm, _ = observed
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER)] * 4), tok, chat_template=load_template("qwen2_5"))
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm)
    groups = await runner.run_groups([sample(0), sample(1)], 2)
    assert len({g.group_id for g in groups}) == 2 and len({e.id for g in groups for e in g.episodes}) == 4
    with pytest.raises(UsageError, match="own ids"):
        await runner.run_groups([sample(0)], 2, {"group_id": "G"})


def test_extras_must_be_plain_json() -> None:
    with pytest.raises(Exception, match="plain JSON"):
        RolloutContext(extras={"handle": object()})


# -- what moved out of the backends: rendezvous, step recorder, worker cache, records ---------------

def _member(i: int, reward: float | None) -> Episode:
    episode = Episode(id=f"e{i}", task_id="s", agent_id="a")
    episode.training = TrainingView(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-0.1],
                                    response_versions=[0])
    episode.reward = reward
    episode.finish(EpisodeStatus.SUCCESS if reward is not None else EpisodeStatus.FAILED, None if reward is not None
                   else "it broke")
    return episode


async def test_members_started_together_form_one_group_and_a_late_one_its_own() -> None:
    from aworld_core.worker import Rendezvous, group_decider

    rendezvous, members = Rendezvous(), []
    decide = group_decider(GroupPolicy(), scored=True)

    async def member(reward: float | None, delay: float) -> list[float | None]:
        me = rendezvous.join("uid-1", decide)  # before the first await, as verl's AworldAgentLoop.run does
        members.append(me)
        await asyncio.sleep(delay)
        return (await me.finish(_member(me.index, reward), sample())).neutral_rewards()

    # created in one synchronous stretch, as verl's _run_prompt creates a prompt's sessions
    tasks = [asyncio.ensure_future(member(r, d)) for r, d in ((1.0, 0.02), (None, 0.0), (0.0, 0.01))]
    results = await asyncio.gather(*tasks)
    assert [m.index for m in members] == [0, 1, 2] and len({id(m.group) for m in members}) == 1
    assert results == [[1.0, 0.5, 0.0]] * 3  # the failed member: the survivors' mean
    assert rendezvous.open_groups() == 0
    late = await member(1.0, 0.0)  # joins after the group closed: a group of its own
    assert late == [1.0] and members[-1].group is not members[0].group


async def test_a_member_that_raises_drops_its_group() -> None:
    from aworld_core.worker import Rendezvous, group_decider

    rendezvous = Rendezvous()
    decide = group_decider(GroupPolicy(), scored=True)

    async def member(i: int) -> object:
        me = rendezvous.join("uid-2", decide)
        try:
            await asyncio.sleep(0.01)
            if i == 1:
                raise RuntimeError("the loop broke")
            return await me.finish(_member(i, 1.0), sample())
        except BaseException as exc:
            me.leave(exc)
            raise

    results = await asyncio.gather(*[member(i) for i in range(3)], return_exceptions=True)
    assert isinstance(results[1], RuntimeError)
    for group in (results[0], results[2]):
        assert group.dropped and "drop_group" in group.dropped
        assert "the agent loop raised RuntimeError: the loop broke" in group.episodes[1].error
        assert group.trained() == [False, False, False]


async def _members_with_one_cancelled(key: str, cancel_when: str) -> list:
    """Three members as verl's AworldAgentLoop.run runs them; member 0 is cancelled after it
    handed in its episode, while it waits on the group (``cancel_when="waiting"``) or once the
    group is decided but before it built its output (``"decided"``)."""
    from aworld_core.worker import Rendezvous, group_decider

    rendezvous = Rendezvous()
    decide = group_decider(GroupPolicy(), scored=True)
    handed_in, go_on, others_go, members = asyncio.Event(), asyncio.Event(), asyncio.Event(), []

    async def member(i: int) -> object:
        me = rendezvous.join(key, decide)
        members.append(me)
        try:
            if i != 0:  # the others hand in when the test says so (events, not timers: a stall
                await others_go.wait()  # on a loaded machine must not let them overtake member 0)
            group = await me.finish(_member(i, float(i)), sample())
            if i == 0:
                handed_in.set()
            await go_on.wait()  # e.g. notify: the member has its group but not yet its output
            return group
        except BaseException as exc:
            me.leave(exc)
            raise

    tasks = [asyncio.ensure_future(member(i)) for i in range(3)]
    if cancel_when == "waiting":
        while not members or 0 not in members[0].group.episodes:  # member 0 waits on the decision
            await asyncio.sleep(0.001)
        assert not members[0].group.future.done()
        tasks[0].cancel()
        others_go.set()
    else:
        others_go.set()
        await handed_in.wait()
        tasks[0].cancel()
    go_on.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("cancel_when", ["waiting", "decided"])
async def test_a_member_cancelled_after_handing_in_its_episode_drops_its_group(cancel_when) -> None:
    results = await _members_with_one_cancelled(f"uid-{cancel_when}", cancel_when)
    assert isinstance(results[0], asyncio.CancelledError)
    for group in results[1:]:  # the framework holds no output for member 0: nobody trains
        assert group.dropped and "drop_group" in group.dropped
        # left before the decision: its slot says why; after it: the group's reason does
        why = group.episodes[0].error if cancel_when == "waiting" else group.dropped
        assert "the agent loop raised CancelledError" in why
        assert group.trained() == [False, False, False] and group.neutral_rewards() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("n", [1, 4])
async def test_a_group_closes_one_loop_turn_after_its_first_member(n) -> None:
    from aworld_core.worker import Rendezvous, group_decider

    rendezvous = Rendezvous()
    decide = group_decider(GroupPolicy(), scored=True)
    first = rendezvous.join("u", decide)
    for _ in range(n - 1):
        rendezvous.join("u", decide)
    assert rendezvous.open_groups() == 1 and first.group.open
    await asyncio.sleep(0)
    assert rendezvous.open_groups() == 0 and not first.group.open and first.group.members == n


def test_group_decider_without_scoring_drops_a_group_with_a_failed_member() -> None:
    from aworld_core.worker import group_decider

    decide = group_decider(GroupPolicy(), scored=False)
    failed = decide("g", sample(), [_member(0, None), _member(1, None)], False)
    assert failed.dropped and failed.neutral_rewards() == [0.0, 0.0]  # identical rewards: no advantage
    later = [_member(0, 1.0), _member(1, 1.0)]
    for e in later:
        e.reward = None  # the framework's reward manager scores them
    assert decide("g", sample(), later, False).neutral_rewards() == [None, None]
    left = group_decider(GroupPolicy(), scored=True)("g", sample(), [_member(0, 1.0), _member(1, None)], True)
    assert left.dropped and "drop_group" in left.dropped  # a member that left: the group cannot stay whole


def test_step_recorder_counts_logs_and_stops_after_all_failed_steps(caplog) -> None:
    import logging

    from aworld_core.worker import StepRecorder, apply_group_policy
    from aworld_core.worker.outcomes import MCP_UNREACHABLE, UNTRAINED

    log = logging.getLogger("kit-recorder-test")
    recorder = StepRecorder(log, max_failed_steps=2, groups_per_step=2, summary_every=3, label="test worker")
    ok = apply_group_policy("g0", sample(), [_member(0, 1.0), _member(1, None)], GroupPolicy())
    with caplog.at_level("INFO", logger="kit-recorder-test"):
        assert recorder.group(ok) == {"failed": 1}
    assert recorder.trained == 1 and recorder.untrained == {"failed": 1} and recorder.groups_dropped == 0
    assert recorder.recent[-1] == ("failed", "e1", "it broke")
    assert "episode e1 (task s) not trained, failed: it broke" in caplog.text

    down = _member(2, None)
    down.error = "MCPConnectionError: the server is down"
    refused = _member(3, None)
    refused.metadata[UNTRAINED] = "truncated"  # a scorer's own reason (it failed the episode)
    dead = apply_group_policy("g1", sample(), [down, refused], GroupPolicy())
    with caplog.at_level("INFO", logger="kit-recorder-test"):
        assert recorder.group(dead) == {MCP_UNREACHABLE: 1, "truncated": 1}
        assert recorder.group(dead, step=False) == {MCP_UNREACHABLE: 1, "truncated": 1}  # evaluation: no step
    assert recorder.groups_dropped == 2 and recorder.stopped is None  # step 1 (g0 + g1) trained one episode
    assert "test worker episodes: episodes 3" in caplog.text  # the summary every 3 episodes
    recorder.group(dead)
    assert recorder.stopped is None and recorder.failed_steps.consecutive == 0  # a step is 2 groups
    recorder.group(dead)
    assert recorder.stopped is None and recorder.failed_steps.consecutive == 1
    recorder.group(dead), recorder.group(dead)
    assert isinstance(recorder.stopped, AworldError) and "2 consecutive" in str(recorder.stopped)
    assert "MCPConnectionError: the server is down" in str(recorder.stopped)
    recorder.add("truncated_views", 2)
    assert recorder.snapshot()["truncated_views"] == 2 and recorder.snapshot()["episodes"] == 14


def test_describe_says_why_in_words() -> None:
    from aworld_core.worker import describe

    assert describe(_member(0, None)) == "the episode failed: it broke"
    scored = _member(1, 1.0)
    scored.reward_errors = {"gsm8k": "boom"}
    assert describe(scored) == "its reward failed (gsm8k: boom)"
    assert describe(_member(2, 1.0), "no_sampled_tokens") == "no sampled tokens"


def test_worker_cache_shares_one_state_per_job_and_closes_once(tmp_path, monkeypatch) -> None:
    import atexit

    from aworld_core.worker import WorkerCache

    registered: list = []
    monkeypatch.setattr(atexit, "register", registered.append)
    closed: list = []
    cache = WorkerCache(close=closed.append)
    builds: list = []
    data = {"name": "cached", "train_dataset": {"path": "data.jsonl"}}
    text = json.dumps(data)

    def build(job):
        builds.append(job)
        return {"job": job.name}

    first = cache.for_job(text, "opts", build)
    assert cache.for_job(text, "opts", build) is first  # the same text: no parse, no build
    assert cache.for_job(data, "opts", build) is first  # the same job as a dict
    assert cache.for_job(text, "other", build) is not first and len(builds) == 2
    assert registered == [cache.close]  # registered with atexit once, on the first state
    stale = cache.get("k", lambda: {"v": 1})
    assert cache.get("k", lambda: {"v": 2}, valid=lambda s: s["v"] == 2) is not stale  # rebuilt when stale
    assert closed == [stale]  # the stale state was closed, not leaked
    assert cache.pop(lambda key, _s: key == "k") == [{"v": 2}]
    cache.close()
    assert cache.states() == [] and len(closed) == 3 and cache.for_job(text, "opts", build) is not first


def test_worker_cache_job_text_aliases_honour_valid_and_close_the_stale_state() -> None:
    from aworld_core.worker import WorkerCache

    closed: list = []
    cache = WorkerCache(close=closed.append)
    text = json.dumps({"name": "aliased", "train_dataset": {"path": "data.jsonl"}})
    live = {"ok": True}

    def build(job):
        return {"job": job.name, "live": dict(live)}

    first = cache.for_job(text, "o", build, valid=lambda s: s["live"]["ok"])
    assert cache.for_job(text, "o", build, valid=lambda s: s["live"]["ok"]) is first
    first["live"]["ok"] = False  # e.g. the server manager it holds is gone
    second = cache.for_job(text, "o", build, valid=lambda s: s["live"]["ok"])  # by the alias, no parse
    assert second is not first and second["job"] == "aliased" and closed == [first]
    cache.pop(lambda _k, s: s is second)
    assert cache.for_job(text, "o", build) is not second  # a popped state is not served by its alias


def test_worker_cache_builds_each_key_on_its_own() -> None:
    import threading

    from aworld_core.worker import WorkerCache

    cache = WorkerCache()
    release, building, builds = threading.Event(), threading.Event(), []

    def slow() -> str:
        building.set()
        builds.append("slow")
        # a build that waits on another thread using the cache (a helper loading the tokenizer)
        helper = threading.Thread(target=lambda: cache.get("tokenizer", lambda: "tok"))
        helper.start()
        helper.join(30)
        assert not helper.is_alive(), "the helper thread was blocked by this build"
        assert release.wait(30)
        return "slow-state"

    results: list = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("slow", slow))) for _ in range(3)]
    for thread in threads:
        thread.start()
    assert building.wait(30)
    assert cache.get("other", lambda: "fast") == "fast"  # not held up by the slow key's build
    release.set()
    for thread in threads:
        thread.join(30)
    assert results == ["slow-state"] * 3 and builds == ["slow"]  # the waiters got the one build
    assert cache.get("tokenizer", lambda: "again") == "tok"

    def broken() -> str:
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        cache.get("b", broken)
    assert cache.get("b", lambda: "fixed") == "fixed"  # a failed build leaves no state and no lock
    with pytest.raises(UsageError, match="asked for its own state"):
        cache.get("self", lambda: cache.get("self", lambda: "x"))


def test_shared_tokenizer_loads_a_directory_once() -> None:
    from aworld_core.worker import shared_tokenizer

    directory = get_tiny_model_dir()
    assert shared_tokenizer(directory) is shared_tokenizer(str(directory))
    marker = object()
    assert shared_tokenizer(marker) is marker


def test_token_client_defaults_pad_ids_and_agent_checks(tmp_path) -> None:
    from aworld_core.config import load_job_config
    from aworld_core.worker import pad_id_of
    from aworld_core.worker.build import agent_from_ref, check_agent, load_job, tool_parser_of

    assert tool_parser_of(None, framework_format="qwen3_coder") == "qwen3_coder"
    assert tool_parser_of(None, "llama3_json", framework_format="gpt-oss") == "llama3_json"  # given: wins
    with pytest.raises(UsageError, match=r"'gpt-oss' has no AWorld tool parser.*'tool_parser' in the YAML"):
        tool_parser_of(None, framework_format="gpt-oss", setting="'tool_parser' in the YAML")
    job = load_job_config(data={"name": "j", "train_dataset": {"path": "d.jsonl"}, "model": {"path": "m",
                                                                                            "tool_parser": "mistral"}})
    assert tool_parser_of(job, framework_format="gpt-oss") == "mistral"  # the job's model section first

    class Tok:
        pad_token_id, eos_token_id = None, 7

    assert pad_id_of(Tok()) == 7 and pad_id_of(object()) == 0
    with pytest.raises(UsageError, match=r"my_loop.build_agents\(\) returned dict; it must return"):
        check_agent({}, "my_loop.build_agents()")
    (tmp_path / "agents_mod.py").write_text(
        "from aworld_core import Agent, AgentConfig\n"
        "def make():\n    return Agent('made', conf=AgentConfig(llm_base_url='http://127.0.0.1:9/v1', "
        "llm_model_name='m'))\n")
    assert agent_from_ref("agents_mod.py:make", str(tmp_path)).name == "made"
    with pytest.raises(UsageError, match=r"does not exist \(job_config_path in the YAML\)"):
        load_job(str(tmp_path / "missing.yaml"), setting="job_config_path in the YAML")


def test_group_policy_from_job_with_a_framework_override() -> None:
    assert GroupPolicy.from_job(None) == GroupPolicy()
    assert GroupPolicy.from_job(None, failed_episodes="drop_group") == GroupPolicy("drop_group")
    job = _as_worker_gets_it({"rollout": {"failed_episodes": "drop_group", "max_failed_steps": 5}})
    assert GroupPolicy.from_job(job) == GroupPolicy("drop_group", 5)
    assert GroupPolicy.from_job(job, failed_episodes="keep_group_neutral") == GroupPolicy("keep_group_neutral", 5)


def test_outcome_records_merge_into_the_steps_metrics() -> None:
    from aworld_core.worker import apply_group_policy
    from aworld_core.worker.records import (
        first_record_error,
        mask_of_runs,
        mask_runs,
        merge_step_metrics,
        outcome_record,
        tool_counts,
        trained_records,
    )

    group = apply_group_policy("g", sample(), [_member(0, 1.0), _member(1, None)], GroupPolicy())
    records = [outcome_record(e, neutral=not t) for e, t in zip(group.episodes, group.trained(), strict=True)]
    assert json.loads(json.dumps(records)) == records  # plain JSON: it crosses processes
    assert records[1]["untrained"] == "failed" and records[1]["error"] == "it broke" and records[1]["group"] == "g"
    merged = merge_step_metrics(records)
    whole = step_metrics(group.episodes)
    assert {k: merged[k] for k in whole} == pytest.approx(whole)  # the kit's step_metrics of the whole step
    assert merged["aworld/groups"] == 1 and merged["aworld/placeholders"] == 1
    assert trained_records(records) == 1 and first_record_error(records) == "episode e1: it broke"
    assert first_record_error([{"episode": "x", "untrained": "no_reward"}]) == "episode x: no_reward"
    assert tool_counts(group.episodes[0]) == {"llm_calls": 0, "tool_calls": 0, "tool_results": 0, "tool_errors": 0}
    assert mask_runs([0, 0, 1, 1, 1, 0]) == [[0, 2], [1, 3], [0, 1]]
    assert mask_of_runs(mask_runs([1, 0, 0, 1])) == [1, 0, 0, 1]


async def test_a_failed_episode_made_outside_run_drops_its_sessions(tok, observed) -> None:
    pm, _ = observed
    llm = TokenLLM(ScriptedTokenEngine([ids(tok, ANSWER)]), tok, chat_template=load_template("qwen2_5"))
    await llm.chat([{"role": "user", "content": "hi"}], session_id="ep-x")
    assert llm.session_ids() == ["ep-x"]
    runner = EpisodeRunner(agent(), llm, manager=pm)
    episode = runner.failed(sample(), RolloutContext(episode_id="ep-x"), EpisodeStatus.CANCELLED, "ended outside")
    assert episode.status is EpisodeStatus.CANCELLED and episode.error == "ended outside"
    assert llm.session_ids() == [] and episode.training is None


def test_count_metrics_name_every_reason_and_options_keys_are_stable() -> None:
    import dataclasses

    from aworld_core.worker.cache import options_key
    from aworld_core.worker.outcomes import REASONS, count_metrics

    out = count_metrics(4, {"failed": 1, "truncated": 1}, names=(*REASONS, "truncated"))
    assert out["aworld/episodes"] == 4 and out["aworld/trained"] == 2
    assert out["aworld/untrained/failed"] == 1 and out["aworld/untrained/timeout"] == 0
    assert set(out) == {"aworld/episodes", "aworld/trained", *(f"aworld/untrained/{r}" for r in (*REASONS, "truncated"))}

    @dataclasses.dataclass
    class Options:
        n: int = 2

    marker = object()
    assert options_key(a=Options(), b={"x": 1}) == options_key(b={"x": 1}, a=Options())
    assert options_key(a=Options(n=3)) != options_key(a=Options())
    assert options_key(t=marker) == options_key(t=marker) != options_key(t=object())


def test_stop_error_in_finds_the_kit_stop_in_text() -> None:
    from aworld_core.worker.policy import stop_error_in

    with pytest.raises(AworldError) as info:
        FailedSteps(1).step([])
    found = stop_error_in(f"Failed to call method 'submit': Background thread failed: {info.value}")
    assert isinstance(found, AworldError) and str(found) == str(info.value)
    assert stop_error_in("Connection refused") is None


async def test_pool_scorer_scores_in_process_and_refuses_bad_settings(tok) -> None:
    from aworld_core.config import RewardSection
    from aworld_core.worker.scoring import PoolScorer

    with pytest.raises(UsageError, match=r"workflow\.reward_processes must be >= 0"):
        PoolScorer(RewardSection(name="gsm8k"), processes=-1, prefix="workflow.")
    with pytest.raises(UsageError, match=r"reward_timeout_s must be > 0"):
        PoolScorer(RewardSection(name="gsm8k"), timeout_s=0)
    scorer = PoolScorer(RewardSection(name="gsm8k"))
    good = Episode(id="e", task_id="s0", agent_id="a", final_answer="#### 5")
    good.finish(EpisodeStatus.SUCCESS)
    await scorer(good, sample())
    assert good.reward == 1.0
    failed = _member(1, None)
    await scorer(failed, sample())
    assert failed.reward is None and not failed.reward_errors  # a failed episode is not scored


@pytest.mark.slow
async def test_pool_scorer_scores_in_a_process_pool() -> None:
    from aworld_core.config import RewardSection
    from aworld_core.worker.scoring import PoolScorer, shutdown_pools

    scorer = PoolScorer(RewardSection(name="gsm8k"), processes=1, timeout_s=120)
    try:
        episodes = []
        for answer in ("#### 5", "#### 4"):
            episode = Episode(task_id="s0", agent_id="a", final_answer=answer)
            episode.finish(EpisodeStatus.SUCCESS)
            episodes.append(episode)
        await asyncio.gather(*(scorer(e, sample()) for e in episodes))
        assert [e.reward for e in episodes] == [1.0, 0.0] and not any(e.reward_errors for e in episodes)
    finally:
        shutdown_pools()


@pytest.mark.slow
async def test_shutdown_pools_kills_a_hanging_reward_instead_of_waiting_for_it(tmp_path) -> None:
    import threading

    from aworld_core.config import RewardSection
    from aworld_core.worker import scoring

    started = tmp_path / "started"
    (tmp_path / "hang_reward.py").write_text(
        "import pathlib, time\n"
        "def hang(episode, sample):\n"
        f"    pathlib.Path({str(started)!r}).write_text('x')\n"
        "    time.sleep(3600)\n"
        "    return 1.0\n"
    )
    scorer = scoring.PoolScorer(RewardSection(name="hang_reward.py:hang", trajectory_aware=True),
                                base_dir=str(tmp_path), processes=1, timeout_s=3600)
    episode = Episode(id="e", task_id="s0", agent_id="a")
    episode.finish(EpisodeStatus.SUCCESS)
    task = asyncio.ensure_future(scorer(episode, sample()))
    for _ in range(1200):  # the spawned process imports the kit, then starts the reward
        if started.exists() or task.done():
            break
        await asyncio.sleep(0.1)
    assert started.exists(), "the reward never started in the pool"
    pool = scoring._POOLS[1]
    processes = list(pool._processes.values())
    stopper = threading.Thread(target=scoring.shutdown_pools, kwargs={"grace_s": 0.5}, daemon=True)
    stopper.start()
    for _ in range(1200):  # the loop keeps running meanwhile: the scorer sees its pool break
        if not stopper.is_alive():
            break
        await asyncio.sleep(0.05)
    assert not stopper.is_alive(), "shutdown_pools waited on the hanging reward"
    assert processes and not any(p.is_alive() for p in processes)  # killed, not left behind
    await asyncio.wait_for(task, 60)
    assert episode.reward is None and "BrokenProcessPool" in episode.reward_errors["hang_reward.py:hang"]
    assert scoring._POOLS == {}


def test_the_kits_job_and_agent_caches_build_once_and_clear(tmp_path) -> None:
    """The kit's jobs (per file and modification time) and agents (per plugin manager and job) are
    WorkerCaches: built once per process, forgotten by clear_caches."""
    from aworld_core.worker import build as kit

    builds: list[str] = []

    class Builder:
        @hookimpl
        def build_agents(self, job, settings):
            builds.append(job.name)
            return Agent("a", conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="m"))

    manager = PluginManager(load_entry_points=False)
    manager.register(Builder(), name="builder")
    (tmp_path / "job.json").write_text(json.dumps({"name": "cached"}))
    kit.clear_caches()
    job = kit.load_job(str(tmp_path / "job.json"))
    assert kit.load_job(str(tmp_path / "job.json")) is job and len(kit._jobs) == 1
    first = kit.build_agent(job, settings=object(), manager=manager)
    assert kit.build_agent(job, settings=object(), manager=manager) is first and builds == ["cached"]
    assert kit.build_agent(job, settings=object(), manager=manager, cache=False) is not first
    kit.clear_caches()
    assert len(kit._jobs) == len(kit._agents) == 0
    assert kit.build_agent(job, settings=object(), manager=manager) is not first and len(builds) == 3
    kit.clear_caches()
