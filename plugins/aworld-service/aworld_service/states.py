"""The task state machine: which status may follow which.

    INIT ──claim──> RUNNING ──finish──> SUCCESS | FAILED | TIMEOUT | CANCELLED
      │               │  ▲
      │               └──┘ re-claim after the lease expired (the host died)
      │               └──> INIT  (released: the host shut down before finishing)
      └──cancel──> CANCELLED

Terminal statuses never change again. The stores apply every move as one conditional update
(``WHERE status IN (sources)``), so two hosts cannot both make a move; this module is the one
place that says which moves exist, and :func:`check` raises on any other.
"""

from __future__ import annotations

from aworld_core.schemas import EpisodeStatus, TaskStatus
from aworld_service.errors import IllegalTransitionError

TERMINAL: frozenset[TaskStatus] = frozenset(s for s in TaskStatus if s.terminal)

TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.INIT: frozenset({TaskStatus.RUNNING, TaskStatus.CANCELLED}),
    TaskStatus.RUNNING: frozenset(
        {
            TaskStatus.RUNNING,  # re-claimed by another host once the lease expired
            TaskStatus.INIT,  # released by a host that shuts down
            TaskStatus.SUCCESS,
            TaskStatus.FAILED,
            TaskStatus.TIMEOUT,
            TaskStatus.CANCELLED,
        }
    ),
    **{status: frozenset() for status in TERMINAL},
}


def allowed(source: TaskStatus, target: TaskStatus) -> bool:
    return target in TRANSITIONS[source]


def check(source: TaskStatus, target: TaskStatus, task_id: str = "") -> None:
    """Raise :class:`IllegalTransitionError` unless ``source -> target`` is a move of the machine."""
    if not allowed(source, target):
        what = f"task '{task_id}' " if task_id else ""
        if source in TERMINAL:
            reason = f"{source.value} is final"
        else:
            options = ", ".join(sorted(s.value for s in TRANSITIONS[source])) or "nothing"
            reason = f"from {source.value} it may only move to {options}"
        raise IllegalTransitionError(f"{what}cannot move from {source.value} to {target.value}: {reason}")


def sources(target: TaskStatus) -> tuple[TaskStatus, ...]:
    """Every status from which ``target`` may be reached (what a store's WHERE clause allows)."""
    return tuple(s for s in TaskStatus if target in TRANSITIONS[s])


def from_episode(status: EpisodeStatus) -> TaskStatus:
    """The task status a finished episode gives its task."""
    mapping = {
        EpisodeStatus.SUCCESS: TaskStatus.SUCCESS,
        EpisodeStatus.FAILED: TaskStatus.FAILED,
        EpisodeStatus.TIMEOUT: TaskStatus.TIMEOUT,
        EpisodeStatus.CANCELLED: TaskStatus.CANCELLED,
    }
    if status not in mapping:
        raise IllegalTransitionError(
            f"an episode that is still {status.value} cannot finish a task; the agent runtime "
            f"must return a finished episode (success, failed, timeout or cancelled)"
        )
    return mapping[status]
