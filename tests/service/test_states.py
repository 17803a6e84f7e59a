"""The task state machine: the moves it allows, and the clear errors for the others."""

from __future__ import annotations

import pytest

from aworld_core.schemas import EpisodeStatus, TaskStatus
from aworld_service import states
from aworld_service.errors import IllegalTransitionError

FINAL = [TaskStatus.SUCCESS, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.TIMEOUT]


def test_the_documented_moves_are_allowed() -> None:
    states.check(TaskStatus.INIT, TaskStatus.RUNNING)
    states.check(TaskStatus.INIT, TaskStatus.CANCELLED)
    for target in [*FINAL, TaskStatus.RUNNING, TaskStatus.INIT]:
        states.check(TaskStatus.RUNNING, target)


@pytest.mark.parametrize("final", FINAL)
@pytest.mark.parametrize("target", list(TaskStatus))
def test_a_final_status_never_changes(final: TaskStatus, target: TaskStatus) -> None:
    with pytest.raises(IllegalTransitionError, match=f"cannot move from {final.value} to {target.value}.*final"):
        states.check(final, target, "t1")


@pytest.mark.parametrize("target", [TaskStatus.SUCCESS, TaskStatus.FAILED, TaskStatus.TIMEOUT, TaskStatus.INIT])
def test_a_queued_task_must_run_before_it_finishes(target: TaskStatus) -> None:
    with pytest.raises(IllegalTransitionError, match="task .t9. cannot move from init.*may only move to cancelled, running"):
        states.check(TaskStatus.INIT, target, "t9")


def test_sources_and_terminal_set() -> None:
    assert set(states.sources(TaskStatus.CANCELLED)) == {TaskStatus.INIT, TaskStatus.RUNNING}
    assert set(states.sources(TaskStatus.SUCCESS)) == {TaskStatus.RUNNING}
    assert states.TERMINAL == set(FINAL)
    assert all(s.terminal for s in FINAL) and not TaskStatus.INIT.terminal and not TaskStatus.RUNNING.terminal


def test_episode_status_maps_to_task_status() -> None:
    assert states.from_episode(EpisodeStatus.SUCCESS) is TaskStatus.SUCCESS
    assert states.from_episode(EpisodeStatus.FAILED) is TaskStatus.FAILED
    assert states.from_episode(EpisodeStatus.TIMEOUT) is TaskStatus.TIMEOUT
    assert states.from_episode(EpisodeStatus.CANCELLED) is TaskStatus.CANCELLED
    with pytest.raises(IllegalTransitionError, match="still running"):
        states.from_episode(EpisodeStatus.RUNNING)
