"""The task service's errors. Every one is an :class:`~aworld_core.errors.AworldError`, so a caller
that catches the core's errors catches these too."""

from __future__ import annotations

from aworld_core.errors import AworldError


class TaskServiceError(AworldError):
    """A task server refused a request, or no server could be reached.

    ``host`` is the server that answered (or failed), ``status`` its HTTP status (``None`` when
    it could not be reached) and ``cause`` the server's message or the connection error.
    """

    def __init__(self, message: str, *, host: str | None = None, status: int | None = None, cause: str = ""):
        super().__init__(message)
        self.host = host
        self.status = status
        self.cause = cause


class TaskNotFoundError(TaskServiceError):
    """No server (or store) knows the task id."""


class TaskConflictError(TaskServiceError):
    """A task id was submitted again with a different payload, or a move its status forbids."""


class QueueFullError(TaskServiceError):
    """The server's queue is full; try again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kwargs: object):
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.retry_after = retry_after


class IllegalTransitionError(AworldError):
    """A task status change the state machine forbids (e.g. SUCCESS -> RUNNING)."""
