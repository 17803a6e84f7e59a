"""Agents written against the OpenAI API, trained through the core's gateway on every backend.

``agent: {openai_agent: "module:function"}`` in the job names ``async def function(sample, *,
base_url, api_key, model) -> str | None``; a plain ``def`` (a blocking client such as smolagents)
runs in a thread, so the event loop serving the gateway stays free (a thread cannot be cancelled:
after a timeout it runs on until its next call is refused, the session being finished). The worker
kit's ``build_agent`` answers such a job with an :class:`OpenAIAgent` where it would build the
job's ``Agent``, and the core's ``rollout`` hook runs it
(:func:`run_openai_episode`), so failures, scoring, the group policy and ``on_episode_end`` are the
kit's, as for any agent, and every backend that runs the kit's ``EpisodeRunner`` over a
``TokenLLM`` trains it. Every call the function makes to ``base_url`` (the gateway's per-episode URL,
``/sessions/<episode id>/v1``) lands in that episode's token record; a client that re-serializes its
history (smolagents) or compacts it makes the episode several token-exact segments. The episode's
sampling (``RolloutContext.sampling``: a backend's validation settings, e.g. verl's greedy
``val_kwargs``) is the gateway session's default: what a request leaves unset. A call the
gateway failed on the server side (a 5xx, a prompt over the context limit:
``aworld_core.gateway.failures``) fails the episode even when the function returned normally
(smolagents swallows such an error and answers with its text): it is recorded (messages and
``metadata["gateway_failures"]`` kept), never trained.

Each :class:`OpenAIAgent` owns its :class:`Gateways` (one gateway per event loop and token client,
started on first use); the kit's agent cache closes them with the agent (``clear_caches``, at exit).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from aworld_core import maybe_await
from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, EpisodeStatus, RolloutContext, Sample, new_id

logger = logging.getLogger(__name__)

#: where the job names such an agent (the one spelling; messages name it)
SETTING = "agent.openai_agent"


def training_only(ref: str) -> UsageError:
    """The refusal for running ``agent.openai_agent`` outside training (``aworld run``, ``--eval``,
    ``AgentTrainer.evaluate``): it is served the trained policy by the kit's gateway, nothing else."""
    return UsageError(
        f"{SETTING} {ref!r} is a function written against the OpenAI API, not an "
        "Agent: it runs only in training, where the worker kit (aworld_core.worker.build_agent) serves it the "
        "trained policy through the gateway; to evaluate it, point it at an OpenAI-compatible endpoint yourself"
    )


def _token_client(llm: Any) -> bool:
    """Whether ``llm`` keeps token sessions the gateway can serve and collect (a ``TokenLLM``)."""
    return llm is not None and all(callable(getattr(llm, name, None)) for name in ("session", "finish_session"))


class OpenAIAgent:
    """The agent function (``ref``, imported as ``func``) and the gateways its episodes call."""

    def __init__(self, ref: str, func: Callable[..., Any], gateways: Gateways | None = None):
        self.ref = ref
        self.func = func
        self.gateways = gateways if gateways is not None else Gateways()

    @property
    def name(self) -> str:
        return self.ref

    @classmethod
    def load(cls, ref: str, base_dir: str | None = None) -> OpenAIAgent:
        """Import ``ref``; ``UsageError`` when it is not a function."""
        from aworld_core import import_ref

        func = import_ref(ref, base_dir)
        if not callable(func):
            raise UsageError(f"{SETTING} {ref!r} is not a function (it is {type(func).__name__}); it must be "
                             "async def f(sample, *, base_url, api_key, model) -> str | None")
        return cls(ref, func)

    @classmethod
    def from_job(cls, job: Any) -> OpenAIAgent:
        """The agent ``job.agent.openai_agent`` names."""
        ref = job.agent.openai_agent
        if not ref:
            raise UsageError(f"the job has no {SETTING}")
        return cls.load(ref, getattr(job, "base_dir", None))

    async def call(self, sample: Sample, **endpoint: Any) -> Any:
        """The function's answer: a coroutine function awaited here; a plain function (a blocking
        client such as smolagents) in a thread, so the loop that serves the gateway stays free."""
        if inspect.iscoroutinefunction(self.func):
            return await self.func(sample, **endpoint)
        return await maybe_await(await asyncio.to_thread(self.func, sample, **endpoint))

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop this agent's gateways (from any thread); a later episode starts a new one."""
        self.gateways.close(timeout_s)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """:meth:`close` from a coroutine (a gateway served by this very loop is awaited there)."""
        await asyncio.to_thread(self.close, timeout_s)

    def __repr__(self) -> str:
        return f"OpenAIAgent({self.ref!r})"


