"""A two-agent swarm for the multi-policy tests: the planner calls the calculator and answers, the
answerer restates the planner's answer; a reward that credits each policy on its own part."""

from __future__ import annotations

from itertools import count
from typing import Any

from aworld_core import Agent, Swarm


def make_swarm(mcp_config: dict[str, Any]) -> Swarm:
    return Swarm(
        Agent("planner", mcp_config=mcp_config, conf={"max_steps": 3}),
        Agent("answerer", conf={"max_steps": 1}),
    )


_CALLS = count()


def _tie_break() -> float:
    """A different 1e-4 step on every score: members whose answers score alike still differ, so no
    group is all ties (its advantages would be 0, and a one-step test would see no gradient for a
    policy whose two groups tied; that happened when load reordered the sampling)."""
    return (next(_CALLS) % 97) * 1e-4


def policy_reward(episode: Any, sample: Any) -> float:
    """Partial credit (the share of the product's digits in place), so that a group's members differ:
    the episode's reward is the final answer's; the planner is credited on its own answer (per-policy
    rewards, ``aworld_core.policies.set_policy_rewards``), the answerer gets the episode's."""
    from aworld_core.policies import set_policy_rewards
    from aworld_cpu_grpo_demo.tasks import parse_answer

    truth = str(sample.ground_truth)

    def score(text: str | None) -> float:
        answer = parse_answer(text)
        if answer is None:
            return 0.0
        said = str(answer)
        return sum(a == b for a, b in zip(said, truth, strict=False)) / max(len(truth), len(said))

    planner = [s for s in episode.steps if s.exp_meta.agent_id == "planner"]
    planner_score = score(planner[-1].exp_data.state.content if planner else None) + _tie_break()
    set_policy_rewards(episode, {"planner": planner_score})
    return score(episode.final_answer) + _tie_break()
