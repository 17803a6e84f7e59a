"""One ms-swift trajectory driven by a real AWorld episode, token by token.

ms-swift owns the generation loop: each turn it samples a continuation for every trajectory of
the batch, then calls the scheduler's hooks. The agent, though, is the core's: its episode runs
through the worker kit's ``EpisodeRunner`` (the ``rollout`` hook, failures recorded, scored) with
a token client whose engine (:class:`SwiftTurnEngine`) does not sample at all. Each generation the
episode asks for is parked until ms-swift has sampled that turn; the scheduler hands the sampled
ids back, the episode parses them, runs the tool calls and asks for the next generation, and the
ids the token client put between the two generations (the tool results and the next generation
prompt, rendered by the model's chat template) are what the scheduler appends to ms-swift's
sequence with loss mask 0.

So the sequence ms-swift trains is, token for token, the one the token client accumulated: the
sampled ids exactly as ms-swift returned them (mask 1) and the environment ids between them (mask 0).

**Segments.** When the token client begins a new training segment (the agent compacted its context,
the client rewrote its history: the next prompt does not extend the sequence), ms-swift's next
generation must be sampled from that new prompt, not from the continued sequence. The trajectory
hands ms-swift the segment's prompt as messages ms-swift renders itself (``Trajectory.segment_request``):
the first prompt's messages continued by the ids the new prompt adds after the first prompt (an
id-backed assistant message, as ms-swift continues every turn), or, when the new prompt does not
start with the first one (a summary that replaced the history), the new conversation's own plain
messages. Each segment then becomes its own row of ms-swift's batch: its ms-swift prompt, then
exactly the segment's response ids (sampled mask 1, environment mask 0) and its sampled tokens'
logprobs (``trajectory_info``'s ``segments``; :mod:`aworld_swift.segments` turns them into rows).

**Forced openings.** A turn the client constrained (``tool_choice: "required"`` or a named function,
``aworld_core.tokens.turn``) begins with ids the token client forced, never sampled. On a continued
turn they are environment ids like the others (mask 0, and ms-swift samples after them); on a
segment's first turn (the episode's first generation included) they end the segment's prompt, so
ms-swift's messages for that segment end with an id-backed assistant message holding them (its
prefix: ms-swift samples after them, and trains them with mask 0). ms-swift's server-mode driver
(``MultiTurnScheduler.run``) drops such a message before the first generation, so there an episode
whose first turn is forced is refused (the scheduler's ``on_trajectory_start``).

Nothing here imports ms-swift: :mod:`aworld_swift.scheduler` adapts this to ms-swift's hooks.
Everything async here runs on the process's episode loop (``SwiftRuntime.loop``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aworld_core import LLMResponse
from aworld_core.errors import LLMError, UsageError
from aworld_core.schemas import (
    Episode,
    EpisodeStatus,
    Message,
    RolloutContext,
    Sample,
    SamplingParams,
    TrainingView,
)
from aworld_core.tokens import LENGTH, STOP, STOP_TOKEN_IDS, TokenOutput, TurnRefused, current_turn
from aworld_core.worker import describe, mask_runs, tool_counts, untrainable_reason

if TYPE_CHECKING:
    from aworld_swift.runtime import SwiftRuntime

INFO_KEY = "aworld"  # the key of our entry in ms-swift's per-trajectory ``rollout_infos``

# why a new training segment cannot be sampled on ms-swift (the episode fails, recorded, never trained)
SEGMENT_UNRENDERABLE = (
    "the episode began a new training segment (its conversation was rewritten or compacted) whose prompt "
    "neither continues the episode's first prompt nor is a conversation of plain system, user and assistant "
    "messages ({why}); ms-swift samples every generation from messages it renders itself, so the swift backend "
    "cannot sample that segment from the prompt the agent built: the episode is recorded as failed and trains "
    "nothing. Compact with agent.compaction.strategy 'summary', or train this agent on trl, verl (V1) or areal"
)

FORCED_FIRST_TURN_IN_SERVER_MODE = (
    "the episode's first call constrains its turn (tool_choice 'required' or a named function: its opening is forced, "
    "not sampled), and ms-swift's server-mode driver (MultiTurnScheduler.run) drops the first prompt's trailing "
    "assistant message that holds such an opening, so the turn would be sampled unconstrained. Train this agent "
    "with ms-swift in colocate mode (unset backends.swift.vllm_mode), or have its first call leave tool_choice out"
)


# why ms-swift's jinja template backend is refused (at launch and by the scheduler)
JINJA_BACKEND = (
    "ms-swift's template_backend is 'jinja', which renders the id-backed assistant message ms-swift continues "
    "every multi-turn trajectory with (its token ids) as the text of the list ('[305, 27, ...]'): every turn "
    "after the first would be sampled from a prompt the agent never built. Use "
    "template_backend 'swift' (ms-swift's default; unset backends.swift.template_backend) with a --template "
    "and --agent_template that render the model's format"
)


@dataclass
class TurnRequest:
    """The episode asked for a generation: the prompt the token client built, and where the
    sampled ids go."""

    prompt_ids: list[int]
    future: asyncio.Future[TokenOutput]
    forced: list[int] = field(default_factory=list)  # the prompt's last ids, forced by the turn (not sampled)
    sampling: SamplingParams | None = None  # what the turn asked (max_tokens and stop are honoured here)


@dataclass
class EpisodeDone:
    episode: Episode
    fatal: UsageError | None = None


# where one episode (asking for generations) meets one ms-swift trajectory (answering)
Bridge = asyncio.Queue[TurnRequest | EpisodeDone]


class SwiftTurnEngine:
    """A ``TokenEngine`` whose generations are sampled by ms-swift, one trajectory per episode."""

    def __init__(self) -> None:
        self._bridges: dict[str, Bridge] = {}
        self._lock = threading.Lock()

    def attach(self, session_id: str, bridge: Bridge) -> None:
        with self._lock:
            self._bridges[session_id] = bridge

    def detach(self, session_id: str) -> None:
        with self._lock:
            self._bridges.pop(session_id, None)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        with self._lock:
            bridge = self._bridges.get(request_id)
        if bridge is None:
            raise LLMError(
                f"session {request_id!r} has no ms-swift trajectory: ms-swift trains one conversation per "
                "trajectory, so only the first conversation of the trained agent in an episode can be trained "
                "(a second trained agent, or a trained agent called twice, cannot be trained on the swift "
                "backend; train one agent and give the others their own endpoints)"
            )
        # the ids the token client forced at the end of this prompt (a constrained turn): a segment's
        # first turn must hand them to ms-swift as part of its prompt
        turn = current_turn()
        forced = list(turn.forced_ids) if turn is not None else []
        if forced and prompt_ids[len(prompt_ids) - len(forced):] != forced:
            forced = []
        future: asyncio.Future[TokenOutput] = asyncio.get_running_loop().create_future()
        bridge.put_nowait(TurnRequest(list(prompt_ids), future, forced, sampling))
        return await future


class RequestRecorder:
    """The kit's token client, remembering each session's latest request (messages and tools):
    ms-swift renders a trajectory's first prompt itself, from the messages the episode really
    starts with. Everything else is the token client's own."""

    def __init__(self, llm: Any, fixed: dict[str, Any] | None = None):
        self.llm = llm
        self.fixed = dict(fixed or {})  # the sampling ms-swift samples every turn with (``swift_sampling``)
        self._requests: dict[str, tuple[list[Message], list[dict[str, Any]] | None]] = {}
        self._lock = threading.Lock()

    async def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
                   sampling: SamplingParams | None = None, *, session_id: str | None = None,
                   turn: Any = None) -> LLMResponse:
        if session_id is not None:
            with self._lock:
                self._requests[session_id] = (list(messages), tools)
        if turn is not None:  # an OpenAI client's turn options (the core's gateway): honoured or refused there
            self.check_sampling(sampling)
            return await self.llm.chat(messages, tools, sampling, session_id=session_id, turn=turn)
        return await self.llm.chat(messages, tools, sampling, session_id=session_id)

    def check_sampling(self, sampling: SamplingParams | None) -> None:
        """An OpenAI client's sampling settings that ms-swift cannot honour per request, refused (the
        gateway answers 400 naming the field): ms-swift samples every turn of the batch with the job's
        temperature, top_p and top_k, and its own seed. (``max_tokens`` and ``stop`` are honoured:
        ``Trajectory.honour``.)"""
        if sampling is None:
            return
        for key in ("temperature", "top_p", "top_k", "seed"):
            value = getattr(sampling, key)
            if value is None or (key in self.fixed and self.fixed[key] == value):
                continue
            fix = (f"leave '{key}' out, or send the job's value ({self.fixed[key]!r})" if self.fixed.get(key) is not None
                   else f"leave '{key}' out" + ("" if key == "seed" else f", or set rollout.sampling.{key} in the job "
                                                "to it"))
            raise TurnRefused(
                f"'{key}' {value!r}: on the swift backend ms-swift samples every turn with the job's sampling "
                f"(rollout.sampling / backends.swift), not per request, so it would be ignored; {fix}", key)

    def request_of(self, session_id: str) -> tuple[list[Message], list[dict[str, Any]] | None]:
        with self._lock:
            return self._requests[session_id]

    def finish_session(self, session_id: str) -> Any:
        with self._lock:
            self._requests.pop(session_id, None)
        return self.llm.finish_session(session_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)


