"""The hooks of aworld-core: every point where a plugin can add or replace behaviour.

Project name ``aworld``; plugins are found through the entry-point group ``aworld``. A plugin
is a module of functions decorated with :data:`hookimpl` whose names match the specs below;
it implements only the hooks it needs.

A hook is a point where *every* plugin may add something, or where *any* plugin may replace the
default: registrations, the agent, the rollout, rewards, observers. A backend is not a hook: it is
one :class:`~aworld_core.specs.Backend` object a plugin registers, which the core looks up by name
and calls (its planner, its launcher, its SFT planner, its capabilities); no plugin is asked
"is this backend yours?".

Phases, in the order the core calls them:

1. **Registration**: ``register_backends``, ``register_environments``, ``register_rewards``,
   ``register_reward_conventions``, ``register_datasets``, ``register_commands``. Called once per
   process when the catalog is first needed (``--list``, selecting a backend, resolving a reward,
   running a plugin's command). Every plugin's answer is kept.
2. **Build**: ``build_agents``. Called by ``AgentTrainer``, the CLI and backend workers in
   other processes to get the agent (or swarm) a job trains.
3. **Launch** (not hooks): validation checks the job against the selected backend's declared
   :class:`~aworld_core.specs.Capabilities`, then the core calls the backend's ``planner`` (what
   ``--dry-run`` prints) and its ``launcher`` (else the core's own). Once per ``aworld_core.run``.
4. **Rollout**: ``rollout`` per episode, then ``compute_reward`` per reward and episode, then
   ``on_episode_end`` once, all driven by the worker kit (``aworld_core.worker``). Called in whatever process runs episodes (a TRL trainer, a verl agent
   loop worker, an AReaL rollout worker, the task server).

**Async hooks.** pluggy calls hooks synchronously. A hook that needs to do I/O returns an
awaitable (e.g. calls an ``async def`` and returns the coroutine); the core awaits any
awaitable result (``aworld_core.aio.maybe_await``). For ``firstresult`` hooks a plugin must
decide *synchronously* whether it answers: return ``None`` to pass, or the awaitable to answer.

**Which plugin answers.** ``firstresult`` hooks take the first non-``None`` answer; pluggy
calls later-registered plugins first, and the core's own built-in plugin is ``trylast``, so
any installed plugin can override a built-in.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import pluggy

PROJECT = "aworld"
ENTRY_POINT_GROUP = "aworld"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:
    from aworld_core.config import JobConfig
    from aworld_core.schemas import Episode, RolloutContext, Sample
    from aworld_core.settings import AworldSettings
    from aworld_core.specs import Backend, Command, DatasetSpec, EnvironmentSpec, RewardConvention, RewardSpec


# ---------------------------------------------------------------------------------------------
# 1. Registration: what a plugin provides
# ---------------------------------------------------------------------------------------------


@hookspec
def register_backends() -> list[Backend]:
    """Declare the training backends this plugin provides, one object each.

    :returns: a list of :class:`~aworld_core.specs.Backend`: its name, its planner (and launcher,
        SFT planner and launcher when it has them), its framework and install hint, the SFT row
        formats it reads and its :class:`~aworld_core.specs.Capabilities`. Two distributions
        declaring the same backend name is an error that names both (selecting that backend
        fails; ``--list`` still works and shows the conflict).
    Called: once per process, when the catalog is first built. Keep it cheap: give the planner and
    launcher as import references (``"my_backend.plan:plan"``) so nothing heavy is imported here.

    Example (a whole backend)::

        @hookimpl
        def register_backends():
            return [Backend("echo", "echoes the job", planner="aworld_echo_backend.plan:plan",
                            capabilities=Capabilities(sampling={"temperature"}))]
    """


@hookspec
def register_environments() -> list[EnvironmentSpec]:
    """Declare the tool environments (MCP servers) this plugin provides.

    :returns: a list of :class:`~aworld_core.specs.EnvironmentSpec`.
    Called: once per process, when the catalog is first built.
    """


@hookspec
def register_rewards() -> list[RewardSpec]:
    """Declare named reward functions.

    :returns: a list of :class:`~aworld_core.specs.RewardSpec`. A job selects one by name
    (``reward: {name: gsm8k}``); the core computes it through ``compute_reward``.
    Called: once per process, when the catalog is first built.
    """


@hookspec
def register_reward_conventions() -> list[RewardConvention]:
    """Declare ways of calling a reward function beyond the core's plain and trajectory-aware ones.

    :returns: a list of :class:`~aworld_core.specs.RewardConvention`. A reward whose function one
    of them :meth:`~aworld_core.specs.RewardConvention.claims` is called in it on every backend
    (aworld-trl registers TRL's ``(completions, **kwargs) -> list[float]``).
    Called: once per process, when the catalog is first built; claims are asked once per reward.
    """


@hookspec
def register_datasets() -> list[DatasetSpec]:
    """Declare named dataset loaders (``train_dataset: {name: gaia, ...}``).

    :returns: a list of :class:`~aworld_core.specs.DatasetSpec`.
    Called: once per process, when the catalog is first built.
    """


@hookspec
def register_commands() -> list[Command]:
    """Declare ``aworld`` subcommands (``aworld serve ...``) this plugin provides.

    :returns: a list of :class:`~aworld_core.specs.Command`: its name, a one-line description
        (``--list`` shows it) and its ``main(argv) -> int``, called with the arguments after the
        name. Two distributions declaring the same name is an error naming both, as for backends.
    Called: once per process, when the catalog is first built (``aworld NAME``, ``--list``).

    Example (aworld-service's)::

        @hookimpl
        def register_commands():
            return [Command("serve", "run a task server", "aworld_service.serve:main")]
    """


# ---------------------------------------------------------------------------------------------
# 2. Build: the agent a job trains
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def build_agents(job: JobConfig, settings: AworldSettings) -> Any:
    """Build the agent or swarm for ``job``. Stops at the first non-None result.

    :param job: the validated job config.
    :param settings: the process settings (``LLM_*`` / ``MCP_*`` fallbacks).
    :returns: an ``aworld_core.Agent`` or ``aworld_core.Swarm``, or ``None`` to let another
        plugin answer. The core's built-in answers last: it calls ``job.agent.factory``
    (``module:function``) when set, else builds an ``Agent`` from ``job.agent``'s fields.
    Called: in every process that runs episodes (backend workers re-create the agent from the
    serialized job config; agent objects never travel between processes).
    """


# ---------------------------------------------------------------------------------------------
# 3. Rollout: one episode, its rewards, and what listens for it
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def rollout(agent: Any, sample: Sample, llm: Any, context: RolloutContext) -> Awaitable[Episode] | None:
    """Run one episode of ``agent`` on ``sample``. Stops at the first non-None result.

    :param agent: the ``Agent`` or ``Swarm`` (built once per worker by ``build_agents``).
    :param sample: the dataset row.
    :param llm: the LLM client the trained agent(s) must use (a ``TokenLLM`` for training), or
        ``None`` to run every agent on its own endpoint.
    :param context: a :class:`~aworld_core.schemas.RolloutContext`: episode id, group id and
        index, timeout, max steps, sampling overrides, policy version and backend ``extras``.
    :returns: an awaitable of the finished :class:`~aworld_core.schemas.Episode` (failed and
        timed-out episodes are returned with their status, never raised), or ``None`` to pass.
        The core's built-in answers last with the agent runtime (``run_episode``).

    Called once per episode by the worker kit (``aworld_core.worker.EpisodeRunner``), which every
    backend and the task service use. This hook does **not** score: the kit computes rewards
    (``compute_reward``), applies the group policy, then calls ``on_episode_end`` once. An
    exception raised here is recorded by the kit as a failed episode, never trained.
    """


@hookspec(firstresult=True)
def compute_reward(name: str, episode: Episode, sample: Sample) -> float | Awaitable[float] | None:
    """Compute the reward named ``name`` for a finished episode. Stops at the first non-None result.

    :param name: the reward name (as registered, or an import reference such as
        ``my_rewards.py:score``).
    :param episode: the finished, successful episode.
    :param sample: its dataset row.
    :returns: a number (or an awaitable of one) if this plugin owns ``name``, else ``None``.
    A reward that raises or returns a non-number is recorded on the episode as a failed reward
    (``episode.reward_errors``), never silently turned into 0.
    Called: once per reward per finished episode.
    """


@hookspec
def on_episode_end(episode: Episode) -> None:
    """Observe a finished episode (metrics, logging, export). Every plugin is called.

    :param episode: the episode, with status, rewards and group decision filled in.
    :returns: ignored (an awaitable is awaited). An observer that raises is logged and recorded
        in ``episode.metadata["on_episode_end_errors"]``; it does not stop training.
    Called: exactly once per episode, by the worker kit after scoring and the group policy, in
    the process that ran the episode.
    """
