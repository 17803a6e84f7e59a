"""Backends as objects: a plugin registers one ``Backend`` carrying its planner, launcher, SFT
planner and capabilities; the core looks it up by name and calls it, and validation refuses a job
asking for what the backend does not declare, naming the backend and the setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aworld_core import Backend, Capabilities, LaunchPlan, hookimpl
from aworld_core.config import load_job_config
from aworld_core.errors import UsageError
from aworld_core.jobs import launch_job, plan_job
from aworld_core.plugins import PluginManager, get_plugin_manager, reset_plugin_manager
from aworld_core.specs import SAMPLING_FIELDS
from aworld_core.validation import validate_backend
from support.fake_dists import make_dist, run_cli

CALLS: list[tuple[str, Any]] = []


def plan(job: Any, output_dir: Path) -> LaunchPlan:
    CALLS.append(("plan", output_dir))
    return LaunchPlan(backend="mine", entrypoint=f"{__name__}:train", entrypoint_kwargs={"name": job.name})


def plan_sft(job: Any, output_dir: Path) -> LaunchPlan:
    CALLS.append(("plan_sft", output_dir))
    return LaunchPlan(backend="mine", entrypoint=f"{__name__}:train", entrypoint_kwargs={"name": "sft"})


def launch(job: Any, plan: LaunchPlan) -> dict[str, str]:
    CALLS.append(("launch", plan.entrypoint_kwargs["name"]))
    return {"launched": plan.entrypoint_kwargs["name"]}


def train(name: str) -> dict[str, str]:
    CALLS.append(("train", name))
    return {"trained": name}


class _Plugin:
    def __init__(self, *backends: Backend):
        self.backends = list(backends)

    @hookimpl
    def register_backends(self) -> list[Backend]:
        return self.backends


@pytest.fixture
def use(tmp_path: Path) -> Iterator[Any]:
    """Install backends in-process as the process-wide catalog."""
    CALLS.clear()

    def install(*backends: Backend) -> PluginManager:
        manager = PluginManager(load_entry_points=False)
        manager.register(_Plugin(*backends), name="test-backends")
        reset_plugin_manager(manager)
        return manager

    yield install
    reset_plugin_manager()


def _job(tmp_path: Path, **data: Any) -> Any:
    return load_job_config(data={"name": "j", "output_dir": str(tmp_path / "out"), **data})


def test_a_backend_is_one_object_the_core_calls_by_name(use, tmp_path: Path) -> None:
    use(Backend("mine", "a test backend", planner=plan, launcher=f"{__name__}:launch"))
    job = _job(tmp_path)
    planned, output_dir = plan_job("mine", job)
    assert CALLS == [("plan", output_dir)] and output_dir.is_absolute()
    assert planned.entrypoint_kwargs == {"name": "j"}
    assert launch_job("mine", job, planned) == {"launched": "j"}  # its launcher, given as an import reference
    assert CALLS[-1] == ("launch", "j")


def test_without_a_launcher_the_core_runs_the_plan(use, tmp_path: Path) -> None:
    use(Backend("mine", "a test backend", planner=f"{__name__}:plan"))
    job = _job(tmp_path)
    result = launch_job("mine", job, plan_job("mine", job)[0])
    assert CALLS[-1] == ("train", "j") and result.metrics == {"trained": "j"}


def test_an_sft_job_goes_to_the_sft_planner_and_is_refused_by_a_backend_without_one(use, tmp_path: Path) -> None:
    (tmp_path / "episodes.jsonl").write_text("")
    use(Backend("mine", "with SFT", planner=plan, sft_planner=plan_sft),
        Backend("plain", "RL only", planner=plan))
    job = _job(tmp_path, sft={"train": str(tmp_path / "episodes.jsonl")})
    validate_backend("mine", job)
    assert plan_job("mine", job)[0].entrypoint_kwargs == {"name": "sft"}
    with pytest.raises(UsageError) as refused:
        validate_backend("plain", job)
    assert str(refused.value) == (
        "the job sets sft: (supervised fine-tuning on trajectories), which backend 'plain' does not train; "
        "use the mine backend, or remove sft: for RL"
    )
    with pytest.raises(UsageError, match="backend 'plain' does not train"):
        plan_job("plain", job)  # planning without validation refuses it too
    assert ("plan", tmp_path / "out") not in CALLS


def test_validation_refuses_each_setting_the_backend_does_not_honour(use, tmp_path: Path) -> None:
    use(Backend("bare", "honours nothing", planner=plan),
        Backend("hot", "temperature only", planner=plan, capabilities=Capabilities(sampling={"temperature"})),
        Backend("full", "everything", planner=plan,
                capabilities=Capabilities(sampling=SAMPLING_FIELDS, segments=True)))
    job = _job(tmp_path, rollout={"sampling": {"temperature": 0.7, "top_k": 5}},
               agent={"compaction": {"strategy": "drop_tool_results", "max_context_tokens": 512}})
    with pytest.raises(UsageError) as refused:
        validate_backend("bare", job)
    text = str(refused.value)
    assert "the job has 3 problems" in text
    assert "agent.compaction: backend 'bare' does not train episodes of several segments" in text
    assert ("rollout.sampling.temperature: rollout.sampling.temperature=0.7: backend 'bare' does not honour it, "
            "so it would be ignored; remove it (what 'bare' honours: none)") in text
    assert "rollout.sampling.top_k=5: backend 'bare' does not honour it" in text
    with pytest.raises(UsageError) as refused:
        validate_backend("hot", job)
    text = str(refused.value)
    assert "rollout.sampling.temperature" not in text.replace("honours: rollout.sampling.temperature", "")
    assert "rollout.sampling.top_k=5: backend 'hot' does not honour it" in text
    assert [p[0] for p in refused.value.problems] == ["agent.compaction", "rollout.sampling.top_k"]
    validate_backend("full", job)


def test_a_dry_run_refuses_what_the_backend_lacks_with_exit_code_2(tmp_path: Path) -> None:
    site = tmp_path / "site"
    make_dist(site, "aworld-bare", "1.0.0", {"bare": "aworld_bare"}, {"aworld_bare.py": (
        "from aworld_core import Backend, LaunchPlan, hookimpl\n"
        "def plan(job, output_dir):\n"
        "    return LaunchPlan(backend='bare', command=['true'])\n"
        "@hookimpl\n"
        "def register_backends():\n"
        "    return [Backend('bare', 'honours nothing', planner=plan)]\n"
    )})
    (tmp_path / "job.yaml").write_text("name: j\nrollout:\n  sampling:\n    top_p: 0.9\n")
    result = run_cli("--backend", "bare", "--config", str(tmp_path / "job.yaml"), "--dry-run", site=site)
    assert result.returncode == 2
    assert "rollout.sampling.top_p=0.9: backend 'bare' does not honour it" in result.stderr
    listing = run_cli("--list", site=site)
    backends = listing.stdout.split("Backends:\n", 1)[1].splitlines()
    line = next(i for i, text in enumerate(backends) if text.split()[0] == "bare")
    assert backends[line + 1].split() == ["honours:", "none"]
    trl = next(i for i, text in enumerate(backends) if text.split()[0] == "trl")
    assert backends[trl + 1].split(maxsplit=1)[1].startswith("sampling=temperature,top_k,top_p, lora, resume, sft")


def test_capabilities_name_only_known_sampling_fields() -> None:
    assert Capabilities(sampling=["top_p"]).sampling == frozenset({"top_p"})
    with pytest.raises(ValueError, match=r"unknown sampling field\(s\) \['temprature'\]"):
        Capabilities(sampling={"temprature"})


def test_a_plugin_still_implementing_plan_launch_is_told_what_replaced_it() -> None:
    class Old:
        @hookimpl
        def plan_launch(self, backend, job, output_dir):
            return None

    with pytest.raises(UsageError, match=r"hook 'plan_launch' was removed: a backend is one object now: "
                       r"register_backends returns aworld_core.Backend\(name, description, planner=...\)"):
        PluginManager(load_entry_points=False).register(Old(), name="old")


def test_the_shipped_backends_resolve_what_they_declare() -> None:
    """Each published backend's planner, launchers and formats import (no framework needed) and its
    capabilities are what its docs promise."""
    catalog = get_plugin_manager().catalog()
    shipped = {name: catalog.backend(name) for name in ("trl", "verl", "areal", "swift")}
    for backend in shipped.values():
        for target in (backend.planner, backend.launcher, backend.sft_planner, backend.sft_launcher,
                       *backend.formats.values()):
            if isinstance(target, str):
                from aworld_core.imports import import_ref

                assert callable(import_ref(target)), target
        assert backend.capabilities.sampling == frozenset(SAMPLING_FIELDS), backend.name
    assert {name for name, b in shipped.items() if b.sft} == {"trl", "verl", "swift"}
    assert {name for name, b in shipped.items() if b.capabilities.segments} == {"trl", "verl", "areal", "swift"}
    assert {name for name, b in shipped.items() if b.capabilities.multi_policy} == {"trl"}
