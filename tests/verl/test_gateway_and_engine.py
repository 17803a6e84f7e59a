"""The seed's endpoint helpers (served by the core gateway over verl's server manager), and the
engine's mapping between the core's sampling settings and verl's."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import numpy as np
from verl_testkit import PROMPT_LENGTH as P

from aworld_core.hookspecs import hookimpl
from aworld_core.schemas import RolloutContext


def _batch(rows: list[dict[str, Any]]) -> Any:
    from verl.protocol import DataProto

    columns = {}
    for key in rows[0]:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row[key] for row in rows]
        columns[key] = column
    return DataProto.from_dict(non_tensors=columns)


@pytest.mark.slow
async def test_seed_style_subclass_and_the_gateway(make_worker, verl_tokenizer, close_states):
    import aiohttp
    from verl_testkit import StubServer

    entry = {"name": "seed_style", "_target_": "verl_testkit.SeedStyleLoop"}
    server = StubServer(verl_tokenizer, script=["Paris."])
    worker = make_worker([entry], server)
    row = {
        "raw_prompt": [{"role": "user", "content": "Capital of France?"}],
        "agent_name": "seed_style",
        "data_source": "unit",
        "reward_model": {"ground_truth": "Paris"},
        "extra_info": {"index": 0},
        "index": 0,
    }
    out = await worker.generate_sequences(_batch([row]))
    assert out.non_tensor_batch["status"][0] == "success"
    (call,) = server.calls
    length = int(out.batch["attention_mask"][0, P:].sum())
    assert out.batch["responses"][0, :length].tolist() == call.token_ids

    # the agent's endpoint is the gateway over the same policy: an OpenAI request sent there is
    # sampled by verl's server, and its tokens are recorded in the session it names
    from aworld_verl.worker_state import _states

    (state,) = [s for s in _states.states() if s.engine.server_manager is server]
    base_url = state.gateway.base_url
    assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
    body = {"model": state.model_name, "messages": [{"role": "user", "content": "Again?"}], "temperature": 0.5}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/chat/completions", json=body, headers={"X-Session-Id": "ep-direct"}) as resp:
            assert resp.status == 200, await resp.text()
            completion = await resp.json()
        async with http.get(f"{base_url}/models") as resp:
            models = await resp.json()
    assert completion["choices"][0]["message"]["content"] == "Paris."
    assert [m["id"] for m in models["data"]] == [state.model_name]
    direct = server.calls[-1]
    assert direct.request_id == "ep-direct" and direct.sampling_params["temperature"] == 0.5
    view = state.llm.finish_session("ep-direct")
    assert view.response_ids == direct.token_ids and view.response_mask == [1] * len(direct.token_ids)


class SeedFramework:
    """The seed's own agent loop as a rollout plugin: it runs the seed-style agent against the
    endpoint ``build_agents`` gave it (``get_llm_server_address()``, the shared gateway) with the
    episode in ``X-Session-Id``, turns an LLM error into the answer (as AWorld's runner does) and
    leaves the training view to the kit."""

    @hookimpl
    def rollout(self, agent, sample, llm, context):
        if getattr(agent, "name", None) != "seed_agent":
            return None
        return self._run(agent, sample, RolloutContext.of(context))

    async def _run(self, agent: Any, sample: Any, ctx: Any) -> Any:
        from aworld_core.errors import LLMError
        from aworld_core.llm.openai_http import OpenAICompatibleLLM
        from aworld_core.schemas import Episode, EpisodeStatus

        episode = Episode(id=ctx.episode_id, task_id=ctx.task_id or sample.id, agent_id=agent.name)
        client = OpenAICompatibleLLM(agent.conf.llm_base_url, agent.conf.llm_model_name, "unused", retries=0)
        messages = list(sample.prompt)
        try:
            for follow_up in ("Are you sure?", None):
                answer = await client.chat(messages, session_id=ctx.episode_id)
                messages.append(answer.message())
                episode.final_answer = answer.content
                if follow_up:
                    messages.append({"role": "user", "content": follow_up})
        except LLMError as exc:
            episode.final_answer = f"Error: {exc}"  # swallowed
        finally:
            await client.aclose()
        episode.messages = messages
        episode.finish(EpisodeStatus.SUCCESS)
        return episode


@pytest.fixture
def seed_framework():
    from aworld_core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    manager.register(SeedFramework(), name="seed_framework_test")
    yield
    manager.pm.unregister(name="seed_framework_test")


@pytest.mark.slow
async def test_a_seed_style_agent_swallowing_a_502_of_the_gateway_fails_untrained(
    make_worker, verl_tokenizer, close_states, seed_framework
):
    """A GRPO group of two seed-style episodes that call the shared gateway over HTTP; one member's
    second call fails on the rollout server (the gateway answers 5xx) and the agent swallows it.
    The failed member keeps its place as a fully masked row with the group's neutral reward (as any
    failed episode on verl), the other trains; the gateway's record is consumed."""
    from verl_testkit import StubServer, verl_row

    entry = {"name": "seed_style", "_target_": "verl_testkit.SeedStyleLoop",
             "reward": "verl_testkit:exact_answer_reward"}

    def second_call_of_member_1(call: Any) -> bool:
        return call.member == 1 and sum(c.request_id == call.request_id for c in server.calls) == 2

    server = StubServer(verl_tokenizer, script=["It is 5."], fail_when=second_call_of_member_1)
    worker = make_worker([entry], server, {"actor_rollout_ref.rollout.n": 2})
    rows = [verl_row("seed_style", "2+3?", 0) | {"uid": "prompt-seed"} for _ in range(2)]
    out = await worker.generate_sequences(_batch(rows))

    status = list(out.non_tensor_batch["status"])
    assert sorted(status) == ["failed", "success"], (status, list(out.non_tensor_batch["error"]))
    hole, kept = status.index("failed"), status.index("success")
    error = out.non_tensor_batch["error"][hole]
    assert error.startswith("the gateway failed 1 call(s): first: 502 ") and "rollout server error" in error, error
    assert int(out.batch["response_mask"][hole].sum()) == 0  # nothing of it trains
    assert int(out.batch["response_mask"][kept].sum()) > 0
    scores = out.batch["rm_scores"].sum(dim=1).tolist()
    assert scores[kept] == pytest.approx(1.0) and scores[hole] == pytest.approx(1.0)  # neutral: the survivors' mean
    assert {f["group"] for f in out.non_tensor_batch["aworld"]} == {"prompt-seed"}  # the group is whole
    # the episodes reached the rollout server through the gateway (X-Session-Id), two calls each
    assert sorted(c.member for c in server.calls) == [0, 0, 1, 1]
    from aworld_verl.worker_state import _states

    (state,) = [s for s in _states.states() if s.engine.server_manager is server]
    assert state.llm.session_ids() == []
    assert all(state.gateway.gateway.failures(c.request_id) == [] for c in server.calls)


