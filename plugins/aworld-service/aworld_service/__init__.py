"""The task service: submit agent tasks to servers, run them at scale, collect trajectories.

``AworldTaskClient`` (client side), ``TaskServer`` / ``create_app`` and ``python -m
aworld_core.serve`` (server side), ``open_store`` and ``TaskStore`` (SQLite for one host,
PostgreSQL for hosts sharing one queue). Names are imported lazily: ``import aworld_core.service``
pulls in neither aiohttp, Starlette nor psycopg.
"""

from __future__ import annotations

from aworld_core.lazy import lazy_exports

_EXPORTS = {
    "AworldTaskClient": "aworld_core.service.client",
    "TaskServer": "aworld_core.service.server",
    "ServerConfig": "aworld_core.service.server",
    "create_app": "aworld_core.service.server",
    "TaskStore": "aworld_core.service.store",
    "open_store": "aworld_core.service.store",
    "TaskFilter": "aworld_core.service.store",
    "AgentRegistry": "aworld_core.service.agents",
    "task_sample": "aworld_core.service.agents",
    "TaskExecutor": "aworld_core.service.executor",
    "ExecutorConfig": "aworld_core.service.executor",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
