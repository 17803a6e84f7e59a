"""``AworldWorkflow`` through AReaL's real dispatch: ``RemoteInfEngine.submit`` resolves the workflow
from its import path and kwargs for every prompt (``_resolve_workflow``), its ``WorkflowExecutor``
runs it on its own thread and event loop, and ``agenerate`` posts to an SGLang-shaped server
(``areal_sglang_server``) over HTTP. The group rows then go through AReaL's own ``batched_call`` and
``Normalization``, as the PPO actor applies ``actor.reward_norm``."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import pytest
import torch
from areal.api.cli_args import NormConfig
from areal.api.workflow_api import RolloutWorkflow
from areal.utils import stats_tracker
from areal.utils.data import Normalization, batched_call, concat_padded_tensors
from areal_sglang_server import areal_engine, submit_all
from areal_tool_model import QUESTION, job_dict

from aworld_areal import workflow as workflow_module
from aworld_areal.stopping import stop_areal
from aworld_areal.workflow import AworldWorkflow, close_workflow_states, workflow_states
from aworld_core.errors import AworldError
from aworld_core.hookspecs import hookimpl
from aworld_core.plugins import get_plugin_manager
from aworld_core.schemas import Sample
from aworld_core.worker.outcomes import MCP_UNREACHABLE

pytest_plugins = ["areal_fixtures"]  # the sglang_server and real_engine fixtures

HERE = Path(__file__).resolve().parent
REWARDS = HERE / "areal_rewards.py"
OPENAI_AGENT = HERE / "areal_openai_agent.py"
GCONFIG = {"greedy": True, "max_new_tokens": 48, "max_tokens": 2048}


@pytest.fixture(autouse=True)
def fresh_states():
    close_workflow_states()
    yield
    close_workflow_states()


class Collect(logging.Handler):
    """Keeps the messages a logger emits."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def kwargs_for(model_dir, job: dict, n: int = 1, **options) -> dict:
    """What ``train.workflow_kwargs`` hands AReaL: JSON only."""
    return {"job": json.dumps(job), "gconfig": {**GCONFIG, "n_samples": n}, "tokenizer": str(model_dir),
            "reward_processes": 0, **options}


def row(sample_id: str, rewards: list) -> dict:
    sample = Sample(id=sample_id, prompt=[{"role": "user", "content": QUESTION}], ground_truth="5",
                    extra_info={"rewards": rewards})
    return {"aworld_sample": sample.model_dump_json()}


def group_norm(rewards: list[float]) -> list[float]:
    """AReaL's group normalization of one group on its own."""
    cfg = NormConfig(mean_level="group", std_level="group", group_size=len(rewards))
    return Normalization(cfg)(torch.tensor(rewards, dtype=torch.float32)).tolist()


