"""``agent.openai_agent``: the job's one spelling for an agent written against the OpenAI API, run by
the worker kit on every backend (``aworld_core.worker.openai_agent``).

The job schema keeps it alone; the kit's ``build_agent`` answers it with an ``OpenAIAgent`` whose
gateways the kit's agent cache owns; the core's ``rollout`` hook runs it through the gateway over
the token client, and real smolagents' episodes come out as two token-exact segments."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.schemas import EpisodeStatus, Sample
from aworld_core.testing import ScriptedTokenEngine, check_segments
from aworld_core.tokens import TokenLLM
from aworld_core.worker import EpisodeRunner, OpenAIAgent, build_agent, check_agent

pytest_plugins = ["aworld_core.testing.fixtures"]

SMOLAGENTS = "aworld_core.testing.smolagents_client:smolagents_agent"
HERE = Path(__file__).resolve().parent


def _job(agent: dict, **extra: object):
    return load_job_config(data={"name": "openai-agent", "agent": agent, **extra})


@pytest.mark.parametrize(("agent", "extra", "says"), [
    ({"openai_agent": "m:f", "factory": "m:g"}, {}, "agent.factory would be ignored"),
    ({"factory": "m:g", "openai_agent": "m:f"}, {}, "agent.factory would be ignored"),
    ({"openai_agent": "m:f", "system_prompt": "hi", "max_steps": 2}, {}, "agent.max_steps, agent.system_prompt"),
    ({"openai_agent": "m:f", "options": {"k": 1}}, {}, "agent.options would be ignored"),
    ({"openai_agent": "m:f"}, {"rollout": {"max_turns": 3}}, "rollout.max_turns cannot limit agent.openai_agent"),
    ({"openai_agent": "m:f"}, {"model": {"path": "m"}, "policies": {"p": {"lora": {"r": 8}}},
                               "agent_policies": {"agent": "p"}},
     "remove policies and agent_policies"),
])
def test_the_job_keeps_an_openai_agent_alone(agent, extra, says) -> None:
    with pytest.raises(ConfigError, match=says):
        _job(agent, **extra)


def test_the_kit_builds_it_and_only_the_kit(tmp_path) -> None:
    from aworld_core.agents.factory import agent_from_job
    from aworld_core.worker.build import clear_caches

    job = _job({"openai_agent": SMOLAGENTS})
    agent = build_agent(job)
    assert isinstance(agent, OpenAIAgent) and agent.ref == SMOLAGENTS and build_agent(job) is agent
    assert check_agent(agent, "test") is agent
    assert build_agent(job, cache=False) is not agent
    with pytest.raises(UsageError, match="runs only in training"):  # `aworld run` / evaluate build Agents
        agent_from_job(job)
    (tmp_path / "not_a_function.py").write_text("VALUE = 1\n")
    with pytest.raises(UsageError, match="is not a function"):
        build_agent(_job({"openai_agent": f"{tmp_path / 'not_a_function.py'}:VALUE"}), cache=False)
    clear_caches()


def _script(tok):
    def script(prompt_ids, sampling, request_id):
        if tok.decode(prompt_ids).replace(" ", "").endswith('{"name":"'):  # smolagents forces a tool call
            return tok.encode('add", "arguments": {"a": 2, "b": 3}}\n</tool_call>', add_special_tokens=False)
        return tok.encode("It is 5.", add_special_tokens=False)

    return script


async def test_a_smolagents_episode_is_two_exact_segments_and_the_cache_stops_its_gateway(tiny_tokenizer) -> None:
    pytest.importorskip("smolagents")
    from aworld_core.worker.build import clear_caches

    engine = ScriptedTokenEngine(_script(tiny_tokenizer))
    llm = TokenLLM(engine, tiny_tokenizer, tool_parser="hermes")
    job = _job({"openai_agent": SMOLAGENTS}, rollout={"episode_timeout_s": 60})
    agent = build_agent(job)
    runner = EpisodeRunner.from_job(job, llm, agent=agent)
    sample = Sample(id="s", prompt=[{"role": "user", "content": "What is 2 + 3?"}], ground_truth="5")
    episode = await runner.run(sample)
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "It is 5.", episode.error
    assert episode.metadata["agent_style"] == "openai" and "gateway_failures" not in episode.metadata
    view = episode.training
    assert view.num_segments == 2 and view.later_segments[0].start == "rewrite"
    calls = [c for c in engine.calls if c.request_id == episode.id]
    held = check_segments(view, calls)  # every sampled token trains, in its segment, nothing else
    assert held == [[0], [1]]
    (server,) = agent.gateways.servers()
    clear_caches()  # the kit's agent cache owns the gateways: closing it stops them
    assert agent.gateways.servers() == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


async def test_a_failing_or_wrong_agent_is_a_recorded_failure(tmp_path, tiny_tokenizer) -> None:
    (tmp_path / "agents.py").write_text(
        "async def broken(sample, *, base_url, api_key, model):\n    raise RuntimeError('the agent crashed')\n\n"
        "def wrong(sample, *, base_url, api_key, model):\n    return 1.0\n"
    )
    llm = TokenLLM(ScriptedTokenEngine(_script(tiny_tokenizer)), tiny_tokenizer, tool_parser="hermes")
    sample = Sample(id="s", prompt=[{"role": "user", "content": "hi"}])
    for name, why in (("broken", "the agent crashed"), ("wrong", "must return the final answer")):
        agent = OpenAIAgent.load(f"{tmp_path / 'agents.py'}:{name}")
        try:
            episode = await EpisodeRunner(agent, llm).run(sample)
        finally:
            await agent.aclose()
        assert episode.status is EpisodeStatus.FAILED and why in episode.error and episode.training is None


# -- a call the gateway failed fails the episode, even when the client swallows the error -------------


class _EngineDown(RuntimeError):
    pass


def _failing_after(tok, calls_ok: int, *, times: int | None = None):
    """The smolagents script whose engine fails from call ``calls_ok + 1`` on (``times`` failures,
    then answers again; ``None``: for ever)."""
    answer = _script(tok)
    seen = {"calls": 0, "failed": 0}

    def script(prompt_ids, sampling, request_id):
        seen["calls"] += 1
        if seen["calls"] > calls_ok and (times is None or seen["failed"] < times):
            seen["failed"] += 1
            raise _EngineDown("the inference server went away")
        return answer(prompt_ids, sampling, request_id)

    return script


async def test_smolagents_swallowing_a_502_is_a_recorded_failure_never_trained(tiny_tokenizer) -> None:
    """smolagents' final-answer call gets a 502; smolagents returns the error text as its answer
    (``provide_final_answer`` catches every exception): the episode fails, keeps its messages, and
    has no training view, so nothing of it trains."""
    pytest.importorskip("smolagents")
    engine = ScriptedTokenEngine(_failing_after(tiny_tokenizer, 1))
    llm = TokenLLM(engine, tiny_tokenizer, tool_parser="hermes")
    agent = OpenAIAgent.load(SMOLAGENTS)
    sample = Sample(id="s", prompt=[{"role": "user", "content": "What is 2 + 3?"}], ground_truth="5")
    try:
        episode = await EpisodeRunner(agent, llm, timeout=60).run(sample)
    finally:
        await agent.aclose()
    assert episode.status is EpisodeStatus.FAILED and episode.training is None, episode
    assert episode.error.startswith("the gateway failed 1 call(s): first: 502 "), episode.error
    assert "the inference server went away" in episode.error
    assert episode.messages and episode.messages[0]["role"] in ("system", "user")  # recorded
    (failure,) = episode.metadata["gateway_failures"]
    assert failure["status"] == 502 and failure["api"] == "chat.completions" and not failure["retried"]
    assert llm.session_ids() == [] and agent.gateways.servers() == []


def _sdk_agent_source() -> str:
    return '''
import openai


async def swallowing(sample, *, base_url, api_key, model):
    """Two calls; a failed second call is swallowed and its text returned as the answer."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(sample.prompt)
    first = await client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    try:
        # a conversation that does not extend the first: a new segment, rendered afresh
        second = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": sample.extra_info["second"]}], max_tokens=8)
    except openai.APIStatusError as exc:
        return f"Error: {exc.status_code} {exc.message}"
    return second.choices[0].message.content or first.choices[0].message.content


