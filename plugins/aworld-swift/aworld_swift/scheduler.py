"""``multi_turns['aworld']``: ms-swift's multi-turn scheduler over real AWorld episodes.

ms-swift 4.6 runs multi-turn GRPO through ``MultiTurnScheduler`` hooks, called per trajectory and
turn (in colocate mode by ``swift.rollout.run_multi_turn`` with plain transformers generation; in
server mode by ``MultiTurnScheduler.run`` on a ``swift rollout`` server):

* ``on_trajectory_start``: each trajectory's episode starts through the core's ``rollout`` hook
  (agent, MCP sessions, ...); the messages the episode really starts with replace the dataset's.
* ``on_turn_end``: the ids ms-swift sampled go to the episode, which parses them, runs the tool
  calls (concurrently across the batch) and asks for its next generation, or ends.
* ``check_finished``: the episode's own rules (a final answer, ``max_steps``, a length stop, a
  timeout or a failure), not only ms-swift's length limit.
* ``step``: returns ``response_token_ids`` = this turn's sampled ids followed by the environment
  ids the token client rendered (tool results, next generation prompt), ``response_loss_mask`` =
  1 on the sampled ids and 0 on the environment ids, and ``rollout_logprobs`` for the sampled ids
  when the engine reported them. The conversation is one continued assistant message, so ms-swift
  trains exactly this sequence and never re-renders or re-tokenizes it.

A trajectory whose episode failed, timed out, or whose reward failed is not trained: every loss
mask it handed to ms-swift is zeroed, except the label of its last sampled token (ms-swift 4.6's
GRPO cannot take a sample without one), and the reward functions give it its group's mean reward
(the kit's group policy), so its advantage, and with it its policy gradient, is 0. So is a
trajectory whose sequence ms-swift would train tokens of that were never sampled (its template's
end-of-turn suffix right after a turn the model ended on a token ms-swift drops, e.g. a pad-equal
``eos``).

Its rollout logprobs shrink with its labels, to the one kept: every list handed to ms-swift is
emptied in place, the last turn's come from ``on_turn_end`` (colocate) and from the response
choice itself (server mode: ``MultiTurnScheduler.run`` reads only ``done`` and ``rollout_infos``
from ``on_turn_end`` and takes the last turn's logprobs from the choice). So the number of logprobs
equals the number of labels for every trajectory, and ms-swift keeps rollout importance sampling
for the batch (one mismatch turns it off for the whole batch).
"""

from __future__ import annotations

import asyncio
import json
import logging
from copy import copy
from typing import Any

from swift.rollout.multi_turn import MultiTurnScheduler

from aworld_core.errors import UsageError
from aworld_core.schemas import Message, Sample
from aworld_core.tokens import content_text
from aworld_swift.rows import SAMPLE_COLUMN, parse_sample
from aworld_swift.runtime import SwiftRuntime, get_runtime
from aworld_swift.trajectory import FORCED_FIRST_TURN_IN_SERVER_MODE, INFO_KEY, JINJA_BACKEND, Trajectory

logger = logging.getLogger(__name__)


