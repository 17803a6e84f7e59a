"""What one verl agent-loop worker shares across the episodes it runs.

verl instantiates an agent loop per sample (``hydra.utils.instantiate`` in
``AgentLoopWorker._run_agent_loop``), so anything built once per worker lives here, keyed by the
worker's server manager, event loop and token settings: the token-level LLM (the kit's
``build_token_llm`` over ``VerlTokenEngine``), the OpenAI-compatible gateway over it (started on
first use), the kit's ``EpisodeRunner`` per loop configuration (its agent built once: agents hold
no per-episode state), the kit's group ``Rendezvous`` and its ``StepRecorder`` (episode counts, a
line per untrained episode, a summary every ``SUMMARY_EVERY``). The states live in a kit
``WorkerCache``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aworld_core.worker import Rendezvous, StepRecorder, WorkerCache
from aworld_verl.engine import VerlTokenEngine

logger = logging.getLogger(__name__)

SUMMARY_EVERY = 50  # log this worker's episode counts every N episodes


def _recorder() -> StepRecorder:
    # the trainer counts steps (aworld_verl.sampler): a worker only tallies and logs
    return StepRecorder(logger, summary_every=SUMMARY_EVERY, label="aworld-verl worker")


@dataclass
class WorkerState:
    engine: VerlTokenEngine
    llm: Any  # aworld_core.tokens.llm.TokenLLM
    model_name: str
    loop: Any = None  # the event loop it serves (ids of closed loops get reused)
    gateway: Any = None  # aworld_core.gateway.GatewayServer, once started
    runners: dict[Any, Any] = field(default_factory=dict)  # loop configuration -> EpisodeRunner
    groups: Rendezvous = field(default_factory=Rendezvous)
    outcomes: StepRecorder = field(default_factory=_recorder)
    gateway_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    runner_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def gateway_server(self) -> Any:
        """The gateway over ``llm`` on 127.0.0.1, served by this event loop (started once)."""
        async with self.gateway_lock:
            if self.gateway is None:
                from aworld_core.gateway import Gateway, GatewayServer

                server = GatewayServer(Gateway(self.llm, model_name=self.model_name))
                self.gateway = await server.astart()
            return self.gateway


def _close_state(state: WorkerState) -> None:
    """Stop the gateway of a state that is replaced (or left at exit): on its own loop while that
    loop runs, else by closing its socket (a closed loop serves nothing)."""
    if state.gateway is None:
        return
    loop = state.loop
    if loop is not None and loop.is_running() and not loop.is_closed():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            _stopping.add(task := loop.create_task(state.gateway.astop()))
            task.add_done_callback(_stopping.discard)
        else:
            asyncio.run_coroutine_threadsafe(state.gateway.astop(), loop)
    else:
        state.gateway.stop(timeout_s=0)


_stopping: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to its tasks
_states: WorkerCache[WorkerState] = WorkerCache(close=_close_state)


def worker_state(
    server_manager: Any,
    *,
    tokenizer: Any,
    job: Any,
    tool_parser: str | None,
    chat_template: str | None,
    chat_template_kwargs: dict[str, Any] | None,
    max_prompt_tokens: int | None,
    max_response_tokens: int | None,
    model_name: str,
) -> WorkerState:
    """The state of the worker that owns ``server_manager`` on the running loop (made on first use).

    The token client follows the kit's one rule (``build_token_llm``): ``chat_template`` /
    ``tool_parser`` when given, else the job's ``model`` section, else the tokenizer's template
    and ``hermes``.
    """
    from aworld_core.worker import build_token_llm

    loop = asyncio.get_running_loop()
    key = (
        id(server_manager),
        id(loop),
        id(job),  # the kit's load_job keeps each job object for the process's life
        tool_parser,
        chat_template,
        repr(sorted((chat_template_kwargs or {}).items())),
        max_prompt_tokens,
        max_response_tokens,
    )

    def build() -> WorkerState:
        engine = VerlTokenEngine(server_manager)
        llm = build_token_llm(
            engine,
            tokenizer,
            job,
            chat_template=chat_template,
            tool_parser=tool_parser,
            max_response_tokens=max_response_tokens,
            max_prompt_tokens=max_prompt_tokens,
            model_name=model_name,
            chat_template_kwargs=chat_template_kwargs or None,
        )
        return WorkerState(engine=engine, llm=llm, model_name=model_name, loop=loop)

    return _states.get(key, build, valid=lambda s: s.engine.server_manager is server_manager and s.loop is loop)


def episode_counts() -> dict[str, int]:
    """Episodes by outcome across this process's workers (logged by the workers; the trainer's
    per-step counts come from ``aworld_verl.sampler``)."""
    total: Counter[str] = Counter()
    for state in _states.states():
        total.update(state.outcomes.snapshot())
    return dict(total)


async def close_worker_states() -> None:
    """Stop the gateways this process started on the running loop (tests; verl workers just exit)."""
    loop = asyncio.get_running_loop()
    for state in _states.pop(lambda _key, state: state.loop is loop):
        if state.gateway is not None:
            await state.gateway.astop()
        for agent in {id(r.agent): r.agent for r in state.runners.values()}.values():
            closer = getattr(agent, "aclose", None)
            if closer is not None:
                await closer()
