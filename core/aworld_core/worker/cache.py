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

from aworld_core.worker.build import job_key, load_job

S = TypeVar("S")

_tokenizers: dict[str, Any] = {}
_tokenizers_lock = threading.Lock()


class WorkerCache(Generic[S]):
    """States keyed by what makes them differ, built on first use, closed together.

    ``close``: how one state is closed. ``on_exit``: what the first state registers with
    ``atexit`` (default :meth:`close`), once per cache; with neither, nothing is registered.
    """

    def __init__(self, close: Callable[[S], Any] | None = None, on_exit: Callable[[], Any] | None = None):
        self._states: dict[Hashable, S] = {}
        self._aliases: dict[Hashable, S] = {}
        self._lock = threading.RLock()
        self._close = close
        self._on_exit = on_exit
        self.exit_registered = False

    def get(self, key: Hashable, build: Callable[[], S], *, valid: Callable[[S], bool] | None = None) -> S:
        """The state for ``key``; ``build()`` makes it when there is none, or when ``valid``
        says the cached one is stale (ids of dead objects get reused)."""
        with self._lock:
            state = self._states.get(key)
            if state is not None and (valid is None or valid(state)):
                return state
            state = self._states[key] = build()
            if not self.exit_registered and (self._close is not None or self._on_exit is not None):
                atexit.register(self._on_exit or self.close)
                self.exit_registered = True
            return state

    def for_job(self, job: Any, options: Hashable, build: Callable[[Any], S]) -> S:
        """The state for ``job`` (JSON text, dict, file path or ``JobConfig``) and ``options``:
        ``build(parsed_job)`` on first use. Jobs that are the same config share one state; JSON
        text as a framework passes it with every call is looked up as is, without parsing again."""
        text = job if isinstance(job, str) and job.lstrip().startswith("{") else None
        with self._lock:
            if text is not None and (text, options) in self._aliases:
                return self._aliases[(text, options)]
            parsed = load_job(job)
            state = self.get((job_key(parsed), options), lambda: build(parsed))
            if text is not None:
                self._aliases[(text, options)] = state
            return state

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
            for alias in [a for a, s in self._aliases.items() if any(s is t for t in states)]:
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


def shared_tokenizer(ref: Any) -> Any:
    """A tokenizer object as is; a directory (``str``/``Path``) loaded once per process."""
    if not isinstance(ref, (str, Path)):
        return ref
    with _tokenizers_lock:
        tokenizer = _tokenizers.get(str(ref))
        if tokenizer is None:
            from aworld_core.tokens.llm import load_tokenizer

            tokenizer = _tokenizers[str(ref)] = load_tokenizer(ref)
        return tokenizer
