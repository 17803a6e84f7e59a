"""Hand-made batches for the reward functions across training processes, and a worker that runs
them as one of several real ``torch.distributed`` processes (gloo, on 127.0.0.1).

``python dist_rewards.py OUT POLICY`` with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` set: this process's rows of each batch (``per_device_train_batch_size=2``,
``num_generations=4``: one group spans both processes) through ms-swift's registered ``aworld``
and ``aworld_gsm8k`` reward functions; what each returned is written to ``OUT`` as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from aworld_core.schemas import Sample

IDS = [[5, 6, 7]]  # ms-swift's response_token_ids of a row: one segment
MASK = [[0, 1], [1, 2]]  # the view's mask as runs: one environment token, two sampled


def entry(episode_id: str, task_id: str, *, reward: float | None = None, gsm8k: float | None = None,
          status: str = "success", reward_error: str | None = None) -> dict[str, Any]:
    """A ``rollout_infos['aworld']`` entry as the scheduler writes it."""
    ok = status == "success"
    return {
        "episode_id": episode_id, "task_id": task_id, "agent_id": "calc", "status": status,
        "error": None if ok else "MCPConnectionError: down", "stop": None, "reward": reward,
        "rewards": {} if gsm8k is None else {"gsm8k": gsm8k},
        "reward_errors": {"gsm8k": reward_error} if reward_error else {},
        "trained": ok and reward is not None, "untrainable": None, "mask_runs": MASK if ok else None,
        "llm_calls": 1, "tool_calls": 1, "tool_results": 1, "tool_errors": 0,
    }


def failed(episode_id: str, task_id: str) -> dict[str, Any]:
    return entry(episode_id, task_id, status="failed")


def kwargs(entries: list[dict[str, Any] | None]) -> dict[str, Any]:
    """What ms-swift passes a reward function for these rows."""
    samples = [Sample(id=e["task_id"] if e else "x", prompt=[{"role": "user", "content": "1 + 1?"}],
                      ground_truth="2").model_dump_json() for e in entries]
    return {"rollout_infos": [{"aworld": e} if e else {} for e in entries], "response_token_ids": [IDS] * len(entries),
            "aworld_sample": samples}


# per process: two rows each, one group of four across both
SPLIT = [
    [entry("a-0", "a", reward=1.0, gsm8k=1.0), entry("a-1", "a", reward=0.0, gsm8k=0.0)],
    [failed("a-2", "a"), entry("a-3", "a", reward_error="broken on purpose")],
]
# process 0 trains, process 1 has nothing trainable: not an all-failed step
HALF = [
    [entry("b-0", "b", reward=1.0, gsm8k=1.0), entry("b-1", "b", reward=1.0, gsm8k=1.0)],
    [failed("b-2", "b"), failed("b-3", "b")],
]
# nothing trainable anywhere
DOWN = [[failed("c-0", "c"), failed("c-1", "c")], [failed("c-2", "c"), failed("c-3", "c")]]


def runtime(folder: Path, policy: str, max_failed_steps: int = 1) -> Any:
    from aworld_core.config import load_job_config
    from aworld_swift.runtime import SwiftRuntime, set_runtime

    job = load_job_config(data={
        "name": "rewards-test", "output_dir": str(folder), "agent": {"name": "calc", "max_steps": 3},
        "reward": {"name": "gsm8k"},
        "rollout": {"failed_episodes": policy, "max_failed_steps": max_failed_steps},
    })
    folder.mkdir(parents=True, exist_ok=True)
    made = SwiftRuntime(job, folder / "job.json")
    set_runtime(made)
    return made


def call(names: list[str], entries: list[dict[str, Any] | None]) -> list[list[float]]:
    from swift.rewards import orms

    import aworld_swift.swift_plugin  # noqa: F401  (registers the ms-swift names)

    return [orms[name]()(["x"] * len(entries), **kwargs(entries)) for name in names]


def main(out: str, policy: str) -> None:
    import torch.distributed as dist

    from aworld_core.errors import AworldError

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    try:
        made = runtime(Path(out).parent / f"run{rank}", policy)
        result: dict[str, Any] = {"split": call(["aworld", "aworld_gsm8k"], SPLIT[rank]),
                                  "episodes": made.last_metrics["aworld/episodes"],
                                  "trained_rate": made.last_metrics["aworld/trained_rate"]}
        result["half"] = call(["aworld"], HALF[rank])
        try:
            call(["aworld"], DOWN[rank])
            result["down"] = None
        except AworldError as exc:
            result["down"] = str(exc)
        Path(out).write_text(json.dumps(result))
        # both ranks leave gloo together: a rank tearing down while its peer still has the pair open
        # was seen to abort at exit ("terminate called without an active exception", -6)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