async def retrying(sample, *, base_url, api_key, model):
    """The OpenAI SDK's default retries: a 502 is retried with the same request."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key)
    out = await client.chat.completions.create(model=model, messages=list(sample.prompt), max_tokens=8)
    return out.choices[0].message.content
'''


async def _run_sdk(tmp_path, name, llm, sample):
    (tmp_path / "sdk_agents.py").write_text(_sdk_agent_source())
    agent = OpenAIAgent.load(f"{tmp_path / 'sdk_agents.py'}:{name}")
    try:
        return await EpisodeRunner(agent, llm, timeout=60).run(sample)
    finally:
        await agent.aclose()


@pytest.mark.parametrize(("case", "status", "says"), [
    ("engine", 502, "the inference server went away"),
    ("context", 400, "over max_prompt_tokens="),
])
async def test_an_sdk_agent_that_swallows_a_failed_call_fails_its_episode(
    tmp_path, tiny_tokenizer, case, status, says
) -> None:
    """The OpenAI SDK sees a 502 (the engine failed) or a 400 ``context_length_exceeded`` (a prompt over
    ``max_prompt_tokens``) on its second call and the agent swallows it: FAILED, named, never trained."""
    pytest.importorskip("openai")
    if case == "engine":
        llm = TokenLLM(ScriptedTokenEngine(_failing_after(tiny_tokenizer, 1)), tiny_tokenizer, tool_parser="hermes")
        second = "and now?"
    else:
        llm = TokenLLM(ScriptedTokenEngine(_script(tiny_tokenizer)), tiny_tokenizer, tool_parser="hermes",
                       max_prompt_tokens=200)
        second = "and now? " * 200
    sample = Sample(id="s", prompt=[{"role": "user", "content": "hi"}], extra_info={"second": second})
    episode = await _run_sdk(tmp_path, "swallowing", llm, sample)
    assert episode.status is EpisodeStatus.FAILED and episode.training is None, episode
    assert episode.error.startswith(f"the gateway failed 1 call(s): first: {status} "), episode.error
    assert says in episode.error
    (failure,) = episode.metadata["gateway_failures"]
    assert failure["status"] == status
    assert failure["code"] == ("context_length_exceeded" if case == "context" else None)
    assert episode.messages  # the first call's conversation is recorded


async def test_a_client_that_sees_no_failure_or_whose_retry_answered_trains(tmp_path, tiny_tokenizer) -> None:
    """No failure: the episode is unchanged (no gateway_failures). A 502 the SDK retried with the same
    request, answered: the failure is kept as retried and the episode trains what was sampled."""
    pytest.importorskip("openai")
    sample = Sample(id="s", prompt=[{"role": "user", "content": "hi"}])
    engine = ScriptedTokenEngine(_script(tiny_tokenizer))
    llm = TokenLLM(engine, tiny_tokenizer, tool_parser="hermes")
    episode = await _run_sdk(tmp_path, "retrying", llm, sample)
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "It is 5.", episode.error
    assert "gateway_failures" not in episode.metadata
    assert check_segments(episode.training, engine.calls) == [[0]]

    engine = ScriptedTokenEngine(_failing_after(tiny_tokenizer, 0, times=1))
    llm = TokenLLM(engine, tiny_tokenizer, tool_parser="hermes")
    episode = await _run_sdk(tmp_path, "retrying", llm, sample)
    assert episode.status is EpisodeStatus.SUCCESS and episode.final_answer == "It is 5.", episode.error
    (failure,) = episode.metadata["gateway_failures"]
    assert failure["status"] == 502 and failure["retried"] is True
    assert check_segments(episode.training, engine.calls) == [[0]]


@pytest.mark.parametrize("failed_episodes", ["keep_group_neutral", "drop_group"])
async def test_a_swallowed_failure_counts_in_its_group_as_any_failed_episode(
    tmp_path, tiny_tokenizer, failed_episodes
) -> None:
    """One member of a group of two swallows a 502: the group keeps both members (the failed one
    recorded, untrained), and the group policy acts on it as on any failed episode."""
    pytest.importorskip("openai")
    from aworld_core.worker import GroupPolicy
    from aworld_core.worker.policy import is_trainable

    answer = _script(tiny_tokenizer)
    calls: dict[str, int] = {}
    failed: list[str] = []

    def script(prompt_ids, sampling, request_id):
        calls[request_id] = calls.get(request_id, 0) + 1
        if calls[request_id] == 2 and not failed:  # the first member to make its second call
            failed.append(request_id)
            raise _EngineDown("the inference server went away")
        return answer(prompt_ids, sampling, request_id)

    llm = TokenLLM(ScriptedTokenEngine(script), tiny_tokenizer, tool_parser="hermes")
    (tmp_path / "sdk_agents.py").write_text(_sdk_agent_source())
    agent = OpenAIAgent.load(f"{tmp_path / 'sdk_agents.py'}:swallowing")
    sample = Sample(id="s", prompt=[{"role": "user", "content": "hi"}], extra_info={"second": "and now?"})
    try:
        group = await EpisodeRunner(agent, llm, timeout=60, policy=GroupPolicy(failed_episodes)).run_group(sample, 2)
    finally:
        await agent.aclose()
    assert len(group.episodes) == 2
    statuses = {e.id: e.status for e in group.episodes}
    assert statuses[failed[0]] is EpisodeStatus.FAILED
    assert [s for i, s in statuses.items() if i != failed[0]] == [EpisodeStatus.SUCCESS]
    if failed_episodes == "drop_group":
        assert group.dropped and "1 of 2 members failed (failed)" in group.dropped
        assert not any(is_trainable(e, needs_reward=False) for e in group.episodes)
    else:
        assert group.dropped is None
        assert [is_trainable(e, needs_reward=False) for e in group.episodes] == [
            e.id != failed[0] for e in group.episodes
        ]


def test_eval_refuses_it_clearly_exit_2(tmp_path, capsys) -> None:
    """``aworld --eval`` and ``AgentTrainer.evaluate`` build agents with the kit, which answers an
    OpenAIAgent; it runs only in training, so both refuse it with the factory's message (exit 2)."""
    import json

    import yaml

    from aworld_core.run import main

    (tmp_path / "test.jsonl").write_text(json.dumps({"prompt": "2+3?", "answer": "5"}) + "\n")
    job = {"name": "openai-eval", "agent": {"openai_agent": SMOLAGENTS}, "reward": {"name": "exact_answer"},
           "test_dataset": {"path": "test.jsonl"}, "output_dir": str(tmp_path / "out")}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    code = main(["--config", str(tmp_path / "job.yaml"), "--eval"])
    err = capsys.readouterr().err
    assert code == 2 and "runs only in training" in err and "llm=None" not in err, err

    from aworld_core import AgentTrainer

    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    trainer = AgentTrainer(config={**job, "train_dataset": {"path": str(tmp_path / "train.jsonl")},
                                   "test_dataset": {"path": str(tmp_path / "test.jsonl")}})  # it trains
    with pytest.raises(UsageError, match="runs only in training"):
        trainer.evaluate()