class AworldScheduler(MultiTurnScheduler):
    """Each ms-swift trajectory is one AWorld episode of the job's agent."""

    def __init__(self, infer_engine: Any = None, max_turns: int | None = None, *args: Any, **kwargs: Any):
        super().__init__(infer_engine, max_turns, *args, **kwargs)
        self.trajectories: dict[str, Trajectory] = {}
        self.suffix_ids: list[int] | None = None
        self._runtime: SwiftRuntime | None = None
        self.serving = False  # driven by ms-swift's server-mode ``run`` (a ``swift rollout`` server)

    @property
    def runtime(self) -> SwiftRuntime:
        """The job's runtime, loaded on first use: a ``swift rollout`` server may start before the
        launch writes the job file."""
        if self._runtime is None:
            self._runtime = get_runtime()
            self._runtime.runner(self.tokenizer)
        return self._runtime

    async def run(self, infer_request: Any, request_config: Any, **kwargs: Any) -> Any:
        """ms-swift's own server-mode driver, unchanged; noted because it drops a first prompt's
        trailing assistant message (a forced opening, refused there: ``_start``)."""
        self.serving = True
        return await super().run(infer_request, request_config, **kwargs)

    # -- hooks ------------------------------------------------------------------------------------

    async def on_trajectory_start(self, requests: list[Any]) -> None:
        await asyncio.gather(*(self._start(request) for request in requests))

    async def _start(self, request: Any) -> None:
        sample = sample_of(request)
        check_template(self._swift_template())
        runtime = self.runtime
        stale = self.trajectories.pop(request.uuid, None)
        if stale is not None and not stale.final:
            await runtime.loop.call(stale.abort("ms-swift restarted this trajectory"))
            await runtime.loop.call(stale.conclude())  # recorded and notified like every episode
        trajectory = Trajectory(request.uuid, sample, runtime, max_steps=int(self.max_turns) if self.max_turns else None)
        self.trajectories[request.uuid] = trajectory
        first = await runtime.loop.call(trajectory.start())
        if trajectory.fatal is not None:
            raise trajectory.fatal
        if first is None:
            return  # the episode failed before its first generation; ms-swift's turn is masked out
        messages, tools = first
        check_tools(tools, request.tools, sample.id)
        request.messages = swift_messages(messages)
        if trajectory.first_forced:
            # the first turn is constrained (tool_choice): ms-swift samples after its forced opening, held by an
            # id-backed assistant message as ms-swift holds every continued turn (its ids trained with mask 0)
            if self.serving:
                await runtime.loop.call(trajectory.abort(FORCED_FIRST_TURN_IN_SERVER_MODE))
                raise UsageError(FORCED_FIRST_TURN_IN_SERVER_MODE)
            request.messages.append({"role": "assistant", "content": list(trajectory.first_forced)})
        trajectory.swift_prompt_ids = self._prompt_ids(request)
        trajectory.begin(request.messages, request.tools, trajectory.swift_prompt_ids)

    async def on_turn_end(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
        trajectory = self.trajectories.get(infer_request.uuid)
        if trajectory is None:
            return {}
        loop = self.runtime.loop
        sampled = list(response_choice.token_ids or [])
        logprobs = self._extract_logprobs_from_choice(response_choice) or None
        done = await loop.call(trajectory.advance(sampled, logprobs, response_choice.finish_reason))
        cut = len(trajectory.last_sampled) < len(sampled)  # the turn's max_tokens / stop (Trajectory.honour)
        if cut:
            sampled, logprobs = trajectory.last_sampled, trajectory.last_logprobs
            keep_logprobs(response_choice, slice(len(sampled)))
        if trajectory.fatal is not None:
            raise trajectory.fatal
        if not done and self.max_turns and current_turn >= self.max_turns:
            await loop.call(trajectory.abort(
                f"ms-swift's max_turns ({self.max_turns}) ended the trajectory while the episode wanted another "
                f"turn; give the episode the same limit (rollout.max_turns)"
            ))
            done = True
        if not done:
            over = self._over_length(trajectory)
            if over is not None:  # ms-swift could not sample the next turn: the episode ends as a length stop
                await loop.call(trajectory.end_at_length(over))
                done = True
        if not done:
            self._check_environment_ids(trajectory)
            return {"done": False}
        info = await loop.call(trajectory.conclude())
        trajectory.final = True
        final_logprobs = list(logprobs or [])
        if trajectory.untrainable is not None:  # only the last sampled token keeps its label
            final_logprobs = final_logprobs[-1:] if sampled else []
            keep_logprobs(response_choice, slice(-1, None))
        result = {"done": True, "rollout_infos": {INFO_KEY: info}, "rollout_logprobs": final_logprobs}
        if trajectory.opening or cut:
            # a one-turn trajectory whose turn was forced (its opening, then what was sampled), or a last turn cut
            # short: the ids ms-swift keeps (server mode's driver takes no override: get_response_token_data)
            opening, trajectory.opening = trajectory.opening, []
            trajectory.final_response = ([*opening, *sampled], [0] * len(opening) + [1] * len(sampled))
            result["response_token_ids"], result["response_loss_mask"] = (list(x) for x in trajectory.final_response)
        return result

    def check_finished(self, infer_request: Any, response_choice: Any, current_turn: int) -> bool:
        trajectory = self.trajectories.get(infer_request.uuid)
        if trajectory is None:
            return super().check_finished(infer_request, response_choice, current_turn)
        return trajectory.final

    def step(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
        trajectory = self.trajectories.get(infer_request.uuid)
        if trajectory is None:
            raise UsageError(f"ms-swift asked the aworld scheduler to step an unknown trajectory {infer_request.uuid!r}")
        sampled, env = trajectory.turn_sampled, trajectory.turn_env
        # the first turn's forced opening (held by the prompt's last assistant message) opens ms-swift's response
        opening, trajectory.opening = trajectory.opening, []
        ids = [*opening, *sampled, *env]
        mask = [0] * len(opening) + [1] * len(sampled) + [0] * len(env)
        if trajectory.new_segment:
            # the episode goes on in a new training segment: ms-swift samples its next generation from the
            # segment's own prompt (the driver's accumulated ids of this trajectory are replaced by one row
            # per segment when the trainer receives it: aworld_swift.segments)
            trajectory.new_segment = False
            infer_request.messages = [dict(m) for m in trajectory.segment_messages[-1]]
            trajectory.segment_prompts[-1] = self._prompt_ids(infer_request)
        result: dict[str, Any] = {"infer_request": infer_request, "response_token_ids": ids,
                                  "response_loss_mask": mask}
        logprobs = None
        if trajectory.turn_logprobs:
            # handed over even when the trajectory is already untrainable: ms-swift then keeps this very
            # list (and extends it), which lets the trajectory empty it in place when it concludes
            logprobs = list(trajectory.turn_logprobs)
            result["rollout_logprobs"] = logprobs
        trajectory.keep(mask, logprobs)
        return result

    def set_assistant_message_token_ids(self, infer_request: Any, token_ids: list[int]) -> None:
        """ms-swift freezes the trajectory's last assistant message as its accumulated ids before each
        generation; in a trajectory of several segments those are the open segment's own (its prefix and
        response so far), and a segment whose prompt ends with a user message has none yet."""
        trajectory = self.trajectories.get(infer_request.uuid)
        if trajectory is None or len(trajectory.segment_messages) < 2:
            super().set_assistant_message_token_ids(infer_request, token_ids)
            return
        ids = trajectory.assistant_ids()
        messages = infer_request.messages
        if ids and messages and messages[-1].get("role") == "assistant":
            messages[-1]["content"] = list(ids)

    def get_response_token_data(self, infer_request: Any, response_choice: Any, is_continuation: bool = False,
                                response_token_ids: list[int] | None = None,
                                response_loss_mask: list[int] | None = None) -> tuple[list[int], list[int]]:
        trajectory = self.trajectories.get(infer_request.uuid)
        if trajectory is not None and trajectory.final and response_token_ids is None and trajectory.final_response:
            response_token_ids, response_loss_mask = (list(x) for x in trajectory.final_response)
        ids, mask = super().get_response_token_data(
            infer_request, response_choice, is_continuation=is_continuation,
            response_token_ids=response_token_ids, response_loss_mask=response_loss_mask,
        )
        if trajectory is not None:
            trajectory.keep(mask)  # the list ms-swift stores: zeroed in place if the trajectory turns untrainable
            if trajectory.final:  # the trajectory's last segment
                del self.trajectories[infer_request.uuid]
                if trajectory.untrainable is not None and mask:
                    # ms-swift 4.6's GRPO fails on a sample without any labelled token ("Size does not
                    # match"): the last sampled token keeps its label, and the reward functions give
                    # the trajectory its group's mean reward, so its advantage is 0: no policy gradient
                    # (with beta > 0 that one token still has a KL term; docs/backend-swift.md)
                    mask[-1] = 1
        return ids, mask

    # -- helpers ----------------------------------------------------------------------------------

    def _swift_template(self) -> Any:
        """The template ms-swift encodes this scheduler's requests with (the engine's in server mode)."""
        return self._template or getattr(self.infer_engine, "template", None)

    def _over_length(self, trajectory: Trajectory) -> str | None:
        """Why ms-swift could not sample the trajectory's next generation, when it could not: the next
        prompt as ms-swift renders it (the open segment's messages, then its id-backed assistant
        message holding the ids so far) leaves no position to sample in under the template's
        ``max_length`` (ms-swift's template raises ``MaxLengthError`` past it: a rollout server answers
        500 and the whole batch fails) or the model's / engine's ``max_model_len``."""
        template = self._swift_template()
        if template is None or not trajectory.segment_messages:
            return None
        limits = {"max_length": getattr(template, "max_length", None),
                  "the model's max_model_len": getattr(getattr(template, "model_info", None), "max_model_len", None),
                  "the engine's max_model_len": getattr(self.infer_engine, "max_model_len", None)}
        limits = {name: int(v) for name, v in limits.items() if isinstance(v, int) and v > 0}
        if not limits:
            return None
        name, limit = min(limits.items(), key=lambda item: item[1])
        ids = _encode(template, next_messages(trajectory), trajectory.tools, measure=True,
                      failed="a trajectory's next prompt to measure it")
        if ids is None or len(ids) < limit:
            return None
        return (f"the next generation's prompt is {len(ids)} tokens as ms-swift renders it, and {name} is {limit}: "
                f"no position is left to sample in, so the episode ends as a length stop after the turn it sampled")

    def _check_environment_ids(self, trajectory: Trajectory) -> None:
        """ms-swift's template labels the end-of-turn suffix when it opens a masked span after a
        trained one (``Template._add_dynamic_eos``): those ids would be trained without having been
        sampled. They only open the environment ids when the model ended its turn on a token
        ms-swift dropped (an ``eos`` equal to the pad token); such a trajectory trains nothing."""
        suffix = self._suffix_ids()
        if suffix and trajectory.turn_env[: len(suffix)] == suffix:
            trajectory.mark_untrainable(
                "a turn ended without the end-of-turn token (ms-swift drops a sampled eos that equals the pad "
                "token), so ms-swift's template would train the end-of-turn tokens that follow as if sampled"
            )

    def _suffix_ids(self) -> list[int]:
        if self.suffix_ids is None:
            template = self._swift_template()
            ids: list[int] = []
            for part in getattr(getattr(template, "template_meta", None), "suffix", None) or []:
                if isinstance(part, str):
                    ids += list(self.tokenizer(part, return_attention_mask=False, add_special_tokens=False)["input_ids"])
                elif isinstance(part, list):
                    ids += [int(i) for i in part]
            self.suffix_ids = ids
        return self.suffix_ids

    def _prompt_ids(self, request: Any) -> list[int] | None:
        """The first prompt as ms-swift renders it (its template, not the model's chat template)."""
        template = self._swift_template()
        # only the exported view's prompt depends on it: say so, keep training
        return None if template is None else _encode(
            template, request.messages, request.tools,
            failed="a prompt for the recorded episode; the episode's exported view keeps the token client's prompt for it")


def _encode(template: Any, messages: list[dict[str, Any]], tools: Any, *, failed: str,
            measure: bool = False) -> list[int] | None:
    """``messages`` as ms-swift's ``template`` renders them (``measure``: past its ``max_length`` too, which it
    would refuse); ``None`` and a warning naming what ``failed`` when it cannot (ms-swift's own encode will
    say what is wrong with the request)."""
    try:
        infer_template = copy(template)
        infer_template.set_mode("transformers")
        if measure:
            infer_template.max_length = None  # measured here, not refused
        return [int(i) for i in infer_template.encode({"messages": messages, "tools": tools})["input_ids"]]
    except Exception as exc:
        logger.warning("ms-swift's template could not render %s (%s: %s)", failed, type(exc).__name__, exc)
        return None


def next_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The messages ms-swift samples the trajectory's next generation from: the open segment's, its
    last assistant message holding the segment's ids so far (its prefix, then its response)."""
    messages = [dict(m) for m in trajectory.segment_messages[-1]]
    prefix = trajectory.segment_prefixes[-1] if trajectory.segment_prefixes else []
    if prefix and messages and messages[-1].get("role") == "assistant" and messages[-1].get("content") == prefix:
        messages.pop()
    ids = trajectory.assistant_ids()
    if ids:
        messages.append({"role": "assistant", "content": list(ids)})
    return messages


def check_template(template: Any) -> None:
    """ms-swift's template must render id-backed assistant messages as ids (``JINJA_BACKEND``)."""
    if template is not None and getattr(template, "template_backend", None) == "jinja":
        raise UsageError(JINJA_BACKEND)


def keep_logprobs(response_choice: Any, keep: slice) -> None:
    """Trim the choice's logprobs to the tokens ``keep`` selects: the first ones, which a turn cut short keeps,
    or the last one, the one label an untrained trajectory keeps (server mode's ``run()`` takes the last
    turn's logprobs from the choice, and ms-swift falls back to the choice's when a trajectory has none)."""
    logprobs = response_choice.logprobs
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        response_choice.logprobs = {**logprobs, "content": logprobs["content"][keep]}


def sample_of(request: Any) -> Sample:
    """The ``Sample`` a converted dataset row carries."""
    raw = (getattr(request, "data_dict", None) or {}).get(SAMPLE_COLUMN)
    if raw is None:
        raise UsageError(
            f"an ms-swift dataset row has no '{SAMPLE_COLUMN}' column: the aworld scheduler runs on the dataset "
            f"aworld-swift converts from the job (python -m aworld_core.run --backend swift --config job.yaml)"
        )
    try:
        return parse_sample(raw)
    except ValueError as exc:
        raise UsageError(f"the '{SAMPLE_COLUMN}' column of an ms-swift dataset row is not a sample: {exc}") from None


def swift_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The episode's first messages as ms-swift renders them (plain role and text content)."""
    out = []
    for index, message in enumerate(messages):
        if message.get("tool_calls") or message.get("role") == "tool":
            raise UsageError(
                f"the first request of the episode holds tool calls or tool results (message {index}); the swift "
                f"backend starts a trajectory from system, user and plain assistant messages only"
            )
        # text parts (OpenAI clients such as smolagents send them) as the token client reads them
        out.append({"role": message["role"], "content": content_text(message.get("content"), where=f"message {index}") or ""})
    return out


def _canonical(tools: Any) -> str:
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)


def _names(tools: Any) -> list[str]:
    return [str((t.get("function") or {}).get("name", t.get("name"))) for t in tools or [] if isinstance(t, dict)]


def same_tools(live: Any, listed: Any) -> bool:
    return _canonical(live) == _canonical(listed)


def check_tools(live: Any, listed: Any, sample_id: str) -> None:
    """The episode's tools must be the ones the dataset row lists: ms-swift renders those."""
    if not same_tools(live, listed):
        raise UsageError(
            f"the agent's tools for sample '{sample_id}' ({', '.join(_names(live)) or 'none'}) differ from the "
            f"tools its converted dataset row lists ({', '.join(_names(listed)) or 'none'}); ms-swift renders "
            f"the row's tools into the prompt, so they must match: launch again to convert the data afresh"
        )