class Trajectory:
    """Scheduler-side state of one trajectory and the coroutines that advance its episode.

    The coroutines run on the episode loop; the scheduler's synchronous hooks only read the
    fields (``turn_sampled``, ``turn_env``, ...) they set.
    """

    def __init__(self, uuid: str, sample: Sample, runtime: SwiftRuntime, max_steps: int | None = None):
        self.uuid = uuid
        self.sample = sample
        self.runtime = runtime
        self.max_steps = max_steps
        self.episode_id = f"ep-swift-{uuid}"
        self.bridge: Bridge | None = None
        self.task: asyncio.Task[None] | None = None
        self.pending: TurnRequest | None = None
        self.prompt_ids: list[int] = []  # the token client's prompt of the pending generation
        self.turns = 0
        self.turn_sampled: list[int] = []
        self.turn_logprobs: list[float] | None = None
        self.turn_env: list[int] = []
        self.last_sampled: list[int] = []  # the last turn's sampled ids as the episode kept them (``honour``)
        self.last_logprobs: list[float] | None = None
        self.final_response: tuple[list[int], list[int]] | None = None  # the last turn's ids and mask, when cut
        self.episode: Episode | None = None
        self.fatal: UsageError | None = None
        self.untrainable: str | None = None  # why nothing of this trajectory may be trained
        self.final = False  # ms-swift ends the trajectory after this turn
        self.swift_prompt_ids: list[int] | None = None  # the prompt as ms-swift rendered it
        self.info: dict[str, Any] = {}
        # the mask / logprob lists handed to ms-swift, zeroed / emptied in place if the trajectory turns
        # out untrainable (ms-swift keeps and extends them by reference until the trajectory's output is built)
        self.masks: list[list[int]] = []
        self.logprob_lists: list[list[float]] = []
        # training segments (see the module docstring): the token client's first prompt, each segment's
        # messages as ms-swift renders them, the ids ms-swift holds before a segment's first sampled token
        # in its assistant message, each segment's ms-swift prompt ids, and the open segment's response ids
        self.first_prompt_ids: list[int] = []  # without the forced opening of the first turn
        self.first_forced: list[int] = []  # the first turn's forced opening (ms-swift's first prompt ends with it)
        self.opening: list[int] = []  # forced ids ms-swift's own response ids still lack (set by ``begin``)
        self.tools: Any = None  # the tools ms-swift renders (the dataset row's)
        self.segment_messages: list[list[dict[str, Any]]] = []
        self.segment_prefixes: list[list[int]] = []
        self.segment_prompts: list[list[int] | None] = []
        self.segment_ids: list[int] = []
        self.new_segment = False  # the next generation opens a segment: ``step`` hands ms-swift its request
        # why the episode was ended by length before its next generation (its next prompt would not fit
        # ms-swift's length limit: ``end_at_length``), else None
        self.length_end: str | None = None

    # -- the episode side (episode loop) ---------------------------------------------------------

    async def start(self) -> tuple[list[Message], list[dict[str, Any]] | None] | None:
        """Start the episode and wait for its first generation: its messages and tools, or
        ``None`` when the episode ended without asking (e.g. its MCP server refused it)."""
        self.bridge = asyncio.Queue()
        self.runtime.engine.attach(self.episode_id, self.bridge)
        self.task = asyncio.ensure_future(self._run_episode())
        event = await self.bridge.get()
        if isinstance(event, EpisodeDone):
            self._ended(event)
            return None
        self.pending = event
        self.prompt_ids = event.prompt_ids
        self.first_forced = list(event.forced)
        self.first_prompt_ids = list(event.prompt_ids[: len(event.prompt_ids) - len(event.forced)])
        return self.runtime.llm.request_of(self.episode_id)

    def begin(self, messages: list[dict[str, Any]], tools: Any, prompt_ids: list[int] | None) -> None:
        """The first segment: the messages ms-swift renders the first prompt from (ending with the
        first turn's forced opening as an id-backed assistant message, if any), and that prompt."""
        self.tools = tools
        self.segment_messages = [[dict(m) for m in messages]]
        self.segment_prefixes = [list(self.first_forced)]
        self.segment_prompts = [prompt_ids]
        self.opening = list(self.first_forced)

    async def _run_episode(self) -> None:
        """The episode through the kit's runner: always finished and scored, never notified here."""
        assert self.bridge is not None
        runner = self.runtime.runner(None)
        context = RolloutContext(episode_id=self.episode_id, max_steps=self.max_steps, extras={"swift_uuid": self.uuid})
        fatal: UsageError | None = None
        try:
            episode = await runner.run(self.sample, context, notify=False)
        except UsageError as exc:  # a configuration error every episode would hit: stops training
            fatal = exc
            episode = self._failed(EpisodeStatus.FAILED, f"UsageError: {exc}")
        except asyncio.CancelledError:  # abort() cancelled it while no generation was pending
            episode = self._failed(EpisodeStatus.CANCELLED, "ms-swift ended the trajectory while the episode ran")
        finally:
            self.runtime.engine.detach(self.episode_id)
        self.bridge.put_nowait(EpisodeDone(episode, fatal))

    def _failed(self, status: EpisodeStatus, error: str) -> Episode:
        """The kit's failed episode: its token session dropped (nothing it sampled may train)."""
        return self.runtime.runner(None).failed(self.sample, RolloutContext(episode_id=self.episode_id), status, error)

    def _ended(self, event: EpisodeDone) -> None:
        self.episode = event.episode
        self.fatal = event.fatal
        self.pending = None

    async def advance(self, sampled: list[int], logprobs: list[float] | None, finish_reason: str | None) -> bool:
        """Hand ms-swift's sampled ids to the episode; wait until it asks for the next generation
        (``False``: ``turn_env`` holds the ids to append) or ends (``True``)."""
        self.turns += 1
        self.last_sampled, self.last_logprobs = list(sampled), logprobs
        if self.episode is not None:
            return True
        assert self.bridge is not None
        pending, self.pending = self.pending, None
        if pending is not None and not pending.future.done():
            if logprobs is not None and len(logprobs) != len(sampled):
                logprobs = None  # misaligned engine output: record none rather than wrong ones
            sampled, logprobs, finish_reason = self.honour(pending.sampling, list(sampled), logprobs, finish_reason)
            stop = LENGTH if finish_reason == "length" else STOP
            pending.future.set_result(TokenOutput(list(sampled), logprobs, stop))
        self.last_sampled, self.last_logprobs = list(sampled), logprobs
        event = await self.bridge.get()
        if isinstance(event, TurnRequest):
            base = [*self.prompt_ids, *sampled]
            env = event.prompt_ids[len(base):] if event.prompt_ids[: len(base)] == base else None
            if env is not None:
                self.segment_ids += [*sampled, *env]
            else:
                # the token client began a new training segment (a rewritten or compacted history): the
                # segment ends with this turn's sampled ids, and ms-swift samples the next from the new prompt
                try:
                    messages, prefix = self.segment_request(event.prompt_ids, event.forced)
                except UsageError as exc:
                    event.future.set_exception(LLMError(str(exc)))
                    self._ended(await self.bridge.get())  # type: ignore[arg-type]
                    return True
                self.segment_messages.append(messages)
                self.segment_prefixes.append(prefix)
                self.segment_prompts.append(None)  # ms-swift's rendering, set by the scheduler's ``step``
                self.segment_ids, self.new_segment = [], True
            self.pending, self.prompt_ids = event, event.prompt_ids
            self.turn_sampled, self.turn_logprobs, self.turn_env = list(sampled), logprobs, env or []
            return False
        self._ended(event)
        return True

    def honour(self, sampling: SamplingParams | None, sampled: list[int], logprobs: list[float] | None,
               finish_reason: str | None) -> tuple[list[int], list[float] | None, str | None]:
        """The turn's ``max_tokens``, stop token ids and ``stop`` strings, which ms-swift's engine does
        not take per request: its sample cut where an engine honouring them would have stopped (the
        first ``max_tokens`` ids; the ids up to and including the first stop token id, as vLLM keeps
        it; the ids up to the one that completes a stop string, as vLLM keeps them). Stop token ids
        are a client's ``stop_token_ids`` and the core's one-call limit (``parallel_tool_calls: false``
        or a named function: the call's closing token, ``aworld_core.tokens.turn``), so a sample holding
        two calls keeps the first. What follows the cut is dropped: never seen by the episode, never
        trained (the scheduler hands ms-swift the kept ids)."""
        if sampling is None:
            return sampled, logprobs, finish_reason
        keep = len(sampled)
        reason = finish_reason
        if sampling.max_tokens is not None and keep > sampling.max_tokens:
            keep, reason = sampling.max_tokens, "length"
        stop_ids = set(sampling.extra.get(STOP_TOKEN_IDS) or [])
        at = next((k for k, token in enumerate(sampled[:keep]) if token in stop_ids), None)
        if at is not None:
            # a call's closer sampled right before the turn's end (one call, the turn over): kept whole, the
            # end id too (sampled; the token client would append it after the closer anyway, mask 0, and
            # ms-swift's template would then label it unsampled: the trajectory could not train)
            ends = set(self.runtime.llm.renderer.stop_ids)
            if not (keep == at + 2 and sampled[at] not in ends and sampled[at + 1] in ends):
                keep = at + 1
            reason = "stop"
        stops = [s for s in sampling.stop or [] if s]
        if stops:
            decode = self.runtime.llm.renderer.decode
            if any(s in decode(sampled[:keep]) for s in stops):
                for k in range(1, keep + 1):
                    if any(s in decode(sampled[:k]) for s in stops):
                        keep, reason = k, "stop"
                        break
        if keep == len(sampled):
            return sampled, logprobs, reason
        return sampled[:keep], None if logprobs is None else logprobs[:keep], reason

    def segment_request(self, prompt_ids: list[int], forced: list[int] | None = None
                        ) -> tuple[list[dict[str, Any]], list[int]]:
        """The messages ms-swift samples a new segment's first generation from, and the ids they hold
        in their (id-backed) last assistant message: the first prompt's messages continued by what the
        new prompt adds after the token client's first prompt; else the new conversation's own plain
        messages (ms-swift renders them as it renders every first prompt), then the turn's ``forced``
        opening, if any. ``UsageError`` otherwise."""
        from aworld_swift.scheduler import same_tools, swift_messages

        first = self.first_prompt_ids
        if first and prompt_ids[: len(first)] == first:
            added = list(prompt_ids[len(first):])
            messages = [dict(m) for m in self.segment_messages[0] if not _forced_opening(m, self.first_forced)]
            if added:
                messages.append({"role": "assistant", "content": added})
            return messages, added
        sent, _ = self.runtime.llm.request_of(self.episode_id)
        # the token client renders a rewritten conversation with the session's tools (its first call's,
        # which the scheduler checked against the row's), whatever tools the rewriting call sent (none,
        # for smolagents' final-answer call): ms-swift renders the row's, so the same
        session = self.runtime.llm.session(self.episode_id)
        if session is None or not same_tools(session.tools, self.tools):
            raise UsageError(SEGMENT_UNRENDERABLE.format(why="its tools differ from the dataset row's"))
        try:
            plain = swift_messages(sent)
        except UsageError as exc:
            raise UsageError(SEGMENT_UNRENDERABLE.format(why=str(exc).split(";")[0])) from None
        if plain and plain[-1]["role"] == "assistant":
            raise UsageError(SEGMENT_UNRENDERABLE.format(why="it ends with an assistant message"))
        if forced:
            return [*plain, {"role": "assistant", "content": list(forced)}], list(forced)
        return plain, []

    def assistant_ids(self) -> list[int]:
        """The ids ms-swift's assistant message of the open segment holds: its prefix, then the
        segment's response so far."""
        return [*self.segment_prefixes[-1], *self.segment_ids]

    async def abort(self, reason: str) -> None:
        """End the episode from outside (ms-swift stopped the trajectory first): it fails."""
        await self._end(lambda future: future.set_exception(LLMError(reason)), cancel=True)

    async def end_at_length(self, why: str) -> None:
        """End the episode as a length stop: its next generation's prompt would not fit ms-swift's
        length limit (a long tool result, a long history), so ms-swift cannot sample it. The parked
        generation (and any the agent asks after it) is answered ``finish_reason="length"`` without
        sampling, as the token client answers a session whose response budget is spent; the episode
        ends with ``metadata["stop"] = "length"`` and is scored and trained like any length stop.
        What ms-swift trains of it ends with the turn it just sampled (``conclude`` cuts the recorded
        view there: the environment ids after it never reach ms-swift, and nothing is sampled after them)."""
        if self.episode is None:
            self.length_end = why
        await self._end(lambda future: future.set_result(TokenOutput([], None, LENGTH)))

    async def _end(self, answer: Callable[[asyncio.Future[Any]], None], cancel: bool = False) -> None:
        """Answer the parked generation and every one the agent still asks with ``answer(future)``
        (``cancel``: with none parked, the running episode is cancelled), until its episode ends (the
        bridge's ``EpisodeDone``), which is then settled. Nothing when the episode has ended."""
        if self.episode is not None:
            return
        assert self.bridge is not None
        pending, self.pending = self.pending, None
        if pending is not None and not pending.future.done():
            answer(pending.future)
        elif cancel and self.task is not None:
            self.task.cancel()
        while True:
            event = await self.bridge.get()
            if isinstance(event, EpisodeDone):
                self._ended(event)
                return
            if not event.future.done():
                answer(event.future)

    async def conclude(self) -> dict[str, Any]:
        """Settle the finished (and scored) episode: what trains, its record, ``on_episode_end``
        (once), and the ``rollout_infos`` entry ms-swift carries to the reward functions."""
        episode = self.episode
        assert episode is not None
        runtime = self.runtime
        if self.untrainable is not None:
            # ms-swift would train ids that were never sampled (see the scheduler): no view to train
            episode.training = None
        if self.length_end is not None:
            episode.metadata["swift_length"] = self.length_end
            if episode.training is not None:
                episode.training = cut_after_last_sampled(episode.training)
                # a segment the cut dropped was opened, never sampled: ms-swift has no row of it
                kept = max(1, episode.training.num_segments)
                del self.segment_messages[kept:], self.segment_prefixes[kept:], self.segment_prompts[kept:]
        reason = untrainable_reason(episode)
        if reason is not None:
            self.mark_untrainable(self.untrainable or describe(episode, reason))
        if episode.training is not None and episode.training.num_segments != max(1, len(self.segment_messages)):
            self.mark_untrainable(
                f"the episode's training view has {episode.training.num_segments} segments but ms-swift sampled "
                f"{len(self.segment_messages)} (a segment ms-swift did not sample cannot be trained)"
            )
            episode.training = None
        if episode.training is not None and self.swift_prompt_ids is not None:
            # the responses are what ms-swift trains; each prompt is ms-swift's rendering, not the chat template's
            episode.training = swift_view(episode.training, [self.swift_prompt_ids, *self.segment_prompts[1:]])
        segments = None
        if episode.training is not None and episode.training.num_segments > 1 and self.untrainable is None:
            segments = segment_rows(episode.training, self.segment_messages, self.segment_prefixes)
        episode.metadata["swift"] = {"uuid": self.uuid, "turns": self.turns, "trained": self.untrainable is None,
                                     "untrainable": self.untrainable, "segments": len(self.segment_messages)}
        self.info = trajectory_info(episode, self.untrainable, segments)
        await runtime.runner(None).notify(episode)
        runtime.record(episode, self.sample)
        return self.info

    # -- the ms-swift side (any thread) -------------------------------------------------------------

    def mark_untrainable(self, reason: str) -> None:
        """Nothing of this trajectory is trained: zero every mask and empty every logprob list
        already handed to ms-swift (again at the end: ms-swift extends them turn by turn)."""
        if self.untrainable is None:
            self.untrainable = reason
        for mask in self.masks:
            mask[:] = [0] * len(mask)
        for logprobs in self.logprob_lists:
            logprobs.clear()

    def keep(self, mask: list[int], logprobs: list[float] | None = None) -> None:
        if self.untrainable is not None:
            mask[:] = [0] * len(mask)
        self.masks.append(mask)
        if logprobs is not None:
            self.logprob_lists.append(logprobs)