@pytest.mark.parametrize("policy", ["keep_group_neutral", "drop_group"])
def test_a_failed_member_never_shifts_the_groups_areal_normalizes(tool_model_dir, mcp_server, real_engine, policy):
    """Issue 15: rewards [1, 1, x, 0 | 10, 10, 0, 0], member 2 of the first group failed. AReaL 1.0.4's
    GroupedRolloutWorkflow keeps 7 rows and Normalization's fixed stride mixes the groups."""
    job = job_dict(tool_model_dir, mcp_server, reward={"name": f"{REWARDS}:scripted", "trajectory_aware": True},
                   rollout={"episode_timeout_s": 60, "failed_episodes": policy})
    stats_tracker.get("rollout").export(reset=True)
    first, second = submit_all(real_engine, [row("a", [1, 1, None, 0]), row("b", [10, 10, 0, 0])],
                               kwargs_for(tool_model_dir, job, n=4))
    assert second is not None and second["input_ids"].shape[0] == 4
    config = NormConfig(mean_level="group", std_level="group", group_size=4)
    if policy == "drop_group":
        assert first is None  # rejected whole: no partial group reaches AReaL
        normalized = batched_call(lambda b: Normalization(config)(b["rewards"]), [second], unpack=False)
        assert normalized.tolist() == pytest.approx(group_norm([10, 10, 0, 0]), abs=1e-4)
        (state,) = workflow_states()
        assert state.rejected == {"reward_failed": 1, "group_dropped": 3} and state.groups_dropped == 1
        return

    assert first["input_ids"].shape[0] == 4 and first["rewards"].tolist() == pytest.approx([1, 1, 2 / 3, 0])
    failed = first["loss_mask"][2]
    assert failed.sum() == 0 and first["attention_mask"][2].sum() == 1  # kept in place, trains nothing
    assert all(first["loss_mask"][i].sum() > 0 for i in (0, 1, 3))
    normalized = batched_call(lambda b: Normalization(config)(b["rewards"]), [first, second], unpack=False).tolist()
    assert normalized[:4] == pytest.approx(group_norm([1, 1, 2 / 3, 0]), abs=1e-4)
    assert normalized[2] == pytest.approx(0.0, abs=1e-6)  # the neutral member: advantage 0
    assert normalized[4:] == pytest.approx(group_norm([10, 10, 0, 0]), abs=1e-4)  # the next group untouched

    # what AReaL's GroupedRolloutWorkflow would have handed the actor: the survivors only
    survivors = [{k: v[[0, 1, 3]] for k, v in first.items()}, second]
    shifted = batched_call(lambda b: Normalization(config)(b["rewards"]), survivors, unpack=False).tolist()
    assert shifted[3:] != pytest.approx(group_norm([10, 10, 0, 0]), abs=1e-2)

    stats = stats_tracker.get("rollout").export(reset=True)
    assert stats["rollout/aworld/groups"] == 2 and stats["rollout/aworld/episodes"] == 8
    assert stats["rollout/aworld/trained"] == 7 and stats["rollout/aworld/untrained/reward_failed"] == 1
    assert stats["rollout/aworld/accepted"] == 1.0


class CountingPlugin:
    def __init__(self) -> None:
        self.builds = 0

    @hookimpl(tryfirst=True)
    def build_agents(self, job, settings):
        self.builds += 1
        return None  # the built-in builds it


def test_prompts_share_one_state_built_once(tool_model_dir, mcp_server, real_engine, monkeypatch):
    from aworld_core.worker.build import clear_caches

    clear_caches()
    made = []
    original = AworldWorkflow.__init__

    def counting_init(self, *args, **kwargs):
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(AworldWorkflow, "__init__", counting_init)
    counter = CountingPlugin()
    manager = get_plugin_manager()
    manager.register(counter, name="count-builds")
    try:
        kwargs = kwargs_for(tool_model_dir, job_dict(tool_model_dir, mcp_server))
        results = submit_all(real_engine, [{"question": QUESTION, "answer": "5"}] * 3, kwargs)
    finally:
        manager.pm.unregister(counter)
    assert all(r is not None and r["rewards"].tolist() == [1.0] for r in results)
    assert len(made) == 3 and len({id(w) for w in made}) == 3  # AReaL built one workflow per prompt
    (state,) = workflow_states()
    assert all(w.state is state for w in made) and counter.builds == 1
    assert len({id(w.tokenizer) for w in made}) == 1  # loaded once, when the first was built
    assert state.accepted == 3 and made[0].accepted == 3  # one set of counters for the process
    assert len(state._runners) == 1  # one TokenLLM and runner for the engine


def test_openai_agents_share_one_gateway_per_loop_closed_at_shutdown(tool_model_dir, mcp_server, real_engine,
                                                                       monkeypatch):
    monkeypatch.setenv("AREAL_TEST_MCP_URL", mcp_server.url)
    job = job_dict(tool_model_dir, mcp_server, agent={"openai_agent": f"{OPENAI_AGENT}:adder_agent"})
    kwargs = kwargs_for(tool_model_dir, job, n=2)
    results = submit_all(real_engine, [{"question": QUESTION, "answer": "5"}] * 3, kwargs)
    assert all(r is not None and r["rewards"].tolist() == [1.0, 1.0] for r in results)
    (state,) = workflow_states()
    (gateway,) = state.agent.gateways.servers()  # six episodes on AReaL's rollout loop: one gateway
    assert state.accepted == 6
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5):
        pass

    close_workflow_states()  # also registered with atexit
    assert workflow_states() == [] and state.agent.gateways.servers() == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", gateway.port), timeout=5).close()


