"""``rollout.max_failed_steps`` in AReaL's single-controller mode: through AReaL 1.0.4's real
``RolloutController`` (its dispatcher, task wrapper and callback server), a real ``LocalScheduler``
that starts a real RPC worker process (``areal.infra.rpc.rpc_server``) holding a real
``RemoteSGLangEngine``, connected to the SGLang stand-in (a tiny model on CPU). Only the GPU
server launch is skipped: the controller is given the stand-in's address (``server_infos``), as
AReaL does for its eval rollout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from areal_sglang_server import areal_engine
from areal_tool_model import QUESTION, job_dict

from aworld_areal.stopping import _WatchedScheduler, stop_areal, watch_rollouts
from aworld_core.errors import AworldError
from aworld_core.worker.policy import FailedSteps, stop_error_in

pytest_plugins = ["areal_fixtures"]

LOOPBACK_WORKER = Path(__file__).resolve().parent / "loopback_rpc_worker.py"

GCONFIG = {"greedy": True, "max_new_tokens": 48, "max_tokens": 2048}
STOPPED = r"every episode failed in 2 consecutive training steps.*MCPConnectionError.*rollout\.max_failed_steps"


def unreachable_kwargs(model_dir, mcp_server, port: int) -> dict:
    job = job_dict(model_dir, mcp_server, rollout={"episode_timeout_s": 60, "max_failed_steps": 2})
    job["agent"]["mcp_config"] = {"mcpServers": {"calc": {
        "type": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp", "timeout": 2}}}
    return {"job": json.dumps(job), "gconfig": {**GCONFIG, "n_samples": 2}, "tokenizer": str(model_dir),
            "reward_processes": 0, "groups_per_step": 1}


def rows_loader(n: int):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader([{"question": QUESTION, "answer": "5"}] * n, batch_size=1, collate_fn=list)


def test_the_kit_stop_survives_being_passed_on_as_text():
    """What crosses AReaL's RPC is the worker's error as text inside an ``EngineCallError``."""
    from areal.infra.scheduler.exceptions import EngineCallError

    steps = FailedSteps(1)
    with pytest.raises(AworldError) as info:
        steps.step([])
    worker_error = RuntimeError(f"Background thread failed: {info.value}")
    rpc = EngineCallError("rollout/0", "wait_for_task", f"Engine method 'wait_for_task' failed: {worker_error}")
    found = stop_error_in(str(rpc))
    assert isinstance(found, AworldError) and str(found) == str(info.value)
    assert stop_error_in(str(EngineCallError("rollout/0", "submit", "Connection error"))) is None


def test_canary_areals_controller_seams(sglang_server):
    """CANARY for the AReaL 1.0.4 internals the single-controller stop relies on: a worker
    engine's dispatcher keeps the controllers' completion callbacks in ``_task_callbacks`` and
    sends them with ``_send_callback``; ``RolloutController`` calls its workers through
    ``self.scheduler.async_call_engine`` and has a ``dispatcher`` with the fail-fast slot; the RPC
    server passes a failed engine call's error text on (``EngineCallError``). If this fails after
    an AReaL upgrade, rollout.max_failed_steps no longer stops a single-controller run: fix
    ``aworld_areal.stopping``."""
    import inspect

    from areal.infra.controller.rollout_controller import RolloutController
    from areal.infra.rpc.guard import engine_blueprint
    from areal.infra.workflow_executor import BatchTaskDispatcher

    engine = areal_engine(sglang_server)
    try:
        dispatcher = engine.workflow_executor.dispatcher
        assert isinstance(dispatcher._task_callbacks, dict) and callable(dispatcher._send_callback)
        assert "_task_callbacks.pop(result.task_id" in inspect.getsource(BatchTaskDispatcher._fetch_loop)
    finally:
        engine.destroy()
    assert "self.scheduler.async_call_engine" in inspect.getsource(RolloutController._create_submit_callback)
    assert isinstance(RolloutController.dispatcher, property)
    assert "failed: {error_msg}" in inspect.getsource(engine_blueprint)


def test_an_unwatchable_controller_is_logged_and_an_engine_needs_no_watch():
    class V2:  # AReaL's experimental RolloutControllerV2 calls no async_call_engine
        scheduler = object()

    trainer = SimpleNamespace(rollout=SimpleNamespace(workflow_executor=object()), eval_rollout=V2())
    assert watch_rollouts(trainer) == []


@pytest.mark.slow
def test_max_failed_steps_stops_the_rollout_controller(tool_model_dir, mcp_server, sglang_server, unused_port,
                                                        tmp_path, monkeypatch):
    """An unreachable MCP server, ``max_failed_steps: 2``, one group per step, the workflow in an
    RPC worker: the controller's ``prepare_batch`` (what ``PPOTrainer.train`` calls) raises the
    kit's error (before: the controller rejected each prompt and went on forever).

    ``make test`` runs in a network namespace whose only interface is lo, where this machine's
    hostname resolves to 127.0.0.1: AReaL's ``gethostip`` then probes a route to 8.8.8.8 and
    raises "Could not determine host IP" (the test guard refuses the probe too). The scheduler and
    its worker (AReaL's own ``rpc_server``, started through ``loopback_rpc_worker.py``) are on this
    host, so both get the loopback address."""
    import areal.infra.controller.rollout_controller  # it binds gethostip by name
    import areal.infra.scheduler.local  # noqa: F401
    import areal.utils.network as network

    original = network.gethostip
    bound = [module for name, module in list(sys.modules.items())
             if name.startswith("areal") and getattr(module, "gethostip", None) is original]
    assert network in bound and len(bound) > 1, "AReaL's gethostip moved: update this test's loopback address"
    for module in bound:  # the module and every AReaL module that imported it by name
        monkeypatch.setattr(module, "gethostip", lambda *args, **kwargs: "127.0.0.1")
    from areal.api.cli_args import InferenceEngineConfig, SchedulingSpec
    from areal.api.io_struct import LocalInfServerInfo
    from areal.engine.sglang_remote import RemoteSGLangEngine
    from areal.infra.scheduler.local import LocalScheduler

    from aworld_areal.train import WORKFLOW

    (tmp_path / "name_resolve").mkdir()
    scheduler = LocalScheduler(
        gpu_devices=[0], log_dir=str(tmp_path / "logs"), startup_timeout=120, experiment_name="aworld-ctl",
        trial_name="t0", fileroot=str(tmp_path), nfs_record_root=str(tmp_path / "name_resolve"),
    )
    config = InferenceEngineConfig(
        experiment_name="aworld-ctl", trial_name="t0", fileroot=str(tmp_path), backend="sglang:d1",
        max_concurrent_rollouts=1, consumer_batch_size=1, max_head_offpolicyness=1000, request_timeout=600,
        setup_timeout=60,
        scheduling_spec=(SchedulingSpec(cpu=1, gpu=0, mem=1, cmd=f"{sys.executable} {LOOPBACK_WORKER}"),),
    )
    controller = RemoteSGLangEngine.as_controller(config, scheduler)
    try:
        controller.initialize(role="rollout", server_infos=[
            LocalInfServerInfo(host="127.0.0.1", port=sglang_server.port, process=None)])
        assert watch_rollouts(SimpleNamespace(rollout=controller, eval_rollout=None)) == ["rollout"]
        assert isinstance(controller.scheduler, _WatchedScheduler)
        kwargs = unreachable_kwargs(tool_model_dir, mcp_server, unused_port)
        loader = rows_loader(4)
        start = time.monotonic()
        batches = 0
        with pytest.raises(RuntimeError, match=STOPPED) as info:
            for batches in range(1, 5):  # noqa: B007 - counted for the assertion below
                controller.prepare_batch(loader, workflow=WORKFLOW, workflow_kwargs=kwargs)
        assert isinstance(info.value.__cause__, AworldError)
        assert batches <= 2  # at most the first all-failed step came back (masked)
        assert time.monotonic() - start < 300  # the callbacks answered: nobody waited request_timeout
        with pytest.raises(RuntimeError, match=STOPPED):  # stays stopped
            controller.prepare_batch(loader, workflow=WORKFLOW, workflow_kwargs=kwargs)
    finally:
        try:
            controller.destroy()
        finally:
            scheduler.delete_workers(None)


def test_stop_areal_on_a_controller_uses_its_dispatcher():
    """``stop_areal`` reaches a controller's dispatcher (``dispatcher``) as well as an engine's
    (``workflow_executor.dispatcher``); tested without threads on AReaL's real dispatcher class."""
    from areal.infra.workflow_executor import BatchTaskDispatcher

    class Controller:
        def __init__(self):
            self.dispatcher = BatchTaskDispatcher.__new__(BatchTaskDispatcher)
            BatchTaskDispatcher.__init__(self.dispatcher, max_queue_size=4, task_factory=lambda x: x,
                                         staleness_manager=None)

    controller = Controller()
    sent = []
    controller.dispatcher._task_callbacks[7] = "http://127.0.0.1:1/callback"
    controller.dispatcher._send_callback = lambda addr, task_id, result: sent.append((addr, task_id, result))
    error = AworldError("every episode failed in 2 consecutive training steps, so nothing can be learned")
    assert stop_areal(controller, error) is True
    assert controller.dispatcher._thread_exception is error and sent == [("http://127.0.0.1:1/callback", 7, None)]
    with pytest.raises(RuntimeError, match="Background thread failed") as info:
        controller.dispatcher._check_thread_exception()
    assert info.value.__cause__ is error
