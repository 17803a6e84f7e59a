"""The reward functions when one GRPO group spans training processes.

ms-swift only checks that the whole generation batch divides by ``num_generations``, so with
``per_device_train_batch_size=2, num_generations=4`` and two processes each process's reward
functions see half a group. The group policy and the all-failed count must be decided on the whole
group: ``judge`` gathers every process's rows, and each process returns its own slice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dist_rewards import DOWN, HALF, IDS, SPLIT, call, runtime

from aworld_core.errors import AworldError
from aworld_core.vllm_server import free_port
from aworld_core.worker import GroupPolicy
from aworld_swift.rewards import episode_record, gather_parts, judge_parts
from aworld_swift.runtime import set_runtime

HERE = Path(__file__).resolve().parent


@pytest.fixture
def cleanup():
    yield
    set_runtime(None)


def _parts(split):
    """Every process's part as ``judge`` gathers it."""
    parts = []
    for entries in split:
        records = [episode_record(e, IDS[0]) for e in entries]
        raw = [None] * len(entries)
        parts.append((entries, records, raw))
    return parts


@pytest.mark.parametrize(("policy", "expected"), [
    # the failed members (all on process 1) get the mean of the members that train, on process 0
    ("keep_group_neutral", [[1.0, 0.0], [0.5, 0.5]]),
    # a failure on process 1 drops the group on process 0 too
    ("drop_group", [[0.0, 0.0], [0.0, 0.0]]),
])
def test_the_group_policy_decides_on_the_whole_group_and_each_process_gets_its_slice(policy, expected):
    per_rank = []
    for rank in (0, 1):
        judged = judge_parts(_parts(SPLIT), rank, GroupPolicy(failed_episodes=policy))
        assert (judged.offset, judged.count) == (2 * rank, 2)
        assert judged.rows == [[0, 1, 2, 3]] and len(judged.groups) == 1 and len(judged.groups[0]) == 4
        assert [e["episode_id"] for e in judged.local(judged.entries)] == [e["episode_id"] for e in SPLIT[rank]]
        per_rank.append(judged.local(judged.values()))
    assert per_rank == expected
    # judged on each half alone (what a process did before), process 1's all-failed half was dropped
    alone = judge_parts(_parts(SPLIT[1:]), 0, GroupPolicy(failed_episodes=policy))
    assert alone.values() == [0.0, 0.0] and alone.groups[0].dropped


def test_one_process_gathers_nothing_and_judges_the_batch_as_before(tmp_path, cleanup):
    assert gather_parts({"rows": [1]}) == ([{"rows": [1]}], 0)
    made = runtime(tmp_path / "run", "keep_group_neutral", max_failed_steps=2)
    job, gsm8k = call(["aworld", "aworld_gsm8k"], SPLIT[0] + SPLIT[1])
    assert job == gsm8k == [1.0, 0.0, 0.5, 0.5]
    assert made.last_metrics["aworld/episodes"] == 4.0 and made.last_metrics["aworld/trained_rate"] == 0.5
    # rows without an aworld entry are left to the completion path; a batch of only those judges nothing
    assert call(["aworld_gsm8k"], [None, None]) == [[0.0, 0.0]]
    assert made.last_metrics["aworld/episodes"] == 4.0
    call(["aworld"], HALF[0] + HALF[1])
    call(["aworld"], DOWN[0] + DOWN[1])  # the first all-failed batch is counted
    with pytest.raises(AworldError, match="2 consecutive training steps"):
        call(["aworld"], [dict(e, episode_id=f"again-{e['episode_id']}") for e in DOWN[0] + DOWN[1]])


def test_two_processes_judge_a_split_group_together(tmp_path):
    """Two real ``torch.distributed`` processes (gloo), each with its half of every batch."""
    port = free_port()
    outs = [tmp_path / f"rank{rank}.json" for rank in (0, 1)]
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, str(HERE / "dist_rewards.py"), str(out), "keep_group_neutral"],
                              env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, out in enumerate(outs)]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=180)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    results = [json.loads(out.read_text()) for out in outs]
    # the same as one process judging the whole batch: each process returns its slice
    assert [r["split"] for r in results] == [[[1.0, 0.0], [1.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]]]
    # metrics of the whole batch, on every process
    assert [(r["episodes"], r["trained_rate"]) for r in results] == [(4.0, 0.5), (4.0, 0.5)]
    # process 1 had nothing trainable but the step trained on process 0: no all-failed step
    # (max_failed_steps 1); a step with nothing trainable anywhere stops both processes
    assert [r["half"] for r in results] == [[[1.0, 1.0]], [[1.0, 1.0]]]
    for r in results:
        assert r["down"] is not None and "1 consecutive training steps" in r["down"]
