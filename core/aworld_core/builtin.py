"""The core's own plugin: built-in rewards and datasets, the default agent builder and rollout.

Registered like any other plugin, and ``trylast`` where it gives a default, so an installed
plugin can replace any of it. Heavy modules are imported inside the hooks, not here.
"""

from __future__ import annotations

from typing import Any

from aworld_core.hookspecs import hookimpl
from aworld_core.specs import RewardSpec


@hookimpl
def register_rewards() -> list[RewardSpec]:
    return [
        RewardSpec(
            "gsm8k",
            "1.0 when the final answer (after '####', else the last number) equals the ground truth",
            "aworld_core.rewards.builtin:gsm8k_reward",
        ),
        RewardSpec(
            "format",
            "0.1 when the response holds an <answer>...</answer> tag",
            "aworld_core.rewards.builtin:format_reward",
        ),
    ]


@hookimpl
def register_datasets() -> list[Any]:
    from aworld_core.datasets import builtin_dataset_specs

    return builtin_dataset_specs()


@hookimpl(trylast=True)
def build_agents(job: Any, settings: Any) -> Any:
    from aworld_core.agents.factory import agent_from_job

    return agent_from_job(job, settings)


@hookimpl(trylast=True)
def rollout(agent: Any, sample: Any, llm: Any, context: Any) -> Any:
    from aworld_core.runtime.episode import run_episode
    from aworld_core.schemas import RolloutContext
    from aworld_core.worker.openai_agent import OpenAIAgent, run_openai_episode

    if isinstance(agent, OpenAIAgent):  # agent.openai_agent: through the gateway over the token client
        return run_openai_episode(agent, sample, llm, context)
    ctx = RolloutContext.of(context)
    return run_episode(
        agent,
        sample,
        llm=llm,
        episode_id=ctx.episode_id,
        task_id=ctx.task_id,
        timeout=ctx.timeout,
        max_steps=ctx.max_steps,
        sampling=ctx.sampling,
        **ctx.episode_metadata(),
    )


@hookimpl(trylast=True)
def compute_reward(name: str, episode: Any, sample: Any) -> Any:
    from aworld_core.rewards.registry import compute_named_reward

    return compute_named_reward(name, episode, sample)
