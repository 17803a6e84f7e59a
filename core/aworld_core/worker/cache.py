"""Per-process worker state, built once per job and settings and closed at exit.

Frameworks build their worker-side object from an import path and plain kwargs, often per prompt
or per sample (AReaL's ``RemoteInfEngine._resolve_workflow`` constructs the workflow for every
submitted prompt; verl instantiates an agent loop per sample). What those objects need that is
costly (the parsed job, the tokenizer, the agent, token clients, gateways, counters) belongs in
one state per process and key that every instance shares: a :class:`WorkerCache`.
:func:`shared_tokenizer` loads a tokenizer directory once per process.
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Callable, Hashable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from aworld_core.errors import UsageError

S = TypeVar("S")


class _Build:
    """One key's build in progress: the other callers for that key wait on it, nobody else does."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.done = threading.Event()


class WorkerCache(Generic[S]):
    """States keyed by what makes them differ, built on first use, closed together.

    ``close``: how one state is closed (also a state that ``valid`` rejects, when it is replaced).
    ``on_exit``: what the first state registers with ``atexit`` (default :meth:`close`), once per
    cache; with neither, nothing is registered. Each key is built on its own: a slow build holds
    up only the callers of its key, and a build may use the cache for other keys (from any thread).
    """

    def __init__(self, close: Callable[[S], Any] | None = None, on_exit: Callable[[], Any] | None = None):
        self._states: dict[Hashable, S] = {}
        self._aliases: dict[Hashable, Hashable] = {}  # (job text, options) -> key
        self._building: dict[Hashable, _Build] = {}
        self._lock = threading.Lock()  # guards the dicts only; never held while building or closing
        self._close = close
        self._on_exit = on_exit
        self.exit_registered = False

    def get(self, key: Hashable, build: Callable[[], S], *, valid: Callable[[S], bool] | None = None) -> S:
        """The state for ``key``; ``build()`` makes it when there is none, or when ``valid``
        says the cached one is stale (ids of dead objects get reused; the stale one is closed)."""
        while True:
            stale: list[S] = []
            with self._lock:
                state = self._states.get(key)
            if state is not None and (valid is None or valid(state)):  # outside the lock: it may use the cache
                return state
            with self._lock:
                if self._states.get(key) is not state:
                    continue  # replaced meanwhile: look again
                pending = self._building.get(key)
                if pending is None:
                    if state is not None:
                        stale.append(self._states.pop(key))
                    pending = self._building[key] = _Build()
                    break
            if pending.thread == threading.get_ident():
                raise UsageError(f"the build of worker state {key!r} asked for its own state (a build calls itself)")
            pending.done.wait()  # then look again: its state, or (it failed) build ours
        try:
            for old in stale:
                if self._close is not None:
                    self._close(old)
            state = build()
        except BaseException:
            with self._lock:
                del self._building[key]
            pending.done.set()
            raise
        with self._lock:
            self._states[key] = state
            del self._building[key]
            register = not self.exit_registered and (self._close is not None or self._on_exit is not None)
            self.exit_registered = self.exit_registered or register
        pending.done.set()
        if register:
            atexit.register(self._on_exit or self.close)
        return state

    def for_job(
        self, job: Any, options: Hashable, build: Callable[[Any], S], *, valid: Callable[[S], bool] | None = None
    ) -> S:
        """The state for ``job`` (JSON text, dict, file path or ``JobConfig``) and ``options``:
        ``build(parsed_job)`` on first use (``valid`` as in :meth:`get`). Jobs that are the same
        config share one state; JSON text as a framework passes it with every call is looked up
        as is, without parsing again."""
        from aworld_core.worker.build import job_key, load_job  # build's own caches are WorkerCaches

        text = job if isinstance(job, str) and job.lstrip().startswith("{") else None
        with self._lock:
            key = self._aliases.get((text, options)) if text is not None else None
        parsed: list[Any] = []
        if key is None:
            parsed.append(load_job(job))
            key = (job_key(parsed[0]), options)
            if text is not None:
                with self._lock:
                    self._aliases[(text, options)] = key
        return self.get(key, lambda: build(parsed[0] if parsed else load_job(job)), valid=valid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)

    def states(self) -> list[S]:
        with self._lock:
            return list(self._states.values())

    def pop(self, which: Callable[[Hashable, S], bool]) -> list[S]:
        """Forget (and return, unclosed) the states ``which(key, state)`` selects."""
        with self._lock:
            keys = [k for k, s in self._states.items() if which(k, s)]
            states = [self._states.pop(k) for k in keys]
            for alias in [a for a, k in self._aliases.items() if k in keys]:
                del self._aliases[alias]
            return states

    def close(self) -> None:
        """Close every state and forget them (the next ``get`` builds afresh)."""
        for state in self.pop(lambda _key, _state: True):
            if self._close is not None:
                self._close(state)


def options_key(**parts: Any) -> str:
    """A cache key of a worker's options (dataclasses, dicts, paths; any other object by identity)."""

    def plain(value: Any) -> Any:
        if is_dataclass(value) and not isinstance(value, type):
            return asdict(value)
        if isinstance(value, (str, int, float, bool, type(None), dict, list, tuple, Path)):
            return value
        return f"object:{id(value)}"

    return json.dumps({k: plain(v) for k, v in parts.items()}, sort_keys=True, default=str)


def _load_tokenizer(ref: str | Path) -> Any:
    from aworld_core.tokens.llm import load_tokenizer

    return load_tokenizer(ref)


#: the process's tokenizers by directory: a cache like the backends' own (``close()`` forgets them)
TOKENIZERS: WorkerCache[Any] = WorkerCache()


def shared_tokenizer(ref: Any) -> Any:
    """A tokenizer object as is; a directory (``str``/``Path``) loaded once per process
    (:data:`TOKENIZERS`; loading one directory does not hold up another)."""
    if not isinstance(ref, (str, Path)):
        return ref
    return TOKENIZERS.get(str(ref), lambda: _load_tokenizer(ref))
