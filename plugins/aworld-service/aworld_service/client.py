"""``AworldTaskClient``: submit tasks to task servers, follow them, fetch their trajectories.

    client = AworldTaskClient(know_hosts=["localhost:9299", "localhost:9399", "localhost:9499"])
    await client.submit_task(AworldTask(task_id="q1", agent_id="gaia_agent", agent_input=question))
    state = await client.get_task_state(task_id="q1")      # asks the servers
    result = await client.get_result("q1", wait=True)      # TaskResult with the Episode

Hosts are chosen by load (each server reports ``running / concurrency`` on every response);
a host that cannot be reached, answers 5xx, or is full (429) is skipped for a while and the
request goes to the next one, with exponential backoff once every host has been tried.
Submitting is idempotent by ``task_id``, so a retried submission never makes a second task.
Every failure raises (:class:`~aworld_core.errors.TaskServiceError` and subclasses) naming the
host and the cause; nothing returns ``None`` to mean "it went wrong".

Each server either has its own store (SQLite) or shares one (PostgreSQL). The client learns
which hosts share a store from ``/health`` (``store_id``), asks one host per store when it
looks a task up or downloads trajectories, and remembers which host took each task.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aworld_core.errors import UsageError
from aworld_core.schemas import AworldTask, TaskAttempt, TaskResult, TaskState, TaskStatus
from aworld_service.errors import QueueFullError, TaskConflictError, TaskNotFoundError, TaskServiceError

API = "/v1"
RETRYABLE = frozenset({429, 500, 502, 503, 504})


@dataclass
class _Host:
    url: str
    load: float = 0.0
    inflight: int = 0
    pending: int = 0  # tasks this client is sending it right now (not yet in its load)
    concurrency: int = 8
    down_until: float = 0.0
    failures: int = 0
    store_id: str | None = None
    last_error: str = ""

    @property
    def up(self) -> bool:
        return time.monotonic() >= self.down_until

    def score(self) -> float:
        # the host's last reported load, plus what we are sending it now, so that concurrent
        # batches spread instead of all going to the host that answered last
        return self.load + self.pending / max(1, self.concurrency) + 0.01 * self.inflight + random.random() * 1e-3


class _Reply:
    def __init__(self, host: _Host, status: int, data: Any):
        self.host = host
        self.status = status
        self.data = data


def _normalize(host: str) -> str:
    host = host.strip().rstrip("/")
    if not host:
        raise UsageError("an empty host name in know_hosts")
    if "://" not in host:
        host = f"http://{host}"
    if not host.startswith(("http://", "https://")):
        raise UsageError(f"bad host {host!r}: use host:port or http(s)://host:port")
    return host


def _error_text(data: Any) -> str:
    if isinstance(data, dict) and "error" in data:
        text = str(data["error"])
        problems = data.get("problems")
        if problems:
            text += " [" + "; ".join(f"{p.get('field')}: {p.get('error')}" for p in problems) + "]"
        return text
    return str(data)[:500]


def _env_token() -> str | None:
    token = os.environ.get("AWORLD_TASK_TOKEN", "").strip()
    path = os.environ.get("AWORLD_TASK_TOKEN_FILE", "").strip()
    if not token and path:
        try:
            token = open(path, encoding="utf-8").read().strip()
        except OSError as exc:
            raise UsageError(f"cannot read AWORLD_TASK_TOKEN_FILE={path}: {exc}") from None
    return token or None


class AworldTaskClient:
    """A client of one or more task servers (or a Kubernetes Service in front of them).

    ``know_hosts`` (the seed's spelling; ``known_hosts`` also works) are ``host:port`` or URLs.
    ``token`` is the servers' bearer token (default: ``AWORLD_TASK_TOKEN``, else the file
    ``AWORLD_TASK_TOKEN_FILE`` names, as the server reads them). Use it as an async
    context manager, or call :meth:`aclose` when done.
    """

    def __init__(
        self,
        know_hosts: Sequence[str] | str | None = None,
        token: str | None = None,
        *,
        known_hosts: Sequence[str] | str | None = None,
        timeout_s: float = 30.0,
        retries: int = 5,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
        batch_size: int = 500,
        health_ttl_s: float = 10.0,
    ):
        hosts = know_hosts if know_hosts is not None else known_hosts
        if hosts is None:
            env = os.environ.get("AWORLD_TASK_HOSTS", "")
            hosts = [h for h in env.split(",") if h.strip()]
        if isinstance(hosts, str):
            hosts = [h for h in hosts.split(",") if h.strip()]
        if not hosts:
            raise UsageError(
                "AworldTaskClient needs at least one host: know_hosts=['localhost:9299', ...] "
                "(or set AWORLD_TASK_HOSTS=host:port,host:port)"
            )
        self.hosts = [_Host(_normalize(h)) for h in dict.fromkeys(hosts)]
        self.token = token if token is not None else _env_token()
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.batch_size = max(1, batch_size)
        self.health_ttl_s = health_ttl_s
        self._session: Any = None
        self._where: dict[str, _Host] = {}  # task id -> the host that accepted it
        self._health_at = 0.0

    # --- plumbing --------------------------------------------------------------------------

    async def __aenter__(self) -> AworldTaskClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self._session = aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(limit=256, limit_per_host=64),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            )
        return self._session

    def _group_of(self, host: _Host) -> list[_Host]:
        """``host`` and every host known to share its store (any of them can answer for it)."""
        if host.store_id is None:
            return [host]
        return [host] + [h for h in self.hosts if h is not host and h.store_id == host.store_id]

    def _mark_down(self, host: _Host, cause: str, seconds: float | None = None) -> None:
        host.failures += 1
        host.last_error = cause
        pause = seconds if seconds is not None else min(self.backoff_s * 2 ** min(host.failures, 8), 30.0)
        host.down_until = time.monotonic() + pause

    async def _send(
        self, host: _Host, method: str, path: str, payload: Any, params: dict[str, str] | None, weight: int = 0
    ) -> _Reply:
        import aiohttp

        host.inflight += 1
        host.pending += weight
        try:
            async with self._http().request(
                method, host.url + path, json=payload, params=params
            ) as resp:
                raw = await resp.read()
                load = resp.headers.get("X-Aworld-Load")
                if load is not None:
                    try:
                        host.load = float(load)
                    except ValueError:
                        pass
                try:
                    data = json.loads(raw) if raw else None
                except ValueError:
                    data = raw.decode(errors="replace")
                reply = _Reply(host, resp.status, data)
                if resp.status == 429:
                    reply.retry_after = _retry_after(resp.headers.get("Retry-After"))  # type: ignore[attr-defined]
                return reply
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _Unreachable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc
        finally:
            host.inflight -= 1
            host.pending -= weight

    async def _request(
        self,
        method: str,
        path: str,
        payload: Any = None,
        *,
        params: dict[str, str] | None = None,
        prefer: _Host | None = None,
        only: Sequence[_Host] | None = None,
        ok: Iterable[int] = (200, 201),
        weight: int = 0,
    ) -> _Reply:
        """Send to the preferred (else least loaded) host; fail over and back off on 5xx, 429 and
        connection errors; raise on any other error status."""
        ok = set(ok)
        pool = list(only) if only is not None else self.hosts
        tried: set[str] = set()
        causes: list[str] = []
        last: _Reply | None = None
        full_waits: list[float] = []
        for attempt in range(self.retries + 1):
            if prefer is not None and prefer.url not in tried and prefer.up:
                host = prefer
            else:
                fresh = [h for h in pool if h.url not in tried]
                if not fresh:  # every host tried: back off, then start a new round
                    tried.clear()
                    delay = min(self.backoff_s * 2**attempt, self.max_backoff_s) * (0.5 + random.random())
                    if full_waits:
                        delay = max(delay, min(full_waits))
                    await asyncio.sleep(delay)
                    fresh = pool
                up = [h for h in fresh if h.up] or fresh
                host = min(up, key=_Host.score)
            tried.add(host.url)
            try:
                reply = await self._send(host, method, path, payload, params, weight)
            except _Unreachable as exc:
                self._mark_down(host, str(exc))
                causes.append(f"{host.url}: unreachable ({exc})")
                continue
            last = reply
            if reply.status in ok:
                host.failures = 0
                return reply
            if reply.status == 429:
                wait = getattr(reply, "retry_after", 1.0)
                full_waits.append(wait)
                self._mark_down(host, "queue full", wait)
                causes.append(f"{host.url}: 429 {_error_text(reply.data)}")
                continue
            if reply.status in RETRYABLE:
                self._mark_down(host, f"HTTP {reply.status}")
                causes.append(f"{host.url}: {reply.status} {_error_text(reply.data)}")
                continue
            raise self._error_for(reply, method, path)
        summary = "; ".join(causes[-2 * len(pool) :]) or "no host answered"
        message = f"{method} {path} failed after {self.retries + 1} tries on {len(pool)} host(s): {summary}"
        status = last.status if last is not None else None
        host_url = last.host.url if last is not None else (causes[-1].split(": ")[0] if causes else None)
        if last is not None and last.status == 429 and all("429" in c for c in causes[-len(pool) :]):
            raise QueueFullError(message, retry_after=min(full_waits or [1.0]), host=host_url, status=429,
                                 cause=_error_text(last.data))
        raise TaskServiceError(message, host=host_url, status=status, cause=summary)

    def _error_for(self, reply: _Reply, method: str, path: str) -> TaskServiceError:
        text = _error_text(reply.data)
        message = f"{reply.host.url} answered {reply.status} to {method} {path}: {text}"
        kind: type[TaskServiceError] = TaskServiceError
        if reply.status == 404:
            kind = TaskNotFoundError
        elif reply.status == 409:
            kind = TaskConflictError
        return kind(message, host=reply.host.url, status=reply.status, cause=text)

    async def _refresh_health(self, force: bool = False) -> None:
        """Learn every host's load and store id (which hosts share a queue)."""
        if not force and time.monotonic() - self._health_at < self.health_ttl_s:
            return

        async def one(host: _Host) -> None:
            try:
                reply = await self._send(host, "GET", "/health", None, None)
            except _Unreachable as exc:
                self._mark_down(host, str(exc))
                return
            if isinstance(reply.data, dict):
                host.store_id = reply.data.get("store_id") or host.store_id
                if isinstance(reply.data.get("concurrency"), int):
                    host.concurrency = reply.data["concurrency"]
                if isinstance(reply.data.get("load"), (int, float)):
                    host.load = float(reply.data["load"])
                if reply.status == 200:
                    host.down_until = 0.0
                    host.failures = 0

        await asyncio.gather(*(one(h) for h in self.hosts))
        self._health_at = time.monotonic()

    def _groups(self) -> list[list[_Host]]:
        """Hosts grouped by the store they share (a host of unknown store is its own group)."""
        groups: dict[str, list[_Host]] = {}
        for host in self.hosts:
            groups.setdefault(host.store_id or f"?{host.url}", []).append(host)
        return list(groups.values())

    # --- submitting ------------------------------------------------------------------------

    async def submit_task(self, task: AworldTask | dict[str, Any]) -> TaskState:
        """Submit one task; returns its state (the stored one if the id was already submitted)."""
        task = task if isinstance(task, AworldTask) else AworldTask.model_validate(task)
        reply = await self._request("POST", f"{API}/tasks", task.model_dump(mode="json"), weight=1)
        self._where[task.task_id] = reply.host
        return TaskState.model_validate(reply.data)

    async def submit_tasks(
        self, tasks: Sequence[AworldTask | dict[str, Any]], *, parallel: int | None = None
    ) -> list[TaskState]:
        """Submit many tasks in batches spread over the hosts; states in the order given."""
        items = [t if isinstance(t, AworldTask) else AworldTask.model_validate(t) for t in tasks]
        chunks = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        limit = asyncio.Semaphore(parallel or max(2, 2 * len(self.hosts)))
        await self._refresh_health()  # each host's concurrency and load, to spread the batches

        async def send(chunk: list[AworldTask]) -> list[TaskState]:
            async with limit:
                reply = await self._request(
                    "POST",
                    f"{API}/tasks/batch",
                    {"tasks": [t.model_dump(mode="json") for t in chunk]},
                    weight=len(chunk),
                )
            for task in chunk:
                self._where[task.task_id] = reply.host
            return [TaskState.model_validate(s) for s in reply.data["states"]]

        results = await asyncio.gather(*(send(c) for c in chunks))
        return [state for chunk in results for state in chunk]

    # --- following -------------------------------------------------------------------------

    async def _find(self, method: str, path_of: Any, task_id: str) -> _Reply:
        """Ask the host that took ``task_id`` (or a host sharing its store) first, then one host
        per store, for the task."""
        causes: list[str] = []
        unreachable: list[TaskServiceError] = []
        await self._refresh_health()
        known = self._where.get(task_id)
        asked: list[_Host] = []
        if known is not None:
            asked = self._group_of(known)
            try:
                return await self._request(method, path_of(task_id), prefer=known, only=asked)
            except TaskNotFoundError as exc:
                causes.append(str(exc))
            except TaskServiceError as exc:
                if exc.status not in (None, *RETRYABLE):
                    raise
                unreachable.append(exc)
        for group in self._groups():
            if any(h in asked for h in group):
                continue
            try:
                reply = await self._request(method, path_of(task_id), only=group)
            except TaskNotFoundError as exc:
                causes.append(str(exc))
                continue
            except TaskServiceError as exc:
                if exc.status not in (None, *RETRYABLE):
                    raise
                unreachable.append(exc)
                continue
            self._where[task_id] = reply.host
            return reply
        if unreachable:
            raise TaskServiceError(
                f"task '{task_id}' was not found on the hosts that answered, and some could not be "
                f"asked: {'; '.join(str(e) for e in unreachable)}",
                host=unreachable[0].host,
                status=unreachable[0].status,
                cause=unreachable[0].cause,
            )
        raise TaskNotFoundError(
            f"no server knows task id '{task_id}' (asked {', '.join(h.url for h in self.hosts)})",
            status=404,
            cause="; ".join(causes),
        )

    async def get_task_state(self, task_id: str) -> TaskState:
        """The task's current state, from the servers (not from anything cached here)."""
        reply = await self._find("GET", lambda t: f"{API}/tasks/{quote(t, safe='')}", task_id)
        return TaskState.model_validate(reply.data)

    async def get_task_states(self, task_ids: Sequence[str]) -> list[TaskState]:
        """States of many tasks, in the order given; raises if any id is unknown to every server."""
        ids = list(dict.fromkeys(task_ids))
        found: dict[str, TaskState] = {}
        by_host: dict[str, list[str]] = {}
        for task_id in ids:
            host = self._where.get(task_id)
            if host is not None:
                by_host.setdefault(host.url, []).append(task_id)
        hosts = {h.url: h for h in self.hosts}

        async def ask(group: Sequence[_Host], wanted: list[str], prefer: _Host | None = None) -> None:
            for start in range(0, len(wanted), 5000):
                chunk = wanted[start : start + 5000]
                reply = await self._request(
                    "POST", f"{API}/tasks/states", {"task_ids": chunk}, prefer=prefer, only=group
                )
                for item in reply.data["states"]:
                    state = TaskState.model_validate(item)
                    found[state.task_id] = state
                    self._where.setdefault(state.task_id, reply.host)

        await self._refresh_health()
        await asyncio.gather(
            *(ask(self._group_of(hosts[url]), wanted, hosts[url]) for url, wanted in by_host.items())
        )
        missing = [t for t in ids if t not in found]
        if missing:
            await self._refresh_health()
            for group in self._groups():
                await ask(group, [t for t in ids if t not in found])
                if all(t in found for t in ids):
                    break
            missing = [t for t in ids if t not in found]
            if missing:
                shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                raise TaskNotFoundError(f"no server knows task id(s) {shown}", status=404)
        return [found[t] for t in task_ids]

    async def wait(
        self,
        task_ids: str | Sequence[str],
        *,
        timeout: float | None = None,
        poll_s: float = 0.5,
        unreachable_s: float = 60.0,
    ) -> Any:
        """Wait until the tasks finish; returns their final states (one state for one id).

        Raises ``TimeoutError`` naming the unfinished tasks when ``timeout`` seconds pass, and the
        connection error when the servers stay unreachable for ``unreachable_s`` seconds.
        """
        single = isinstance(task_ids, str)
        ids = [task_ids] if single else list(task_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        final: dict[str, TaskState] = {}
        outage = 0.0
        while True:
            pending = [t for t in ids if t not in final]
            if pending:
                try:
                    states = await self.get_task_states(pending)
                except TaskServiceError as exc:
                    # a host restarting is not the task failing: keep waiting, up to a point
                    if exc.status not in (None, *RETRYABLE) or isinstance(exc, TaskNotFoundError):
                        raise
                    outage = outage or time.monotonic()
                    if time.monotonic() - outage > unreachable_s:
                        raise
                    states = []
                else:
                    outage = 0.0
                for state in states:
                    if state.status.terminal:
                        final[state.task_id] = state
            if len(final) == len(set(ids)):
                states = [final[t] for t in ids]
                return states[0] if single else states
            if deadline is not None and time.monotonic() >= deadline:
                left = [t for t in ids if t not in final]
                raise TimeoutError(
                    f"{len(left)} of {len(set(ids))} task(s) not finished after {timeout} s: "
                    f"{', '.join(left[:5])}{' ...' if len(left) > 5 else ''}"
                )
            sleep = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
            await asyncio.sleep(sleep)

    async def get_result(self, task_id: str, *, wait: bool = False, timeout: float | None = None) -> TaskResult:
        """The finished task with its trajectory. ``wait=True`` waits for it to finish first;
        otherwise a task still running raises :class:`TaskConflictError` (409)."""
        if wait:
            await self.wait(task_id, timeout=timeout)
        reply = await self._find("GET", lambda t: f"{API}/tasks/{quote(t, safe='')}/result", task_id)
        return TaskResult.model_validate(reply.data)

    async def get_attempts(self, task_id: str) -> list[TaskAttempt]:
        reply = await self._find("GET", lambda t: f"{API}/tasks/{quote(t, safe='')}/attempts", task_id)
        return [TaskAttempt.model_validate(a) for a in reply.data["attempts"]]

    async def cancel(self, task_id: str) -> TaskState:
        """Cancel a task: a queued one at once, a running one at its host's next lease renewal."""
        reply = await self._find("POST", lambda t: f"{API}/tasks/{quote(t, safe='')}/cancel", task_id)
        return TaskState.model_validate(reply.data)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | str | Sequence[TaskStatus | str] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 1000,
    ) -> list[TaskState]:
        """Tasks matching the filters, from every store (oldest first per store)."""
        params = _filter_params(status, agent_id, user_id, session_id, None)
        await self._refresh_health()
        out: list[TaskState] = []
        for group in self._groups():
            after = 0
            while len(out) < limit:
                page_params = {**params, "after": str(after), "limit": str(min(1000, limit - len(out)))}
                reply = await self._request("GET", f"{API}/tasks", params=page_params, only=group)
                out.extend(TaskState.model_validate(s) for s in reply.data["tasks"])
                if reply.data.get("next_after") is None:
                    break
                after = reply.data["next_after"]
        return out[:limit]

    async def health(self) -> dict[str, Any]:
        """Each host's ``/health`` answer (or the error reaching it), by host URL."""
        out: dict[str, Any] = {}

        async def one(host: _Host) -> None:
            try:
                reply = await self._send(host, "GET", "/health", None, None)
                out[host.url] = reply.data
            except _Unreachable as exc:
                out[host.url] = {"status": "unreachable", "error": str(exc)}

        await asyncio.gather(*(one(h) for h in self.hosts))
        return out

    # --- trajectories ----------------------------------------------------------------------

    async def iter_trajectories(
        self,
        *,
        status: TaskStatus | str | Sequence[TaskStatus | str] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        task_ids: Sequence[str] | None = None,
    ) -> AsyncIterator[TaskResult]:
        """Finished tasks with their episodes, once each, from every store."""
        async for line in self._trajectory_lines(status, agent_id, user_id, session_id, task_ids):
            yield TaskResult.model_validate_json(line)

    async def download_trajectories(
        self,
        path: str | Path,
        *,
        status: TaskStatus | str | Sequence[TaskStatus | str] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        task_ids: Sequence[str] | None = None,
    ) -> int:
        """Write finished tasks (TaskResult JSON, one per line) to ``path``; returns how many.

        Default: every finished task; ``status="success"`` keeps only trainable ones.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        count = 0
        tmp = path.with_name(path.name + ".part")
        with tmp.open("wb") as out:
            async for line in self._trajectory_lines(status, agent_id, user_id, session_id, task_ids):
                out.write(line + b"\n")
                count += 1
        tmp.replace(path)
        return count

    async def _trajectory_lines(
        self, status: Any, agent_id: Any, user_id: Any, session_id: Any, task_ids: Any
    ) -> AsyncIterator[bytes]:
        queries = [_filter_params(status, agent_id, user_id, session_id, None)]
        if task_ids is not None:  # ids go in the query string: a few hundred per request
            ids = list(task_ids)
            if not ids:
                return
            queries = [
                _filter_params(status, agent_id, user_id, session_id, ids[i : i + 200])
                for i in range(0, len(ids), 200)
            ]
        await self._refresh_health(force=True)
        seen: set[str] = set()
        for group in self._groups():
            for params in queries:
                async for line in self._stream_group(group, params, seen):
                    yield line

    async def _stream_group(self, group: list[_Host], params: dict[str, str], seen: set[str]) -> AsyncIterator[bytes]:
        import aiohttp

        causes: list[str] = []
        for attempt in range(self.retries + 1):
            host = min((h for h in group if h.up), key=_Host.score, default=None) or group[attempt % len(group)]
            try:
                async with self._http().get(
                    f"{host.url}{API}/trajectories",
                    params=params,
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=self.timeout_s),
                ) as resp:
                    if resp.status != 200:
                        data = await resp.read()
                        reply = _Reply(host, resp.status, _json_or_text(data))
                        if resp.status in RETRYABLE:
                            raise _Unreachable(f"HTTP {resp.status}: {_error_text(reply.data)}")
                        raise self._error_for(reply, "GET", f"{API}/trajectories")
                    buffer = b""
                    async for chunk in resp.content.iter_chunked(1 << 16):
                        buffer += chunk
                        *lines, buffer = buffer.split(b"\n")
                        for line in lines:
                            if line and _take(line, seen):
                                yield line
                    if buffer.strip() and _take(buffer, seen):
                        yield buffer
                break
            except (TimeoutError, _Unreachable, aiohttp.ClientError, OSError) as exc:
                self._mark_down(host, str(exc))
                causes.append(f"{host.url}: {exc}")
                await asyncio.sleep(min(self.backoff_s * 2**attempt, self.max_backoff_s))
        else:
            raise TaskServiceError(
                f"could not download trajectories from {', '.join(h.url for h in group)}: {'; '.join(causes)}",
                host=group[0].url,
                cause="; ".join(causes),
            )


class _Unreachable(Exception):
    pass


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 1.0
    except ValueError:
        return 1.0


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


_TASK_ID = re.compile(rb'^\{"task_id":"((?:[^"\\]|\\.)*)"')


def _take(line: bytes, seen: set[str]) -> bool:
    """True the first time a task id is seen (a retried stream repeats what it already sent)."""
    match = _TASK_ID.match(line)  # TaskResult JSON starts with its task_id: no need to parse it all
    head = match.group(1).decode() if match else json.loads(line).get("task_id")
    if head in seen:
        return False
    seen.add(head)
    return True


def _filter_params(status: Any, agent_id: Any, user_id: Any, session_id: Any, task_ids: Any) -> dict[str, str]:
    params: dict[str, str] = {}
    if status is not None:
        items = [status] if isinstance(status, (str, TaskStatus)) else list(status)
        params["status"] = ",".join(TaskStatus(s).value for s in items)
    for name, value in (("agent_id", agent_id), ("user_id", user_id), ("session_id", session_id)):
        if value is not None:
            params[name] = value
    if task_ids is not None:
        params["task_ids"] = ",".join(task_ids)
    return params
