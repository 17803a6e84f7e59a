"""The core's two reward calling conventions, and the reward object that calls a function.

A reward function is written in a convention: the seed's plain
``(data_source, solution_str, ground_truth, extra_info)``, trajectory-aware ``(episode, sample)``,
or one a plugin registers (aworld-trl: TRL's ``(prompts, completions, ..., **kwargs) ->
list[float]``). Which one a function uses is decided once, when the reward is resolved
(:meth:`Reward.of`), and kept as a :class:`~aworld_core.specs.RewardConvention` adapter: the per-episode call then only builds its keywords and checks them
against names read from the signature at resolution, so scoring an episode never inspects the
function again.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, Sample
from aworld_core.specs import RewardConvention

Convention = RewardConvention  # the adapter's name here

PLAIN_SIGNATURE = "(data_source, solution_str, ground_truth, extra_info)"
TRAJECTORY_SIGNATURE = "(episode, sample)"


def solution_text(episode: Episode) -> str:
    """What a plain reward scores: the episode's final answer, else the last assistant text.

    The final answer is the model's full final reply as the runtime recorded it (tags such as
    ``<answer>`` included); episodes that ended without one fall back to the last assistant
    message, then to the last model call's content, so a reward always sees what the model said.
    """
    if episode.final_answer is not None:
        return episode.final_answer
    for message in reversed(episode.messages):
        if message.get("role") == "assistant" and message.get("content"):
            return _content_text(message["content"])
    for step in reversed(episode.steps):
        call = step.exp_data.llm_call
        if call is not None and call.content:
            return call.content
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return str(content)


class PlainConvention(Convention):
    """The seed's (and verl's) ``(data_source, solution_str, ground_truth, extra_info)``."""

    name = "plain"
    signature = PLAIN_SIGNATURE

    def keywords(self, episode: Episode, sample: Sample) -> dict[str, Any]:
        return {
            "data_source": sample.data_source,
            "solution_str": solution_text(episode),
            "ground_truth": sample.ground_truth,
            "extra_info": dict(sample.extra_info),
        }


class TrajectoryConvention(Convention):
    """``(episode, sample)``: the whole trajectory and its dataset row."""

    name = "trajectory"
    signature = TRAJECTORY_SIGNATURE

    def keywords(self, episode: Episode, sample: Sample) -> dict[str, Any]:
        return {"episode": episode, "sample": sample}


PLAIN = PlainConvention()
TRAJECTORY = TrajectoryConvention()

_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # builtins without a signature: the call speaks for itself
        return None


def convention_of(func: Callable[..., Any], trajectory_aware: bool | None,
                  conventions: Sequence[Convention] = ()) -> Convention:
    """The convention ``func`` is written in. ``trajectory_aware`` (from the job or the spec) wins;
    unflagged, a function taking ``episode`` and no ``solution_str`` is trajectory-aware. A
    function that is not trajectory-aware is the first of the plugins' ``conventions`` that claims
    it, else plain (a function taking ``solution_str`` is always plain)."""
    signature = _signature(func)
    params = signature.parameters if signature is not None else {}
    if trajectory_aware is None:
        trajectory_aware = "episode" in params and "solution_str" not in params
    if trajectory_aware:
        return TRAJECTORY
    if "solution_str" not in params:
        for convention in conventions:
            if convention.claims(params):
                return convention
    return PLAIN


@dataclass(frozen=True, eq=False)
class Reward:
    """A resolved reward: its function, the convention it is called in, and what its signature
    accepts, all read once. ``await reward(episode, sample)`` gives the raw value (validated by
    ``score_episode``); :meth:`call` gives a number, or an awaitable for an async function, for
    callers that are not on an event loop (verl's ``compute_score``)."""

    name: str
    func: Callable[..., Any]
    trajectory_aware: bool
    source: str  # "plugin '<name>' (<dist>)" or "import reference"
    convention: Convention
    # from the signature, once: the keywords it takes (None: anything, **kwargs), those it needs,
    # and whether only a full bind can tell (positional-only parameters)
    _signature: inspect.Signature | None = field(default=None, repr=False)
    _accepts: frozenset[str] | None = field(default=None, repr=False)
    _required: frozenset[str] = field(default=frozenset(), repr=False)
    _bind_each_call: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, name: str, func: Callable[..., Any], trajectory_aware: bool | None, source: str,
           conventions: Sequence[Convention] = ()) -> Reward:
        """Resolve ``func``'s convention (among the core's and the plugins' ``conventions``) and
        read its signature, once."""
        if not callable(func):
            raise UsageError(f"reward '{name}' resolves to {func!r}, which is not callable")
        convention = convention_of(func, trajectory_aware, conventions)
        signature = _signature(func)
        accepts: frozenset[str] | None = None
        required: frozenset[str] = frozenset()
        bind_each_call = False
        if signature is not None:
            params = signature.parameters.values()
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                accepts = frozenset(p.name for p in params if p.kind in _KEYWORD_KINDS)
            required = frozenset(p.name for p in params
                                 if p.kind in _KEYWORD_KINDS and p.default is inspect.Parameter.empty)
            bind_each_call = any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params)
        return cls(name, func, convention is TRAJECTORY, source, convention, signature, accepts, required,
                   bind_each_call)

    @property
    def accepts(self) -> frozenset[str] | None:
        """The keywords the function takes (None: anything, it has ``**kwargs``)."""
        return self._accepts

    @property
    def required(self) -> frozenset[str]:
        """The keywords the function cannot do without."""
        return self._required

    def keywords(self, episode: Episode, sample: Sample) -> dict[str, Any]:
        """The keywords the function is called with for one episode, checked against its signature.

        Under a ``declared_only`` convention a function without ``**kwargs`` gets only the names
        it declares."""
        kwargs = self.convention.keywords(episode, sample)
        if self.convention.declared_only and self._accepts is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in self._accepts}
        self._check(kwargs)
        return kwargs

    def call(self, episode: Episode, sample: Sample) -> Any:
        """The function's value for one episode: a number, or an awaitable for an async reward."""
        return self.convention.value(self, self.func(**self.keywords(episode, sample)))

    async def __call__(self, episode: Episode, sample: Sample) -> Any:
        value = self.call(episode, sample)
        return await value if inspect.isawaitable(value) else value

    def check(self) -> None:
        """``UsageError`` (with the fix) when the function cannot take the keywords it will be
        called with: what a run would find at its first scored episode, found before it starts."""
        episode = Episode(task_id="check", agent_id="check")
        sample = Sample(id="check", prompt=[{"role": "user", "content": "?"}])
        kwargs = self.convention.checked_keywords(self, self.convention.keywords(episode, sample))
        self._check(kwargs)

    def _check(self, kwargs: dict[str, Any]) -> None:
        if self._signature is None:
            return
        if (not self._bind_each_call and self._required <= kwargs.keys()
                and (self._accepts is None or kwargs.keys() <= self._accepts)):
            return  # the names fit: what signature.bind would find, without binding
        try:
            self._signature.bind(**kwargs)
        except TypeError as exc:
            other = "trajectory_aware=false" if self.trajectory_aware else "trajectory_aware=true"
            raise UsageError(
                f"reward '{self.name}' ({self.source}) has signature "
                f"{getattr(self.func, '__name__', type(self.func).__name__)}{self._signature}, but is called "
                f"with keywords {self.convention.signature}: {exc}. Rename its parameters, or set "
                f"reward.{other} if it is the other kind; a convention a plugin registers (aworld --list), such as "
                f"TRL's (completions, **kwargs) from aworld-trl, applies only while that plugin is installed"
            ) from None