async def run_openai_episode(agent: OpenAIAgent, sample: Sample, llm: Any, context: Any) -> Episode:
    """One episode of ``agent`` through the gateway over ``llm``; failures are recorded, never raised."""
    if not _token_client(llm):  # the gateway needs its sessions (session/finish_session): a TokenLLM
        got = "None" if llm is None else f"a {type(llm).__name__}"
        raise UsageError(f"{SETTING} trains through a token client (a TokenLLM: the gateway serves the trained "
                         f"policy and collects its sessions); the rollout got llm={got}, so it runs only in training")
    ctx = RolloutContext.of(context)
    episode_id = ctx.episode_id or new_id("ep-")
    server = await agent.gateways(llm)
    # the backend's settings for this episode (validation's, e.g. verl's greedy val_kwargs) as the
    # session's defaults: the agent's client sends its own fields, which win (finish forgets them)
    server.gateway.set_session_sampling(episode_id, ctx.sampling)
    episode = Episode(id=episode_id, task_id=ctx.task_id or sample.id, agent_id=agent.ref)
    episode.metadata.update({"agent_style": "openai", **ctx.episode_metadata()})
    deadline = asyncio.timeout(ctx.timeout)
    try:
        async with deadline:
            answer = await agent.call(sample, base_url=server.session_base_url(episode_id), api_key="aworld",
                                      model=server.model_name)
    except TimeoutError as exc:
        if deadline.expired():
            episode.finish(EpisodeStatus.TIMEOUT, f"the episode exceeded its {ctx.timeout:g} s timeout")
        else:
            episode.finish(EpisodeStatus.FAILED, f"TimeoutError: {exc}")
    except Exception as exc:  # the user's agent failed: recorded, never trained
        episode.finish(EpisodeStatus.FAILED, f"{type(exc).__name__}: {exc}")
    else:
        if answer is not None and not isinstance(answer, str):
            episode.finish(
                EpisodeStatus.FAILED,
                f"{SETTING} {agent.ref!r} returned {type(answer).__name__}; it must return the final answer "
                "text (or None)",
            )
        else:
            episode.final_answer = answer
            episode.finish(EpisodeStatus.SUCCESS)
    session = llm.session(episode_id)
    episode.messages = list(session.history) if session is not None else []
    finished = server.gateway.finish(episode_id)  # the view and the calls the gateway failed
    from aworld_core.gateway.failures import settle_episode

    # the agent may have returned normally although a call failed on the server side (smolagents
    # answers with the error text): the gateway's one rule fails such an episode
    settle_episode(episode, [finished])
    if episode.status is EpisodeStatus.SUCCESS:
        episode.training = finished.view
    return episode


class Gateways:
    """The core's OpenAI-compatible gateway over a ``TokenLLM``, served on loopback by the running
    event loop (a backend's rollout loop): one per loop and client, started on first use, stopped by
    :meth:`close` (from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[tuple[int, int], tuple[asyncio.AbstractEventLoop, Any, Any, asyncio.Task[Any]]] = {}

    async def __call__(self, llm: Any) -> Any:
        from aworld_core.gateway import Gateway, GatewayServer

        loop = asyncio.get_running_loop()
        key = (id(loop), id(llm))
        with self._lock:
            entry = self._servers.get(key)
            if entry is None or entry[0] is not loop or entry[1] is not llm:
                for k in [k for k, e in self._servers.items() if e[0].is_closed()]:  # loops that ended
                    old_loop, _, old_server, _ = self._servers.pop(k)
                    stop_gateway(old_loop, old_server)
                server = GatewayServer(Gateway(llm))
                entry = self._servers[key] = (loop, llm, server, loop.create_task(server.astart()))
        try:
            return await asyncio.shield(entry[3])
        except Exception:
            with self._lock:
                if self._servers.get(key) is entry:
                    del self._servers[key]
            raise

    def servers(self) -> list[Any]:
        """The gateway servers started and not closed."""
        with self._lock:
            return [entry[2] for entry in self._servers.values()]

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop every gateway."""
        with self._lock:
            entries = list(self._servers.values())
            self._servers.clear()
        for loop, _, server, _ in entries:
            stop_gateway(loop, server, timeout_s)


def stop_gateway(loop: asyncio.AbstractEventLoop, server: Any, timeout_s: float = 10.0) -> None:
    """Stop ``server``, served by ``loop``: awaited there when the loop runs in another thread, else
    marked to exit with its socket closed (a closed loop took its serving task along)."""
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if loop.is_running() and loop is not here:
        try:
            asyncio.run_coroutine_threadsafe(server.astop(), loop).result(timeout_s)
            return
        except Exception as exc:  # a loop that does not answer: close the socket below
            logger.warning("gateway on %s did not stop within %s s: %s", server.address, timeout_s, exc)
    server.stop()
