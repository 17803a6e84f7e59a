"""aworld-verl's registration: the ``verl`` backend (plan and launch ``verl.trainer.main_ppo``), one object."""

from __future__ import annotations

from aworld_core.hookspecs import hookimpl
from aworld_core.specs import SAMPLING_FIELDS, Backend, Capabilities

NAME = "verl"

# Top-level sections of a verl config (what upstream AWorld's AgentTrainer(config=...) took): in a
# job they belong under backends.verl, passed to verl as hydra overrides; the job's error says so.
CONFIG_SECTIONS = frozenset({
    "data", "trainer", "actor_rollout_ref", "critic", "algorithm", "reward_model", "custom_reward_function",
    "ray_init", "ray_kwargs", "global_profiler", "transfer_queue",
})


@hookimpl
def register_backends() -> list[Backend]:
    return [
        Backend(
            NAME,
            "verl PPO/GRPO with AWorld agent loops (Ray; vLLM/SGLang rollouts on GPUs, "
            "a vLLM server of its own on a CPU: backends.verl.aworld.rollout_server)",
            planner="aworld_verl.launch:build_plan",
            launcher="aworld_verl.launch:launch",  # writes the parquet files, then runs the plan
            sft_planner="aworld_verl.sft:build_sft_plan",
            sft_launcher="aworld_verl.sft:launch_sft",
            framework="verl",
            install_hint="pip install 'aworld-verl[verl]' (and vLLM: see the plugin README)",
            capabilities=Capabilities(sampling=SAMPLING_FIELDS, resume=True, segments=True),
            formats={"verl": "aworld_verl.sft_rows:sft_rows"},  # multi-turn SFT parquet
            config_sections=CONFIG_SECTIONS,
        )
    ]
