"""The calls the gateway failed on the server side, per session: the one owner of that record.

Why: an agent written against the OpenAI API may swallow an error (smolagents'
``provide_final_answer`` catches every exception and returns its text as the answer), so the
agent function returning normally does not mean its episode is whole. What the gateway itself
answered is the only reliable witness, so it records, per session, every call it failed:

* every 5xx: ``502`` (the token engine failed) and ``500`` (anything else on the server side);
* ``400 context_length_exceeded``: the prompt is over the token client's ``max_prompt_tokens``.
  OpenAI answers an overflow with this 400 too, but here it is a limit of the training setup, not
  a mistake of the client: the episode was cut short, so it fails.

Every other 4xx is a client mistake (a refused field, a second call in flight, a call after
``finish_session``, an unknown stored response): the agent got the answer OpenAI would give, nothing
was sampled or recorded, and the episode is what the agent does with that answer, so it is not a
failure of the episode.

A ``502`` that a later **identical** request in the same session answered (an SDK's retry: same
path, same body bytes) is kept with ``retried=True`` and does not fail the episode: the engine
failed before anything was committed, the client got its answer and its conversation went on as if
the failure never happened. Any other failure stands even when retried (a ``500`` may come after
the sampled turn was appended to the session).

:class:`GatewayFailures` keeps the records, one per token client (:func:`failures_of`: every gateway
over the same ``TokenLLM`` shares it), so every path that collects a session's training view finds
them, however the agent reached the gateway: ``Gateway.finish(id)`` (the OpenAI-API agent's
episodes), the runtime's ``finish_sessions`` (a core ``Agent`` or a tool that calls the gateway with
an ``X-Session-Id``) and the worker kit (a rollout plugin that drove the gateway itself, the seed's
style inside verl's ``AworldAgentLoop``). :func:`finished_session` / :func:`episode_failures` pop a
session's (an episode's) records as a :class:`FinishedSession`, whose
:meth:`~FinishedSession.error` is the episode's error message, and :func:`settle_episode` is the one
rule that fails an episode on them.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from aworld_core.schemas import Episode, EpisodeStatus, TrainingView
from aworld_core.secrets import mask

#: the OpenAI error code of a prompt over the context limit (a 4xx that fails the episode)
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
#: a recorded message is cut to this many characters
MAX_MESSAGE_CHARS = 500
#: records kept per session (later failures are counted, not kept)
MAX_PER_SESSION = 32
#: ``episode.metadata`` key: the calls the gateway failed in the episode (``CallFailure`` dumps)
GATEWAY_FAILURES = "gateway_failures"


def fails_episode(status: int, code: str | None) -> bool:
    """Whether an error answer of the gateway is a failure of the episode (see the module docstring)."""
    return status >= 500 or (status == 400 and code == CONTEXT_LENGTH_EXCEEDED)


def clean_message(message: str) -> str:
    """``message`` with registered secrets masked (``aworld_core.secrets``), cut to a readable length."""
    text = mask(message)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def request_key(path: str, body: bytes) -> str:
    """What identifies a retry of a request: its API path and its body bytes."""
    return hashlib.sha256(path.encode() + b"\0" + body).hexdigest()


class CallFailure(BaseModel):
    """One call the gateway failed: its HTTP ``status``, OpenAI error ``type`` and ``code``, the
    ``message`` it answered (secrets masked), the API it was (``chat.completions`` /
    ``responses``) and whether a later identical request was answered (``retried``)."""

    model_config = ConfigDict(extra="forbid")

    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    api: str = "chat.completions"
    retried: bool = False

    def describe(self) -> str:
        return f"{self.status} {self.message}"


@dataclass
class FinishedSession:
    """A finished session as the gateway saw it: the training view (``None`` when nothing was
    sampled) and every call it failed, in order. ``failed`` is the failures no retry answered; an
    episode with any must not train."""

    view: TrainingView | None
    failures: list[CallFailure] = field(default_factory=list)
    more_failures: int = 0  # failures past MAX_PER_SESSION, counted only

    @property
    def failed(self) -> list[CallFailure]:
        return [f for f in self.failures if not f.retried]

    def error(self) -> str | None:
        """The episode's error (``None`` when no failure stands): how many calls failed and the first."""
        failed = self.failed
        if not failed and not self.more_failures:
            return None
        first = failed[0] if failed else self.failures[-1]  # the counted ones were never checked for a retry
        return f"the gateway failed {len(failed) + self.more_failures} call(s): first: {first.describe()}"


@dataclass
class _Record:
    failures: list[CallFailure] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # request_key of each failure
    more: int = 0