def test_sampling_from_verl_and_back():
    from aworld_core.schemas import SamplingParams
    from aworld_verl.sampling import sampling_from_verl, verl_sampling_params

    verl = {"temperature": np.float64(0.6), "top_p": 0.95, "top_k": -1, "repetition_penalty": 1.1, "logprobs": False}
    sampling = sampling_from_verl(verl)
    assert sampling.temperature == 0.6 and sampling.top_k == -1
    assert sampling.extra == {"repetition_penalty": 1.1}
    # the agent's own settings lose to verl's, its max_tokens stays
    merged = SamplingParams(temperature=0.2, max_tokens=64).merged(sampling)
    params = verl_sampling_params(merged.model_copy(update={"extra": {**merged.extra, "stop_token_ids": [7]}}))
    assert params == {
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": -1,
        "max_tokens": 64,
        "repetition_penalty": 1.1,
        "stop_token_ids": [7],
        "logprobs": True,  # always: RL needs the sampling logprobs
    }
    assert sampling_from_verl({"max_new_tokens": 12, "stop": "END"}).model_dump(exclude_defaults=True) == {
        "max_tokens": 12,
        "stop": ["END"],
    }


async def test_engine_maps_verl_token_output():
    from verl.workers.rollout.replica import TokenOutput as VerlOutput

    from aworld_core.errors import LLMError
    from aworld_core.schemas import SamplingParams
    from aworld_core.tokens.engine import ABORT, LENGTH, STOP
    from aworld_verl.engine import VerlTokenEngine

    class Manager:
        def __init__(self, outputs: list[Any]):
            self.outputs, self.seen = outputs, []

        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            self.seen.append((request_id, prompt_ids, sampling_params, kwargs))
            return self.outputs.pop(0)

    manager = Manager(
        [
            VerlOutput(token_ids=[4, 5, 9], log_probs=[-0.1, -0.2, -0.3], stop_reason="completed",
                       num_preempted=1, extra_fields={"global_steps": 2}),
            VerlOutput(token_ids=[4, 5], log_probs=[-0.1, -0.2], stop_reason="completed",
                       extra_fields={"global_steps": 4}),
            VerlOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields={}),
            VerlOutput(token_ids=[4], log_probs=[-0.5], stop_reason="aborted", extra_fields={"global_steps": 5}),
        ]
    )
    engine = VerlTokenEngine(manager)
    engine.begin("ep-1", priority=5)
    sampling = SamplingParams(max_tokens=2, extra={"stop_token_ids": [9]})
    first = await engine.generate([1, 2], sampling.model_copy(update={"max_tokens": 8}), request_id="ep-1")
    assert (first.token_ids, first.logprobs, first.stop_reason, first.version) == ([4, 5, 9], [-0.1, -0.2, -0.3], STOP, 2)
    second = await engine.generate([1, 2, 4, 5, 9, 3], sampling, request_id="ep-1:1")
    assert second.stop_reason == LENGTH  # "completed" at max_tokens without a stop id
    third = await engine.generate([1], sampling, request_id="ep-2")
    # vLLM's answer to a request aborted before its first token: nothing sampled, zero logprobs
    # (not "unknown"), so TokenLLM resumes it
    assert (third.token_ids, third.logprobs, third.stop_reason) == ([], [], ABORT)
    partial = await engine.generate([1], sampling, request_id="ep-3")
    assert (partial.token_ids, partial.logprobs, partial.stop_reason, partial.version) == ([4], [-0.5], ABORT, 5)
    assert manager.seen[0][0] == "ep-1" and manager.seen[0][3] == {"priority": 5}
    assert manager.seen[1][3] == {"priority": 5}  # the member session belongs to the same episode
    assert manager.seen[2][3] == {}
    stats = engine.end("ep-1")
    assert (stats.calls, stats.num_preempted, stats.min_global_steps, stats.max_global_steps) == (2, 1, 2, 4)

    with pytest.raises(LLMError, match="no generate"):
        VerlTokenEngine(object())
