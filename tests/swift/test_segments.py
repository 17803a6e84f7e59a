"""Segmented episodes on ms-swift (issue 27): refused, clearly, and never trained.

ms-swift 4.6 samples and trains one continued token sequence per trajectory (its multi-turn
drivers append each turn to the trajectory's sequence), so an episode that begins a second
training segment (its agent compacted its context, or its client rewrote the history) cannot be
trained on the swift backend. Through ms-swift's own colocate driver (``run_multi_turn``) with the
tiny tool model and the real MCP server: such an episode is recorded as failed with an error naming
the cause and where it trains, and ms-swift trains none of its tokens (only the one label ms-swift
4.6 requires, under advantage 0, as for every failed trajectory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swift_testkit import SYSTEM_PROMPT
from test_scheduler import REWARD, _assert_only_last_label, _rollout, _rows, cleanup, swift_parts  # noqa: F401 (fixtures)

from aworld_core.config import load_job_config
from aworld_swift.runtime import SwiftRuntime, set_runtime
from aworld_swift.trajectory import INFO_KEY, SEGMENTS_REFUSED


def _compacting_runtime(tmp_path: Path, mcp_config: dict[str, Any]) -> SwiftRuntime:
    compaction = {"strategy": "summary", "max_context_tokens": 16, "summary_prompt": "Summarize.",
                  "max_compactions": 1}
    job = load_job_config(data={
        "name": "swift-segments",
        "output_dir": str(tmp_path / "run"),
        "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT, "max_steps": 3, "mcp_config": mcp_config,
                  "compaction": compaction},
        "reward": {"name": REWARD, "trajectory_aware": True},
        "rollout": {"episode_timeout_s": 60},
    })
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    runtime = SwiftRuntime(job, tmp_path / "run" / "job.json")
    set_runtime(runtime)
    return runtime


def test_a_segmented_episode_is_refused_and_trains_nothing(tmp_path, swift_parts, mcp_config, add_tools, cleanup):  # noqa: F811
    _compacting_runtime(tmp_path, mcp_config)
    rows = _rows(tmp_path, add_tools, [(2, 3)])
    _, samples, outputs = _rollout(swift_parts, rows, generations=1, max_turns=4)
    info = outputs[0].rollout_infos[INFO_KEY]
    assert info["status"] == "failed" and not info["trained"]
    assert SEGMENTS_REFUSED in info["error"] and "trl, verl (V1) or areal" in info["error"]
    _assert_only_last_label(swift_parts, samples[0], outputs[0])