class GatewayFailures:
    """Thread-safe, bounded per-session failure records (a session the backend never finishes is
    forgotten after ``max_sessions`` newer ones)."""

    def __init__(self, max_sessions: int = 10_000):
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def record(self, session_id: str, failure: CallFailure, key: str | None = None) -> None:
        with self._lock:
            rec = self._records.get(session_id)
            if rec is None:
                rec = self._records[session_id] = _Record()
                while len(self._records) > self.max_sessions:
                    self._records.popitem(last=False)
            if len(rec.failures) >= MAX_PER_SESSION:
                rec.more += 1
                return
            rec.failures.append(failure)
            rec.keys.append(key or "")

    def answered(self, session_id: str, key: str) -> None:
        """A request with ``key`` succeeded: earlier ``502`` failures of the same request were retried.

        Only a ``502`` is cleared: the token engine failed before anything was committed to the
        session. A ``500`` may come after ``TokenLLM.chat`` already appended the sampled turn, so the
        session may hold a turn the client never saw; a retry cannot undo that, and it stands."""
        with self._lock:
            rec = self._records.get(session_id)
            if rec is None:
                return
            for i, k in enumerate(rec.keys):
                if k == key and rec.failures[i].status == 502 and not rec.failures[i].retried:
                    rec.failures[i] = rec.failures[i].model_copy(update={"retried": True})

    def of(self, session_id: str) -> list[CallFailure]:
        with self._lock:
            rec = self._records.get(session_id)
            return [] if rec is None else list(rec.failures)

    def pop(self, session_id: str) -> tuple[list[CallFailure], int]:
        """The session's failures and how many more were only counted, forgetting them."""
        with self._lock:
            rec = self._records.pop(session_id, None)
        return ([], 0) if rec is None else (rec.failures, rec.more)

    def pop_episode(self, episode_id: str) -> tuple[list[CallFailure], int]:
        """:meth:`pop` for every session of an episode (``id`` and ``id:k``, the runtime's names)."""
        with self._lock:
            names = [s for s in self._records if s == episode_id or s.startswith(f"{episode_id}:")]
            recs = [self._records.pop(s) for s in names]
        return [f for r in recs for f in r.failures], sum(r.more for r in recs)


# -- one record per token client, found by whoever collects its sessions ----------------------

_records_lock = threading.Lock()
_records: weakref.WeakKeyDictionary[Any, GatewayFailures] = weakref.WeakKeyDictionary()


def failures_of(llm: Any) -> GatewayFailures:
    """The failure record of the token client ``llm``, shared by every gateway over it (made on
    first use): a session lives in the client, so whoever collects it (the runtime, the kit, a
    gateway) finds its failures here, whichever gateway the agent called."""
    with _records_lock:
        try:
            record = _records.get(llm)
            if record is None:
                record = _records[llm] = GatewayFailures()
        except TypeError:  # a client that takes no weak reference: a record of this gateway's own
            record = GatewayFailures()
        return record


def _records_over(llm: Any) -> list[GatewayFailures]:
    """The records a collector of ``llm``'s sessions must consult: its own and, for a multi-policy
    router (``PolicyClients``), each policy's token client's (gateways sit over those)."""
    candidates = [llm]
    from aworld_core.policy_clients import PolicyClients

    if isinstance(llm, PolicyClients):
        candidates += list(llm.clients.values())
    with _records_lock:
        found = []
        for client in candidates:
            try:
                record = _records.get(client)
            except TypeError:
                record = None
            if record is not None:
                found.append(record)
        return found


def finished_session(llm: Any, session_id: str, view: TrainingView | None) -> FinishedSession:
    """``view`` (what ``llm.finish_session(session_id)`` returned) with the calls the gateways over
    ``llm`` failed in that session, forgetting them: what a collector of the session's view hands
    to :func:`settle_episode`."""
    return FinishedSession(view, *_pop_all(llm, lambda record: record.pop(session_id)))


def episode_failures(llm: Any, episode_id: str) -> FinishedSession:
    """The failures still recorded for any session of ``episode_id`` (``id``, ``id:k``), forgetting
    them (no view): for a collector that did not finish the sessions itself (a rollout plugin's)."""
    return FinishedSession(None, *_pop_all(llm, lambda record: record.pop_episode(episode_id)))


def _pop_all(llm: Any, take: Any) -> tuple[list[CallFailure], int]:
    """``take(record)`` (a ``(failures, uncounted)`` pop) over every record of the gateways over ``llm``."""
    failures: list[CallFailure] = []
    more = 0
    for record in _records_over(llm):
        found, counted = take(record)
        failures += found
        more += counted
    return failures, more


def settle_episode(episode: Episode, sessions: Iterable[FinishedSession]) -> str | None:
    """The rule, in one place: the episode's failed calls are recorded in
    ``episode.metadata["gateway_failures"]``, and a standing one (no retry answered it) turns a
    ``SUCCESS`` into ``FAILED`` with :meth:`FinishedSession.error`'s message; nothing of such an
    episode may train (the caller keeps no view). Returns that error (``None``: no failure stands).

    Why the episode and not only its session: an agent may swallow the error (smolagents answers
    with its text, a seed-style agent's own loop catches it) and end normally."""
    sessions = list(sessions)
    merged = FinishedSession(None, [f for s in sessions for f in s.failures], sum(s.more_failures for s in sessions))
    if merged.failures:
        kept = episode.metadata.get(GATEWAY_FAILURES) or []
        episode.metadata[GATEWAY_FAILURES] = [*kept, *(f.model_dump(mode="json") for f in merged.failures)]
    error = merged.error()
    if error is not None and episode.status is EpisodeStatus.SUCCESS:
        episode.finish(EpisodeStatus.FAILED, error)
    return error
