"""GRPO groups for frameworks that run one member per call, so the group policy sees every member.

Some frameworks run an agent loop per sample (verl builds one per row and calls ``run()``), so one
member cannot see its group from its own call. They do start a group's members together, in one
synchronous stretch of code (verl V1's ``_run_prompt`` creates a prompt's ``n`` session tasks in a
loop; V0's ``generate_sequences`` one task per row of its chunk), and each task's first step runs
the loop's ``run()`` without suspending before it. So each member joins its group
(:meth:`Rendezvous.join`, keyed by the framework's group key, e.g. verl's ``uid``) before it awaits
anything. The group's membership closes one event-loop turn after its first member joined
(``loop.call_soon``), which is after every sibling created in the same stretch has joined. The
members then run their episodes; when the last one finishes, the group is decided once
(:func:`group_decider`: the kit's ``apply_group_policy``), and every member builds its output from
that decision. A member that raises instead (a configuration error, a cancellation), also after
it handed in its episode, leaves its group, and the others are dropped with it: the framework then
holds no output for that member, so the group could not stay whole (a group already decided is
marked dropped, for the members that have not built their outputs yet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from aworld_core.schemas import Episode, EpisodeStatus, Sample, new_id
from aworld_core.worker.episodes import EpisodeGroup, apply_group_policy
from aworld_core.worker.policy import GROUP_DROPPED, GroupPolicy

# decide(group_id, sample, members, any_left) -> the group under the policy
Decide = Callable[[str, Sample, list[Episode], bool], EpisodeGroup]


@dataclass
class _Group:
    group_id: str
    decide: Decide
    future: asyncio.Future[EpisodeGroup]
    members: int = 0
    open: bool = True
    sample: Sample | None = None
    episodes: dict[int, Episode] = field(default_factory=dict)
    left: dict[int, str] = field(default_factory=dict)

    def finished(self) -> bool:
        return len(self.episodes) + len(self.left) == self.members

    def maybe_decide(self) -> None:
        if self.open or self.future.done() or not self.finished():
            return
        try:
            episodes = [self.episodes.get(i) or _left_member(self, i) for i in range(self.members)]
            sample = self.sample or Sample(id=self.group_id, prompt=[])
            self.future.set_result(self.decide(self.group_id, sample, episodes, bool(self.left)))
        except BaseException as exc:  # a broken decision must reach every member, not hang them
            self.future.set_exception(exc)


def _left_member(group: _Group, index: int) -> Episode:
    """The episode a member that raised leaves in its slot (it never trains)."""
    episode = Episode(id=new_id("ep-"), task_id=group.sample.id if group.sample else group.group_id, agent_id="-")
    episode.finish(EpisodeStatus.FAILED, group.left.get(index, "the member left its group"))
    return episode


def _drop_decided(group: EpisodeGroup, why: str) -> None:
    """Mark a decided group dropped: the framework holds no output for one of its members, so
    the group it trains would not be the size it expects."""
    if group.dropped is None:
        group.dropped = f"{why}; drop_group"
    for episode in group.episodes:
        episode.metadata[GROUP_DROPPED] = group.dropped


@dataclass
class Member:
    """One member's place in its group (``index``: its position, in the order members joined)."""

    group: _Group
    index: int

    @property
    def group_id(self) -> str:
        return self.group.group_id

    async def finish(self, episode: Episode, sample: Sample) -> EpisodeGroup:
        """Hand in the finished episode; returns the group once every member has finished."""
        group = self.group
        group.sample = group.sample or sample
        group.episodes[self.index] = episode
        group.maybe_decide()
        return await asyncio.shield(group.future)

    def leave(self, error: BaseException) -> None:
        """The member raised instead of giving the framework its output (before or after
        :meth:`finish`, e.g. cancelled while it waited on the group): the group is dropped.
        Before the decision the member counts as left (its episode, if handed in, is not
        counted); after it, the decided group is marked dropped, so no member builds a training
        output from it later. An output a member already built cannot be taken back."""
        group = self.group
        if self.index in group.left:
            return
        why = f"the agent loop raised {type(error).__name__}: {error}"
        group.left[self.index] = why
        if not group.future.done():
            group.episodes.pop(self.index, None)
            group.maybe_decide()
        elif not group.future.cancelled() and group.future.exception() is None:
            _drop_decided(group.future.result(), f"member {self.index} left the decided group ({why})")


class Rendezvous:
    """The open groups of one worker's event loop, keyed by the framework's group key."""

    def __init__(self) -> None:
        self._open: dict[str, _Group] = {}

    def join(self, key: str | None, decide: Decide) -> Member:
        """Join the open group ``key`` (a new one when none is open; ``None``: a group of one).

        Call it before the first ``await`` of ``run()``: membership closes one loop turn after
        the group's first member joined.
        """
        loop = asyncio.get_running_loop()
        group = self._open.get(key) if key is not None else None
        if group is None:
            group = _Group(group_id=key or new_id("grp-"), decide=decide, future=loop.create_future())
            if key is not None:
                self._open[key] = group
            loop.call_soon(self._close, key, group)
        member = Member(group, group.members)
        group.members += 1
        return member

    def _close(self, key: str | None, group: _Group) -> None:
        group.open = False
        if key is not None and self._open.get(key) is group:
            del self._open[key]
        group.maybe_decide()

    def open_groups(self) -> int:
        """Groups still taking members (tests, diagnostics)."""
        return len(self._open)


def group_decider(policy: GroupPolicy, scored: bool) -> Decide:
    """How a rendezvous group is decided: ``policy`` (``scored`` false: the runner leaves scoring
    to the framework), except that a group is dropped when a member left it (the framework holds
    no output for that member) or, without scoring, when a member failed (the neutral value, the
    mean of the members' rewards, is unknown here)."""

    def decide(group_id: str, sample: Sample, episodes: list[Episode], any_left: bool) -> EpisodeGroup:
        chosen = GroupPolicy("drop_group", policy.max_failed_steps) if any_left or not scored else policy
        return apply_group_policy(group_id, sample, episodes, chosen, needs_reward=scored)

    return decide
