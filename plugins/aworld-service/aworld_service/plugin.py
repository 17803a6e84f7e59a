"""aworld-service's hooks: the ``aworld serve`` command (the task server, ``serve.main``)."""

from __future__ import annotations

from aworld_core.hookspecs import hookimpl
from aworld_core.specs import Command


@hookimpl
def register_commands() -> list[Command]:
    return [Command("serve", "run a task server: accepts agent tasks, runs them, records trajectories",
                    "aworld_service.serve:main")]
