"""The trl backend's plugin: its launcher hands the entry point the job the core parsed (no second
parse of the plan's dump in the same process), GRPO and SFT have their own entry points, and the
package's modules import each other without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aworld_core.config import load_job_config
from aworld_core.errors import UsageError

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "aworld-trl" / "aworld_trl"
RECORDER = '''
def record(job, output_dir):
    return {"job_id": id(job), "parsed": type(job).__name__ == "JobConfig"}
'''


def test_the_launcher_passes_the_parsed_job_to_the_entry_point(tmp_path: Path) -> None:
    from aworld_trl import plugin

    job = load_job_config(data={"name": "t", "backend": "trl", "output_dir": str(tmp_path / "out")})
    plan = plugin.plan(job, tmp_path / "out")
    assert plan.entrypoint == "aworld_trl.trainer:train" and isinstance(plan.entrypoint_kwargs["job"], dict)
    (tmp_path / "recorder.py").write_text(RECORDER)
    result = plugin.launch(job, plan.model_copy(update={"entrypoint": f"{tmp_path / 'recorder.py'}:record"}))
    assert result.metrics == {"job_id": id(job), "parsed": True}
    assert (tmp_path / "out" / plugin.JOB_FILE).is_file()  # the plan's files are still written
    assert isinstance(plan.entrypoint_kwargs["job"], dict)  # the plan itself is left as planned


def test_grpo_and_sft_entry_points_refuse_each_others_jobs(tmp_path: Path) -> None:
    from aworld_trl import sft, trainer

    grpo_job = load_job_config(data={"name": "t", "backend": "trl", "output_dir": str(tmp_path)})
    with pytest.raises(UsageError, match="no sft: section; GRPO's entry point is aworld_trl.trainer:train"):
        sft.train(grpo_job, str(tmp_path))
    (tmp_path / "e.jsonl").write_text("")
    sft_job = load_job_config(data={"name": "t", "backend": "trl", "output_dir": str(tmp_path),
                                    "sft": {"train": str(tmp_path / "e.jsonl")}})
    with pytest.raises(UsageError, match="its entry point is aworld_trl.sft:train"):
        trainer.train(sft_job, str(tmp_path))


def test_the_package_has_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for file in PACKAGE.glob("*.py"):
        imported = graph.setdefault(file.stem, set())
        for node in ast.walk(ast.parse(file.read_text())):  # lazy (function-level) imports count too
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aworld_trl."):
                imported.add(node.module.split(".")[1])
    cycles = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                cycles.append(" -> ".join([*path, nxt]))
            elif nxt not in path:
                walk(start, nxt, [*path, nxt])

    for module in sorted(graph):
        walk(module, module, [module])
    assert not cycles, cycles
