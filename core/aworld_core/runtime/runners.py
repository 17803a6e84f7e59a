"""``Runners``: the seed's entry points for running an agent on one input.

``await Runners.run(question, agent=agent)`` inside async code; ``Runners.sync_run(...)`` from a
script or notebook cell with no running event loop. Both return the recorded ``Episode``
(``episode.final_answer``, ``episode.status``, ``episode.steps``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aworld_core.agents.agent import Agent
from aworld_core.agents.swarm import Swarm
from aworld_core.errors import UsageError
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import Episode, Sample


class Runners:
    @staticmethod
    def _target(agent: Agent | Swarm | None, swarm: Swarm | None) -> Agent | Swarm:
        if agent is not None and swarm is not None:
            raise UsageError("pass either agent= or swarm=, not both")
        target = agent if agent is not None else swarm
        if target is None:
            raise UsageError("Runners needs agent= (an Agent or a Swarm) or swarm=")
        return target

    @staticmethod
    async def run(
        input: str | Sample,
        agent: Agent | Swarm | None = None,
        *,
        swarm: Swarm | None = None,
        llm: Any = None,
        **kwargs: Any,
    ) -> Episode:
        """Run one episode; keyword arguments go to ``run_episode`` (task_id, episode_id, timeout,
        max_steps, sampling, ...)."""
        return await run_episode(Runners._target(agent, swarm), input, llm=llm, **kwargs)

    @staticmethod
    def sync_run(
        input: str | Sample,
        agent: Agent | Swarm | None = None,
        *,
        swarm: Swarm | None = None,
        llm: Any = None,
        **kwargs: Any,
    ) -> Episode:
        """``run`` for code without a running event loop; closes the agents' own LLM clients and
        the loop's shared MCP sessions after."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UsageError(
                "Runners.sync_run was called inside a running event loop; use 'await Runners.run(...)' there"
            )
        target = Runners._target(agent, swarm)

        async def main() -> Episode:
            from aworld_core.tools.mcp_shared import close_shared_sessions

            try:
                return await run_episode(target, input, llm=llm, **kwargs)
            finally:
                await target.aclose()
                await close_shared_sessions()

        return asyncio.run(main())