def test_the_first_state_registers_the_shutdown_with_atexit(tool_model_dir, mcp_server, monkeypatch):
    import atexit

    registered = []
    monkeypatch.setattr(workflow_module._STATES, "exit_registered", False)
    monkeypatch.setattr(atexit, "register", registered.append)
    AworldWorkflow(job_dict(tool_model_dir, mcp_server), GCONFIG, str(tool_model_dir))
    AworldWorkflow(job_dict(tool_model_dir, mcp_server), GCONFIG, str(tool_model_dir))
    assert registered == [close_workflow_states]


def test_submitting_with_areals_group_size_fails_the_task_naming_the_fix(tool_model_dir, mcp_server, real_engine):
    handler = Collect()
    real_engine.logger.addHandler(handler)
    try:
        kwargs = kwargs_for(tool_model_dir, job_dict(tool_model_dir, mcp_server), n=2)
        assert submit_all(real_engine, [{"question": QUESTION, "answer": "5"}], kwargs, group_size=2) == [None]
    finally:
        real_engine.logger.removeHandler(handler)
    assert any("Submit it with group_size=1" in m for m in handler.messages), handler.messages


def test_rows_through_areal_keep_the_exact_sampled_tokens(tool_model_dir, mcp_server, real_engine, sglang_server):
    before = len(sglang_server.requests)
    (out,) = submit_all(real_engine, [{"question": QUESTION, "answer": "5"}],
                        kwargs_for(tool_model_dir, job_dict(tool_model_dir, mcp_server)))
    requests = sglang_server.requests[before:]
    assert len(requests) == 2  # the tool call, then the answer, as one AReaL session (rid)
    ids, mask = out["input_ids"][0].tolist(), out["loss_mask"][0].tolist()
    assert ids[: len(requests[1]["input_ids"])] == requests[1]["input_ids"]
    assert ids[: len(requests[0]["input_ids"])] == requests[0]["input_ids"]
    assert sum(mask) > 0 and mask[: len(requests[0]["input_ids"])] == [0] * len(requests[0]["input_ids"])
    assert out["versions"][0][torch.tensor(mask, dtype=torch.bool)].tolist() == [0] * sum(mask)
    assert concat_padded_tensors([out])["input_ids"].shape == out["input_ids"].shape


# -- rollout.max_failed_steps stops AReaL itself ----------------------------------------------------


class Idle(RolloutWorkflow):
    """A workflow that never runs (the canary only submits after the stop)."""

    async def arun_episode(self, engine, data):  # pragma: no cover - never reached
        return None


def rows_loader(n: int):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader([{"question": QUESTION, "answer": "5"}] * n, batch_size=1, collate_fn=list)


def cause_of(info: pytest.ExceptionInfo) -> BaseException | None:
    return info.value.__cause__


def test_canary_areals_fail_fast_slot_makes_its_own_calls_raise(sglang_server):
    """CANARY for AReaL's private API that ``stop_areal`` relies on (AReaL 1.0.4,
    areal/infra/workflow_executor.py): ``RemoteInfEngine.workflow_executor.dispatcher`` is a
    ``BatchTaskDispatcher`` whose ``_set_thread_exception(exc)`` makes ``submit``, ``wait``,
    ``rollout_batch`` and ``prepare_batch`` raise ``RuntimeError(...) from exc``. If this fails after an
    AReaL upgrade, rollout.max_failed_steps no longer stops training under AReaL: find the new
    fail-fast path and fix ``aworld_areal.stopping.stop_areal``."""
    engine = areal_engine(sglang_server)
    try:
        dispatcher = engine.workflow_executor.dispatcher
        assert callable(getattr(dispatcher, "_set_thread_exception", None)), (
            "AReaL changed: BatchTaskDispatcher._set_thread_exception is gone; stop_areal cannot stop training")
        assert dispatcher._thread_exception is None
        first = AworldError("canary: first error; raise rollout.max_failed_steps")
        assert stop_areal(engine, first) is True
        assert stop_areal(engine, AworldError("later")) is True  # AReaL keeps the first
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="canary: first error") as info:
            engine.wait(1, timeout=120)
        assert cause_of(info) is first and time.monotonic() - start < 60  # raised, not timed out
        with pytest.raises(RuntimeError, match="canary") as info:
            engine.submit({"question": QUESTION}, workflow=Idle())
        assert cause_of(info) is first
        with pytest.raises(RuntimeError, match="canary") as info:
            engine.rollout_batch([{"question": QUESTION}], workflow=Idle())
        assert cause_of(info) is first
        with pytest.raises(RuntimeError, match="canary") as info:
            engine.prepare_batch(rows_loader(2), workflow=Idle())
        assert cause_of(info) is first
    finally:
        engine.destroy()


