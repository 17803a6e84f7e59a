"""How the kit's all-failed stop (``rollout.max_failed_steps``) ends an AReaL 1.0.4 run.

AReaL turns every exception from ``arun_episode`` into a rejected prompt (``WorkflowExecutor``'s task
wrapper catches ``Exception``), so a workflow that raises would leave AReaL consuming the dataset
forever. The one error path to AReaL's callers is a ``BatchTaskDispatcher``'s fail-fast slot: once
``_set_thread_exception(exc)`` holds an error, its threads exit and its ``submit`` / ``wait`` /
``wait_for_task`` (so ``rollout_batch`` and ``prepare_batch``) raise
``RuntimeError("Background thread failed: ...") from exc``. The slot is private, so it is looked up
defensively; tests/areal/test_dispatch.py has the canaries.

* **SPMD** (the trainer holds the ``RemoteInfEngine``): the workflow calls :func:`stop_areal` on
  its engine, and the trainer's own ``prepare_batch`` raises the kit's error.
* **Single controller** (``PPOTrainer`` with a scheduler, AReaL's default): the workflow runs in an
  RPC worker, and the trainer holds a ``RolloutController`` whose task wrapper catches its workers'
  RPC errors (``EngineCallError``) as rejections. So the worker stops its engine as above and
  answers the controller's tasks that wait on it (:func:`stop_areal` sends their completion
  callbacks), the controller asks each for its result and gets the kit's error, and
  :func:`watch_rollouts` (installed by ``aworld_areal.train``) sees that error in the controller's
  engine calls and stops the controller's own dispatcher with it: ``PPOTrainer``'s
  ``prepare_batch`` raises and training ends with the first error.
"""

from __future__ import annotations

from typing import Any

from areal.utils import logging as areal_logging

from aworld_core.worker import stop_error_in

# the workflow's logger too. AReaL's getLogger resets the root logger (and its manager) on every
# call, so it is called once: a stdlib logger made before would be orphaned; this one also reaches
# AReaL's log files
logger = areal_logging.getLogger("AworldWorkflow")

# how long the group that stopped AReaL waits before raising: AReaL's consumer thread (polling every
# 50 ms) sees the stop and exits first, so this group's rejection is never collected and the caller's
# wait raises instead of returning it (destroying the engine cancels the wait)
STOP_GRACE_S = 30.0


def _dispatcher_of(owner: Any) -> Any:
    """The ``BatchTaskDispatcher`` of an engine (``workflow_executor.dispatcher``) or a
    ``RolloutController`` (``dispatcher``)."""
    executor = getattr(owner, "workflow_executor", None)
    return executor.dispatcher if executor is not None else owner.dispatcher


def stop_areal(engine: Any, exc: BaseException) -> bool:
    """Make AReaL's rollout calls on ``engine`` (a ``RemoteInfEngine`` or a ``RolloutController``)
    raise ``exc``; whether that was possible. Tasks a controller waits on get their completion
    callback, so the controller asks for their results and meets ``exc``. Without the slot
    (another AReaL, an engine without a dispatcher) this logs why training goes on and returns
    False: the workflow then raises for every later prompt, which AReaL rejects."""
    try:
        dispatcher = _dispatcher_of(engine)
        set_exception = dispatcher._set_thread_exception
        if not callable(set_exception):
            raise TypeError(f"_set_thread_exception is {type(set_exception).__name__}, not a method")
        set_exception(exc)
    except Exception as missing:  # any failure here means: AReaL cannot be stopped
        logger.error(
            "rollout.max_failed_steps tripped but AReaL cannot be stopped from the workflow on engine %s "
            "(engine.workflow_executor.dispatcher._set_thread_exception, AReaL 1.0.4's fail-fast slot, "
            "is unusable: %s: %s); training goes on and AReaL rejects every further prompt with: %s. "
            "Stop the job yourself",
            type(engine).__name__, type(missing).__name__, missing, exc,
        )
        return False
    logger.error("stopped AReaL's rollouts on engine %s: its submit/wait/prepare_batch now raise: %s",
                 type(engine).__name__, exc)
    _answer_waiting_controllers(dispatcher)
    return True


def _answer_waiting_controllers(dispatcher: Any) -> None:
    """Send the completion callback of every task a controller registered (single-controller
    mode; none in SPMD): the stopped dispatcher collects no more results, so without it the
    controller would wait ``request_timeout`` for each, and never ask for the error."""
    callbacks = getattr(dispatcher, "_task_callbacks", None)
    send = getattr(dispatcher, "_send_callback", None)
    if not isinstance(callbacks, dict) or not callable(send):
        if callbacks:
            logger.error("AReaL's dispatcher has no _send_callback: its controller learns of the stop only "
                         "from its next submit to this worker")
        return
    for task_id in list(callbacks):
        address = callbacks.pop(task_id, None)
        if address:
            send(address, task_id, None)


class _WatchedScheduler:
    """A controller's scheduler whose engine calls stop the controller when a worker answers with
    the kit's all-failed error; everything else is the scheduler's own."""

    def __init__(self, scheduler: Any, controller: Any):
        self._scheduler = scheduler
        self._controller = controller

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scheduler, name)

    async def async_call_engine(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._scheduler.async_call_engine(*args, **kwargs)
        except Exception as exc:  # AReaL's EngineCallError carries the worker's error as text
            error = stop_error_in(str(exc))
            if error is not None:
                stop_areal(self._controller, error)
            raise


def watch_rollouts(trainer: Any) -> list[str]:
    """Single-controller mode: make ``trainer``'s ``RolloutController``s (``rollout``,
    ``eval_rollout``) stop with the kit's error (see the module docstring). Returns the watched
    attributes; an SPMD engine needs nothing (the workflow stops it), another controller is
    logged as unwatched."""
    watched = []
    for name in ("rollout", "eval_rollout"):
        controller = getattr(trainer, name, None)
        if controller is None or hasattr(controller, "workflow_executor"):
            continue  # none, or an engine in this process: stop_areal reaches it directly
        scheduler = getattr(controller, "scheduler", None)
        if scheduler is None or not hasattr(scheduler, "async_call_engine") or not hasattr(controller, "dispatcher"):
            logger.error("rollout.max_failed_steps cannot stop %s (%s): it has no scheduler.async_call_engine and "
                         "dispatcher to watch; its workers stop, training goes on", name, type(controller).__name__)
            continue
        if not isinstance(scheduler, _WatchedScheduler):
            controller.scheduler = _WatchedScheduler(scheduler, controller)
        watched.append(name)
    return watched
