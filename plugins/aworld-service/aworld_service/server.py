"""The task server: an ASGI app (Starlette) over a store and an executor.

Endpoints (JSON unless noted; errors are ``{"error": ..., "problems": [{"field", "error"}]}``):

=======  ===============================  ==================================================
POST     /v1/tasks                        submit one AworldTask (201 created, 200 already there)
POST     /v1/tasks/batch                  ``{"tasks": [...]}``, all or nothing
POST     /v1/tasks/states                 ``{"task_ids": [...]}`` -> states of those that exist
GET      /v1/tasks                        list: status, agent_id, user_id, session_id, after, limit
GET      /v1/tasks/{id}                   TaskState (no trajectory)
GET      /v1/tasks/{id}/result            TaskResult with the Episode (409 while not finished)
GET      /v1/tasks/{id}/attempts          every claim of the task by a host
POST     /v1/tasks/{id}/cancel            INIT -> CANCELLED; RUNNING -> stopped by its host
GET      /v1/trajectories                 JSONL of finished TaskResults (same filters as list)
GET      /health                          no auth; 503 while the store is unreachable
GET      /metrics                         no auth; Prometheus text
=======  ===============================  ==================================================

Every response carries ``X-Aworld-Load`` (running / concurrency) so clients can pick the least
loaded host without asking. A full queue answers 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, TaskState, TaskStatus
from aworld_service.agents import AgentRegistry, task_override_problems
from aworld_service.errors import IllegalTransitionError, TaskConflictError, TaskNotFoundError
from aworld_service.executor import ExecutorConfig, TaskExecutor
from aworld_service.metrics import ServiceMetrics
from aworld_service.store import DEFAULT_MAX_ATTEMPTS, TaskFilter, TaskStore, open_store, task_not_found

log = logging.getLogger("aworld_service")

API = "/v1"


@dataclass
class ServerConfig:
    """Everything a server needs; ``aworld serve`` fills it from flags and env."""

    agents: dict[str, Any]
    store_url: str = "sqlite:///aworld-tasks.sqlite"
    concurrency: int = 8
    token: str | None = None
    lease_s: float = 30.0
    poll_s: float = 0.5
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_queue: int = 100_000
    max_body_bytes: int = 16 * 1024 * 1024
    max_batch: int = 1000
    default_timeout_s: float | None = None
    reward: str | None = None
    drain_s: float = 10.0
    owner: str = ""
    retry_after_s: float = 1.0
    base_dir: str | None = None
    store_options: dict[str, Any] = field(default_factory=dict)
    allow_stdio_mcp: bool = False  # a task's mcp_config may start stdio servers (commands on this host)

    def __post_init__(self) -> None:
        if not self.owner:
            self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        for name in ("max_queue", "max_body_bytes", "max_batch", "concurrency", "max_attempts"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lease_s <= 0.3:
            raise UsageError(f"the lease must be longer than 0.3 s, got {self.lease_s}")
        if self.poll_s <= 0 or self.drain_s < 0:
            raise UsageError(f"poll_s must be > 0 and drain_s >= 0, got {self.poll_s} and {self.drain_s}")
        if self.default_timeout_s is not None and self.default_timeout_s <= 0:
            raise UsageError(f"the default timeout must be > 0 seconds, got {self.default_timeout_s}")


class HTTPError(Exception):
    def __init__(self, status: int, message: str, problems: list[dict[str, str]] | None = None, **headers: str):
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []
        self.headers = headers


def _problems(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    out = []
    for error in exc.errors():
        loc = ".".join(str(p) for p in error["loc"])
        out.append({"field": f"{prefix}{loc}" if loc else prefix.rstrip(".") or "(body)", "error": error["msg"]})
    return out


class TaskServer:
    """The app's state and handlers. ``app`` is the ASGI application."""

    def __init__(self, config: ServerConfig, *, store: TaskStore | None = None, agents: AgentRegistry | None = None):
        self.config = config
        self.store = store or open_store(config.store_url, **config.store_options)
        self.metrics = ServiceMetrics()
        self.agents: AgentRegistry | None = agents
        self.executor: TaskExecutor | None = None
        self.store_id = ""
        self._queued = 0
        self._queued_at = 0.0
        self._queued_lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self.app = self._build_app()

    # --- lifecycle -------------------------------------------------------------------------

    async def startup(self) -> None:
        if self.agents is None:
            self.agents = AgentRegistry(self.config.agents, base_dir=self.config.base_dir)
        if self.config.reward is not None:
            from aworld_core.rewards import resolve_reward

            resolve_reward(self.config.reward, base_dir=self.config.base_dir)  # fail now, not per task
        await self.store.open()
        self.store_id = await self.store.store_id()
        self.executor = TaskExecutor(
            self.store,
            self.agents,
            ExecutorConfig(
                owner=self.config.owner,
                concurrency=self.config.concurrency,
                lease_s=self.config.lease_s,
                poll_s=self.config.poll_s,
                max_attempts=self.config.max_attempts,
                default_timeout_s=self.config.default_timeout_s,
                reward=self.config.reward,
                drain_s=self.config.drain_s,
                allow_stdio_mcp=self.config.allow_stdio_mcp,
            ),
            self.metrics,
        )
        await self.executor.start()
        self._watcher = asyncio.create_task(self._watch_queue(), name="aworld-queue-watch")
        log.info(
            "task server %s: store %s (%s), agents %s, concurrency %d",
            self.config.owner,
            self.store.kind,
            self.store_id,
            ", ".join(self.agents.names),
            self.config.concurrency,
        )

    async def shutdown(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if self.executor is not None:
            await self.executor.stop()
        if self.agents is not None:
            await self.agents.aclose()
        await self.store.close()

    def _build_app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        @asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[None]:
            await self.startup()
            try:
                yield
            finally:
                await self.shutdown()

        h = self._handler
        routes = [
            Route("/health", h(self.health, auth=False), methods=["GET"]),
            Route("/metrics", h(self.metrics_text, auth=False), methods=["GET"]),
            Route(f"{API}/tasks", h(self.submit), methods=["POST"]),
            Route(f"{API}/tasks", h(self.list_tasks), methods=["GET"]),
            Route(f"{API}/tasks/batch", h(self.submit_batch), methods=["POST"]),
            Route(f"{API}/tasks/states", h(self.states), methods=["POST"]),
            Route(f"{API}/tasks/{{task_id}}", h(self.get_state), methods=["GET"]),
            Route(f"{API}/tasks/{{task_id}}/result", h(self.get_result), methods=["GET"]),
            Route(f"{API}/tasks/{{task_id}}/attempts", h(self.get_attempts), methods=["GET"]),
            Route(f"{API}/tasks/{{task_id}}/cancel", h(self.cancel), methods=["POST"]),
            Route(f"{API}/trajectories", h(self.trajectories), methods=["GET"]),
        ]
        return Starlette(routes=routes, lifespan=lifespan)

    # --- plumbing --------------------------------------------------------------------------

    @property
    def load(self) -> float:
        """(running + waiting) / concurrency: how far behind this host is, for clients to compare."""
        if self.executor is None:
            return float("inf")
        return (len(self.executor.runs) + self._queued) / self.config.concurrency

    def _headers(self) -> dict[str, str]:
        return {"X-Aworld-Load": f"{self.load:.4f}", "X-Aworld-Host": self.config.owner}

    def _json(self, payload: Any, status: int = 200) -> Any:
        from starlette.responses import Response

        if isinstance(payload, BaseModel):
            body = payload.model_dump_json()
        else:
            body = json.dumps(payload, default=_jsonable)
        return Response(body, status_code=status, media_type="application/json", headers=self._headers())

    def _handler(self, func: Callable[[Any], Awaitable[Any]], *, auth: bool = True) -> Callable[[Any], Awaitable[Any]]:
        async def endpoint(request: Any) -> Any:
            try:
                if auth:
                    self._check_token(request)
                return await func(request)
            except HTTPError as exc:
                return self._error(exc.status, exc.message, exc.problems, exc.headers)
            except TaskNotFoundError as exc:
                return self._error(404, str(exc))
            except (TaskConflictError, IllegalTransitionError) as exc:
                return self._error(409, str(exc))
            except UsageError as exc:
                return self._error(422, str(exc))
            except RecursionError:  # a value too deeply nested to validate or serialize: the input's fault
                return self._error(422, "the request holds a value nested too deeply to process")
            except Exception as exc:  # the store (or a bug): 503 so clients fail over and retry
                log.exception("%s %s failed", request.method, request.url.path)
                return self._error(503, f"the server could not complete the request: {type(exc).__name__}: {exc}")

        return endpoint

    def _error(self, status: int, message: str, problems: list[dict[str, str]] | None = None,
               headers: dict[str, str] | None = None) -> Any:
        from starlette.responses import Response

        body: dict[str, Any] = {"error": message}
        if problems:
            body["problems"] = problems
        return Response(
            json.dumps(body), status_code=status, media_type="application/json",
            headers={**self._headers(), **(headers or {})},
        )

    def _check_token(self, request: Any) -> None:
        expected = self.config.token
        if not expected:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise HTTPError(401, "missing bearer token: send 'Authorization: Bearer <token>'",
                            **{"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise HTTPError(401, "wrong bearer token", **{"WWW-Authenticate": "Bearer"})

    async def _body(self, request: Any) -> Any:
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise HTTPError(413, f"request body is {length} bytes; this server takes at most {limit} "
                                 f"(--max-body-bytes). Send fewer tasks per batch")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, f"request body exceeds {limit} bytes (--max-body-bytes). "
                                     f"Send fewer tasks per batch")
            chunks.append(chunk)
        try:
            data = json.loads(b"".join(chunks) or b"null")
        except RecursionError:
            data = None
        except ValueError as exc:  # UnicodeDecodeError too
            raise HTTPError(422, f"the request body is not valid JSON: {exc}",
                            [{"field": "(body)", "error": str(exc)}]) from None
        else:
            if _nesting_within(data, MAX_BODY_DEPTH):
                return data
        # too deep to handle (and to store, hash or serialize later): the request is at fault, so
        # 422, never 503, which a client would take for a host failure and retry on every host
        message = f"the request body is nested more than {MAX_BODY_DEPTH} levels deep"
        raise HTTPError(422, message, [{"field": "(body)", "error": message}])

    def _task(self, data: Any, prefix: str = "") -> AworldTask:
        if not isinstance(data, dict):
            where = prefix.rstrip(".") or "(body)"
            raise HTTPError(422, f"{where} must be a JSON object (an AworldTask), got {type(data).__name__}",
                            [{"field": where, "error": "expected an object"}])
        try:
            task = AworldTask.model_validate(data)
        except ValidationError as exc:
            problems = _problems(exc, prefix)
            names = ", ".join(p["field"] for p in problems)
            raise HTTPError(422, f"invalid task: {names}: {problems[0]['error']}", problems) from None
        assert self.agents is not None
        if task.agent_id not in self.agents.entries:
            field_name = f"{prefix}agent_id"
            message = f"unknown agent_id '{task.agent_id}': this server runs {', '.join(self.agents.names)}"
            raise HTTPError(422, message, [{"field": field_name, "error": message}])
        refused = task_override_problems(task, allow_stdio_mcp=self.config.allow_stdio_mcp)
        if refused:
            problems = [{"field": f"{prefix}{where}", "error": why} for where, why in refused]
            names = ", ".join(p["field"] for p in problems)
            raise HTTPError(422, f"task refused: {names}: {refused[0][1]}", problems)
        return task

    async def _queued_now(self) -> int:
        """How many tasks wait (INIT), read from the store at most every 0.5 s; in between, this
        host's own admissions are added to the last reading."""
        if time.monotonic() - self._queued_at > 0.5:
            async with self._queued_lock:
                if time.monotonic() - self._queued_at > 0.5:
                    self._queued = await self.store.count(TaskStatus.INIT)
                    self._queued_at = time.monotonic()
        return self._queued

    async def _watch_queue(self) -> None:
        """Keep the waiting-task count (load header, /health) fresh while nobody submits."""
        while True:
            await asyncio.sleep(1.0)
            try:
                await self._queued_now()
            except Exception as exc:  # the executor reports store outages in /health
                log.debug("counting queued tasks failed: %s", exc)

    async def _admit(self, tasks: list[AworldTask]) -> list[Any]:
        queued = await self._queued_now()
        if queued + len(tasks) > self.config.max_queue:
            self.metrics.bump("rejected_full", len(tasks))
            retry = max(1, math.ceil(self.config.retry_after_s))
            raise HTTPError(
                429,
                f"queue full: {queued} tasks wait and this server takes at most {self.config.max_queue} "
                f"(--max-queue); retry after {retry} s or submit to another host",
                **{"Retry-After": str(retry)},
            )
        submitted = await self.store.submit(tasks)
        created = sum(1 for s in submitted if s.created)
        self._queued += created
        self.metrics.bump("submitted", created)
        self.metrics.bump("duplicates", len(submitted) - created)
        if created and self.executor is not None:
            self.executor.wake()
        return submitted

    # --- handlers --------------------------------------------------------------------------

    async def health(self, request: Any) -> Any:
        assert self.executor is not None and self.agents is not None
        snap = self.executor.snapshot()
        ok = snap["store_error"] is None
        return self._json(
            {
                "status": "ok" if ok else "degraded",
                "store": self.store.kind,
                "store_id": self.store_id,
                "agents": self.agents.names,
                "queued": self._queued,
                "max_queue": self.config.max_queue,
                **snap,
                "load": round(self.load, 4),
            },
            200 if ok else 503,
        )

    async def metrics_text(self, request: Any) -> Any:
        from starlette.responses import Response

        assert self.executor is not None
        counts = await self.store.counts()
        text = self.metrics.render(
            store_counts={s.value: n for s, n in counts.items()},
            running=len(self.executor.runs),
            concurrency=self.config.concurrency,
            host=self.config.owner,
        )
        return Response(text, media_type="text/plain; version=0.0.4", headers=self._headers())

    async def submit(self, request: Any) -> Any:
        task = self._task(await self._body(request))
        (submitted,) = await self._admit([task])
        return self._json(submitted.state, 201 if submitted.created else 200)

    async def submit_batch(self, request: Any) -> Any:
        data = await self._body(request)
        items = data.get("tasks") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise HTTPError(422, "a batch is {\"tasks\": [task, ...]}", [{"field": "tasks", "error": "expected a list"}])
        if len(items) > self.config.max_batch:
            raise HTTPError(
                413,
                f"batch of {len(items)} tasks; this server takes at most {self.config.max_batch} per batch "
                f"(--max-batch)",
                [{"field": "tasks", "error": f"at most {self.config.max_batch} items"}],
            )
        tasks = [self._task(item, f"tasks.{i}.") for i, item in enumerate(items)]
        submitted = await self._admit(tasks)
        return self._json(
            {"states": [s.state.model_dump(mode="json") for s in submitted],
             "created": [s.created for s in submitted]}
        )

    async def states(self, request: Any) -> Any:
        data = await self._body(request)
        ids = data.get("task_ids") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise HTTPError(422, "expected {\"task_ids\": [\"id\", ...]}",
                            [{"field": "task_ids", "error": "expected a list of strings"}])
        if len(ids) > 10 * self.config.max_batch:
            raise HTTPError(413, f"at most {10 * self.config.max_batch} task ids per request",
                            [{"field": "task_ids", "error": "too many ids"}])
        found = await self.store.get_many(ids)
        known = {s.task_id for s in found}
        return self._json(
            {"states": [s.model_dump(mode="json") for s in found], "missing": [i for i in ids if i not in known]}
        )

    async def _state(self, task_id: str) -> TaskState:
        state = await self.store.get(task_id)
        if state is None:
            raise task_not_found(task_id)
        return state

    async def get_state(self, request: Any) -> Any:
        return self._json(await self._state(request.path_params["task_id"]))

    async def get_result(self, request: Any) -> Any:
        task_id = request.path_params["task_id"]
        result = await self.store.get_result(task_id)
        if result is None:
            raise task_not_found(task_id)
        if not result.terminal:
            raise HTTPError(409, f"task '{task_id}' is {result.status.value}; its result exists once it "
                                 f"finishes (poll GET {API}/tasks/{task_id})")
        return self._json(result)

    async def get_attempts(self, request: Any) -> Any:
        task_id = request.path_params["task_id"]
        await self._state(task_id)
        attempts = await self.store.attempts(task_id)
        return self._json({"attempts": [a.model_dump(mode="json") for a in attempts]})

    async def cancel(self, request: Any) -> Any:
        state = await self.store.cancel(request.path_params["task_id"])
        return self._json(state)

    def _filter(self, request: Any, default_limit: int, max_limit: int) -> TaskFilter:
        q = request.query_params
        problems: list[dict[str, str]] = []
        statuses = None
        if q.get("status"):
            statuses = []
            for name in q["status"].split(","):
                try:
                    statuses.append(TaskStatus(name.strip().lower()))
                except ValueError:
                    problems.append({"field": "status", "error": f"unknown status '{name}'; use one of "
                                     + ", ".join(s.value for s in TaskStatus)})
        numbers = {}
        for name, default in (("after", 0), ("limit", default_limit)):
            raw = q.get(name)
            try:
                numbers[name] = int(raw) if raw is not None else default
                if numbers[name] < 0:
                    raise ValueError
            except ValueError:
                problems.append({"field": name, "error": f"expected a non-negative integer, got {raw!r}"})
        if problems:
            raise HTTPError(422, f"bad query: {problems[0]['field']}: {problems[0]['error']}", problems)
        task_ids = [t for t in q.get("task_ids", "").split(",") if t] or None
        return TaskFilter(
            statuses=statuses,
            agent_id=q.get("agent_id"),
            user_id=q.get("user_id"),
            session_id=q.get("session_id"),
            task_ids=task_ids,
            after=numbers["after"],
            limit=max(1, min(numbers["limit"], max_limit)),
        )

    async def list_tasks(self, request: Any) -> Any:
        page = await self.store.list(self._filter(request, 100, 1000))
        return self._json({"tasks": [s.model_dump(mode="json") for s in page.items], "next_after": page.next_after})

    async def trajectories(self, request: Any) -> Any:
        from starlette.responses import StreamingResponse

        filter = self._filter(request, 200, 1000)
        filter.limit = 200
        first = await self.store.results(filter)  # fail before the 200 is sent, not mid-stream

        async def lines() -> AsyncIterator[bytes]:
            page = first
            while True:
                if page.items:
                    yield b"".join(item.model_dump_json().encode() + b"\n" for item in page.items)
                if page.next_after is None:
                    return
                filter.after = page.next_after
                page = await self.store.results(filter)

        return StreamingResponse(lines(), media_type="application/x-ndjson", headers=self._headers())


MAX_BODY_DEPTH = 200  # JSON nesting levels a request may have


def _nesting_within(data: Any, limit: int) -> bool:
    """Whether ``data`` (parsed JSON) nests at most ``limit`` levels (iterative: no recursion)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot serialize {type(value).__name__}")


def create_app(config: ServerConfig, *, store: TaskStore | None = None) -> Any:
    """The ASGI app of a task server (start it with uvicorn, or ``aworld serve``)."""
    return TaskServer(config, store=store).app