def _forced_opening(message: dict[str, Any], forced: list[int]) -> bool:
    """Whether ``message`` is the id-backed assistant message holding the first turn's forced opening."""
    return bool(forced) and message.get("role") == "assistant" and message.get("content") == forced


def cut_after_last_sampled(view: TrainingView) -> TrainingView:
    """``view`` ending with its last sampled token, marked truncated: an episode ended by length before
    its next generation (``Trajectory.end_at_length``), whose sequence on ms-swift ends with the turn
    it sampled last. Only environment ids (mask 0) are cut, so the trained tokens are the view's; so are
    trailing segments without a sampled token (the episode ended by length as a new segment opened: ms-swift
    never sampled, nor rendered, that segment), the first segment excepted."""
    segments = view.segments()
    while len(segments) > 1 and not any(segments[-1].response_mask):
        segments.pop()
    last = segments[-1]
    keep = max((i + 1 for i, m in enumerate(last.response_mask) if m), default=0)
    segments[-1] = last.model_copy(update={
        "response_ids": last.response_ids[:keep], "response_mask": last.response_mask[:keep],
        "response_logprobs": last.response_logprobs[:keep], "response_versions": last.response_versions[:keep],
        "truncated": True,
    })
    return TrainingView.of_segments(segments)


def swift_sampling(job: Any) -> dict[str, Any]:
    """The temperature, top_p and top_k ms-swift samples with: the job's ``rollout.sampling`` (the launch
    passes it on) or ``backends.swift``'s own (the launch refuses the two disagreeing)."""
    section = job.backend_section("swift")
    out = {}
    for key in ("temperature", "top_p", "top_k"):
        value = getattr(job.rollout.sampling, key, None)
        out[key] = value if value is not None else section.get(key)
    return out