def test_without_the_slot_stop_areal_logs_why_training_goes_on():
    handler = Collect()
    workflow_module.logger.addHandler(handler)
    try:
        assert stop_areal(object(), AworldError("the first error")) is False  # no workflow_executor
    finally:
        workflow_module.logger.removeHandler(handler)
    (message,) = handler.messages
    assert "cannot be stopped" in message and "_set_thread_exception" in message and "the first error" in message


def unreachable_job(tool_model_dir, mcp_server, port: int) -> dict:
    job = job_dict(tool_model_dir, mcp_server, rollout={"episode_timeout_s": 60, "max_failed_steps": 2})
    job["agent"]["mcp_config"] = {"mcpServers": {"calc": {
        "type": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp", "timeout": 2}}}
    return job


STOPPED = r"every episode failed in 2 consecutive training steps.*first error: episode \S+: MCPConnectionError.*rollout\.max_failed_steps"


def test_max_failed_steps_stops_areals_rollout_batch(tool_model_dir, mcp_server, sglang_server, unused_port):
    """Unreachable MCP server, ``max_failed_steps: 2``, one group per step: AReaL's own
    ``rollout_batch`` raises the kit's error on the second all-failed step and refuses every later
    prompt (before, AReaL rejected the prompt and went on)."""
    from aworld_areal.train import WORKFLOW

    kwargs = kwargs_for(tool_model_dir, unreachable_job(tool_model_dir, mcp_server, unused_port), n=2,
                        groups_per_step=1)
    engine = areal_engine(sglang_server)
    try:
        step1 = engine.rollout_batch([{"question": QUESTION, "answer": "5"}], workflow=WORKFLOW, workflow_kwargs=kwargs)
        assert all(t["loss_mask"].sum() == 0 for t in step1)  # nothing trained, not stopped yet
        (state,) = workflow_states()
        assert state.stopped is None and state.rejected == {MCP_UNREACHABLE: 2}
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=STOPPED) as info:
            engine.rollout_batch([{"question": QUESTION, "answer": "5"}], workflow=WORKFLOW, workflow_kwargs=kwargs)
        assert isinstance(cause_of(info), AworldError) and cause_of(info) is state.stopped
        assert time.monotonic() - start < workflow_module.STOP_GRACE_S  # AReaL raised, it did not wait it out
        requests = len(sglang_server.requests)
        with pytest.raises(RuntimeError, match=STOPPED):  # stopped: no later prompt runs
            engine.rollout_batch([{"question": QUESTION, "answer": "5"}], workflow=WORKFLOW, workflow_kwargs=kwargs)
        assert len(sglang_server.requests) == requests and state.rejected == {MCP_UNREACHABLE: 4}
    finally:
        engine.destroy()


def test_max_failed_steps_stops_areals_prepare_batch(tool_model_dir, mcp_server, sglang_server, unused_port):
    """The trainer's call (SPMD mode: ``PPOTrainer`` calls ``prepare_batch`` on this engine): it raises
    the kit's error instead of cycling the dataset forever."""
    from aworld_areal.train import WORKFLOW

    kwargs = kwargs_for(tool_model_dir, unreachable_job(tool_model_dir, mcp_server, unused_port), n=2,
                        groups_per_step=1)
    engine = areal_engine(sglang_server, max_concurrent_rollouts=1, consumer_batch_size=1)
    loader = rows_loader(3)
    batches = 0
    try:
        with pytest.raises(RuntimeError, match=STOPPED) as info:
            for batches in range(1, 4):  # noqa: B007 - counted for the assertion below
                engine.prepare_batch(loader, workflow=WORKFLOW, workflow_kwargs=kwargs)
        assert isinstance(cause_of(info), AworldError)
        assert batches <= 2  # at most the first all-failed step came back as a (masked) batch
        (state,) = workflow_states()
        assert state.stopped is cause_of(info) and state.outcomes.failed_steps.consecutive == 2
    finally:
        engine.destroy()
