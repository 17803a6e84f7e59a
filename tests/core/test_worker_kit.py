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
        ("hang", EpisodeStatus.TIMEOUT, "did not finish within its 0.2 s timeout"),
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
    runner = EpisodeRunner(agent(), llm, reward="gsm8k", manager=pm, timeout=0.2)
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
