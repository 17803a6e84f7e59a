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
    assert episode.metadata["agent_style"] == "openai"
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