async def test_the_rollout_needs_a_token_client() -> None:
    from aworld_core.worker.openai_agent import run_openai_episode

    agent = OpenAIAgent(SMOLAGENTS, lambda sample, **endpoint: None)
    for llm in (None, object()):
        with pytest.raises(UsageError, match="TokenLLM.*runs only in training"):
            await run_openai_episode(agent, Sample(id="s", prompt=[{"role": "user", "content": "x"}]), llm, {})


async def test_a_held_out_episode_samples_with_the_contexts_settings_under_the_requests(
    tmp_path, tiny_tokenizer
) -> None:
    """A backend's validation settings (``ctx.sampling``: verl's greedy ``val_kwargs``) are the
    session's defaults in the gateway: a request that sets no temperature is sampled greedy, not at the
    training temperature; a request's own field wins."""
    pytest.importorskip("openai")
    from aworld_core.schemas import SamplingParams

    (tmp_path / "temps.py").write_text('''
import openai


async def two_calls(sample, *, base_url, api_key, model):
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(sample.prompt)
    first = await client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    out = await client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0.7)
    return out.choices[0].message.content
''')
    seen: list[SamplingParams] = []
    answer = tiny_tokenizer.encode("It is 5.", add_special_tokens=False)

    def script(prompt_ids, sampling, request_id):
        seen.append(sampling)
        return answer

    llm = TokenLLM(ScriptedTokenEngine(script), tiny_tokenizer, tool_parser="hermes")
    agent = OpenAIAgent.load(f"{tmp_path / 'temps.py'}:two_calls")
    sample = Sample(id="s", prompt=[{"role": "user", "content": "hi"}])
    runner = EpisodeRunner(agent, llm, timeout=60, sampling=SamplingParams(temperature=1.0, top_p=0.9))
    try:
        held_out = await runner.run(sample, {"sampling": {"temperature": 0.0}})  # greedy validation
        trained = await runner.run(sample)
        servers = agent.gateways.servers()
        assert servers and all(not s.gateway._session_sampling for s in servers)  # finish forgot them
    finally:
        await agent.aclose()
    assert held_out.status is EpisodeStatus.SUCCESS and trained.status is EpisodeStatus.SUCCESS, held_out.error
    assert [(s.temperature, s.top_p) for s in seen] == [(0.0, 0.9), (0.7, 0.9), (1.0, 0.9), (0.7, 0.9)]
    assert all(s.max_tokens == 8 for s in seen)