def swift_view(view: TrainingView, prompts: list[list[int] | None]) -> TrainingView:
    """``view`` with each segment's prompt as ms-swift rendered it (where it did: ``None`` keeps the
    token client's): what ms-swift sampled each segment from and trains it on."""
    segments = [s if p is None else s.model_copy(update={"prompt_ids": list(p)})
                for s, p in zip(view.segments(), prompts, strict=True)]
    return TrainingView.of_segments(segments)


def segment_rows(view: TrainingView, messages: list[list[dict[str, Any]]],
                 prefixes: list[list[int]]) -> list[dict[str, Any]]:
    """One ms-swift row per segment (plain JSON: it travels from a rollout server): the messages
    ms-swift renders the segment's prompt from, its response as ms-swift's id-backed assistant
    message holds it (the prefix ids, mask 0, then exactly the segment's response ids and mask), the
    logprobs of its sampled tokens, and the mask as runs (for the reward functions' records)."""
    rows = []
    for index, (segment, msgs, prefix) in enumerate(zip(view.segments(), messages, prefixes, strict=True)):
        ids = [*prefix, *segment.response_ids]
        mask = [0] * len(prefix) + list(segment.response_mask)
        logprobs = [lp for lp, m in zip(segment.response_logprobs, segment.response_mask, strict=True) if m]
        rows.append({"segment": index, "start": segment.start, "messages": msgs, "response_token_ids": ids,
                     "response_loss_mask": mask, "rollout_logprobs": logprobs, "mask_runs": mask_runs(mask),
                     "reward": segment.reward})
    return rows


def trajectory_info(episode: Episode, untrainable: str | None,
                    segments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the trainer sees of an episode (its reward functions, the group policy, the logs):
    plain JSON, since in server mode it travels from the rollout server to the trainer. With the
    mask of its training view (as runs) the trainer rebuilds the episode's record (see
    :func:`aworld_swift.rewards.episode_record`)."""
    view = episode.training
    return {
        "episode_id": episode.id,
        "task_id": episode.task_id,
        "agent_id": episode.agent_id,
        "status": episode.status.value,
        "error": episode.error,
        "stop": episode.metadata.get("stop"),
        "reward": episode.reward,
        "rewards": dict(episode.rewards),
        "reward_errors": dict(episode.reward_errors),
        "trained": untrainable is None,
        "untrainable": untrainable,
        "mask_runs": None if view is None else mask_runs(view.response_mask),
        "segments": segments,
        **tool_counts(episode),
    }
