"""The plugin: the ``reinforce`` backend, its in-process launch plan, and its toy task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aworld_core import Backend, Capabilities, DatasetSpec, LaunchPlan, RewardSpec, hookimpl
from aworld_core.errors import ConfigError
from aworld_core.specs import SAMPLING_FIELDS

DEFAULTS = {"steps": 100, "prompts_per_step": 8, "group_size": 8, "learning_rate": 5e-3,
            "max_response_tokens": 3, "torch_threads": 1, "print_every": 10}


def options(job: Any) -> dict[str, Any]:
    """``backends.reinforce`` over ``DEFAULTS``; an unknown key is refused, never ignored."""
    given = job.backend_section("reinforce")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown backends.reinforce option(s) {unknown}; the options are {sorted(DEFAULTS)}",
                          [(f"backends.reinforce.{k}", given[k], "a known option") for k in unknown])
    return {**DEFAULTS, **given}


@hookimpl
def register_backends() -> list[Backend]:
    # rollout.sampling: the kit's EpisodeRunner.from_job (train.py) samples every episode with it
    return [Backend("reinforce", "REINFORCE with a group baseline in plain PyTorch (an example; CPU)",
                    planner=plan, framework="torch", install_hint="pip install 'aworld-core[hf]'",
                    capabilities=Capabilities(sampling=SAMPLING_FIELDS))]


@hookimpl
def register_datasets() -> list[DatasetSpec]:
    return [DatasetSpec("case_prompts", "random words, all UPPER or all lower case (options: n, seed)",
                        "aworld_reinforce_backend.task:load_case_prompts")]


@hookimpl
def register_rewards() -> list[RewardSpec]:
    return [RewardSpec("same_case", "the share of the answer's letters in the prompt's case",
                       "aworld_reinforce_backend.task:same_case")]


def plan(job: Any, output_dir: Path) -> LaunchPlan:
    """The in-process launch of ``job`` (its planner, called by the core)."""
    options(job)  # --dry-run refuses what a run would
    # an import reference and serialized config: the trainer rebuilds everything from them
    return LaunchPlan(
        backend="reinforce",
        entrypoint="aworld_reinforce_backend.train:train",
        entrypoint_kwargs={"job": job.model_dump(mode="json"), "output_dir": str(output_dir)},
        files={"job.json": job.model_dump_json(indent=2)},
    )
