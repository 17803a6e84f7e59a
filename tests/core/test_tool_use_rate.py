"""``aworld_core.evaluate.tool_use_rate``: the share of episodes with a tool call, which every backend
reports beside held-out accuracy (``eval_<when>/tool_use_rate``)."""

from __future__ import annotations

from aworld_core.evaluate import tool_use_rate
from aworld_core.schemas import Episode, EpisodeStatus, ExpData, ExpMeta, ToolCall, TrajectoryStep


def _episode(*, tool: bool) -> Episode:
    steps = [TrajectoryStep(exp_meta=ExpMeta(task_id="t", agent_id="a", step=0))]
    if tool:
        steps.insert(0, TrajectoryStep(exp_meta=ExpMeta(task_id="t", agent_id="a", step=0),
                                       exp_data=ExpData(actions=[ToolCall(id="c0", name="calc", arguments="{}")])))
    return Episode(task_id="t", agent_id="a", status=EpisodeStatus("success"), reward=1.0, steps=steps)


def test_the_share_of_episodes_that_called_a_tool():
    assert tool_use_rate([_episode(tool=True), _episode(tool=False), _episode(tool=True), _episode(tool=False)]) == 0.5
    assert tool_use_rate([_episode(tool=False)]) == 0.0
    assert tool_use_rate([]) == 0.0
