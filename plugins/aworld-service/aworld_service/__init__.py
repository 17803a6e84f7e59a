"""aworld-service: submit agent tasks to servers, run them at scale, collect trajectories.

``AworldTaskClient`` (client side), ``TaskServer`` / ``create_app`` and ``aworld serve`` /
``python -m aworld_service.serve`` (server side), ``open_store`` and ``TaskStore`` (SQLite for one
host, PostgreSQL for hosts sharing one queue; other stores register a URL scheme in the entry-point
group ``aworld_service.stores``). The wire types (``AworldTask``, ``TaskStatus``, ``TaskState``,
``TaskResult``, ``TaskAttempt``) stay in ``aworld_core.schemas``: the trainer reads downloaded
results without this distribution. Names are imported lazily: ``import aworld_service`` pulls in
neither aiohttp, Starlette nor psycopg.
"""

from __future__ import annotations

from aworld_core import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "AworldTaskClient": "aworld_service.client",
    "TaskServer": "aworld_service.server",
    "ServerConfig": "aworld_service.server",
    "create_app": "aworld_service.server",
    "TaskStore": "aworld_service.store",
    "open_store": "aworld_service.store",
    "store_schemes": "aworld_service.store",
    "TaskFilter": "aworld_service.store",
    "AgentRegistry": "aworld_service.agents",
    "task_sample": "aworld_service.agents",
    "TaskExecutor": "aworld_service.executor",
    "ExecutorConfig": "aworld_service.executor",
    "TaskServiceError": "aworld_service.errors",
    "TaskNotFoundError": "aworld_service.errors",
    "TaskConflictError": "aworld_service.errors",
    "QueueFullError": "aworld_service.errors",
    "IllegalTransitionError": "aworld_service.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
