"""Token fidelity against the real engine: multi-turn calculator episodes (a real MCP server),
sampled by vLLM through ``TokenLLM`` and the worker kit's ``EpisodeRunner``.

For every episode: the trained (mask 1) ids, logprobs and versions are exactly what vLLM
returned, in order (an aborted and resumed generation is its parts joined); every prompt vLLM
saw is a prefix of the trained sequence; the HF model's teacher-forced logprobs match vLLM's
within ``TOLERANCE`` (the max difference is printed); and across a weight update in the middle
of the episodes each token's version names the weights that sampled it, whose logprobs it has.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from teacher_forcing import hf_logprobs

from aworld_core.tokens import ABORT

pytestmark = pytest.mark.slow
TOLERANCE = 0.03


class Recording:
    """Passes every call to the real engine and keeps what it returned (to compare with the view)."""

    def __init__(self, inner: Any):
        self.inner, self.calls = inner, []

    async def generate(self, prompt_ids, sampling, *, request_id):
        out = await self.inner.generate(prompt_ids, sampling, request_id=request_id)
        self.calls.append(SimpleNamespace(request_id=request_id, prompt_ids=list(prompt_ids), output=out))
        return out


def runner_for(engine: Any, model_dir: Path, calculator: Any, tmp_path: Path) -> tuple[Any, Recording]:
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.worker import EpisodeRunner, build_token_llm, load_job

    job = load_job({
        "name": "vllm-fidelity", "backend": "trl", "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir), "tool_parser": "hermes"},
        "agent": {"name": "calc-agent", "max_steps": 3, "mcp_config": calculator.mcp_config()},
        "train_dataset": {"name": "arith", "options": {"n": 8}},
        "reward": {"name": "exact_answer"},
        "rollout": {"concurrency": 16, "episode_timeout_s": 120},
    })
    recording = Recording(engine)
    llm = build_token_llm(recording, load_tokenizer(model_dir), job, max_response_tokens=96)
    return EpisodeRunner.from_job(job, llm), recording


def sampled_parts(calls: list[Any]) -> list[Any]:
    """The engine's outputs as the session records them: an aborted output and its resumption
    (same session, next call) are one sampled run."""
    parts: list[list[Any]] = []
    resuming = False
    for call in calls:
        if resuming:
            parts[-1].append(call.output)
        else:
            parts.append([call.output])
        resuming = call.output.stop_reason == ABORT
    runs = []
    for part in parts:
        ids = [t for o in part for t in o.token_ids]
        logprobs = [lp for o in part for lp in (o.logprobs or [])]
        versions = [v for o in part for v in o.versions()]
        if ids:
            runs.append(SimpleNamespace(ids=ids, logprobs=logprobs, versions=versions))
    return runs


def check_episode(episode: Any, calls: list[Any], models: dict[int, Path]) -> tuple[float, int]:
    """Assert the fidelity properties; returns (max |vLLM - HF| logprob, tool turns)."""
    view = episode.training
    full = [*view.prompt_ids, *view.response_ids]
    runs, current = [], []
    for i, m in enumerate(view.response_mask):
        if m:
            current.append(i)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    expected = sampled_parts(calls)
    assert len(runs) == len(expected), episode.id
    for k, (run, out) in enumerate(zip(runs, expected, strict=True)):
        ids = [view.response_ids[i] for i in run]
        if view.truncated and k == len(runs) - 1:
            n = len(ids)
            assert ids == out.ids[:n] and [view.response_logprobs[i] for i in run] == out.logprobs[:n]
        else:
            assert ids == out.ids
            assert [view.response_logprobs[i] for i in run] == out.logprobs
            assert [view.response_versions[i] for i in run] == out.versions
    for call in calls:
        assert full[: len(call.prompt_ids)] == call.prompt_ids
    for i, m in enumerate(view.response_mask):
        if not m:
            assert view.response_logprobs[i] == 0.0 and view.response_versions[i] == -1
    worst = 0.0
    tables = {v: hf_logprobs(path, full)[len(view.prompt_ids) - 1:] for v, path in models.items()}
    for i, m in enumerate(view.response_mask):
        if m:
            version = view.response_versions[i]
            worst = max(worst, abs(view.response_logprobs[i] - tables[version][i]))
    tool_turns = sum(1 for msg in episode.messages if getattr(msg, "role", None) == "tool"
                     or (isinstance(msg, dict) and msg.get("role") == "tool"))
    return worst, tool_turns


def samples(n: int) -> list[Any]:
    from aworld_cpu_grpo_demo.tasks import load_arith

    return load_arith(n=n, seed=5)


def test_multi_turn_tool_episodes_train_exactly_what_vllm_sampled(engine, loop, tool_model_dir, calculator,
                                                                   tmp_path):
    from aworld_core.schemas import SamplingParams

    runner, recording = runner_for(engine, tool_model_dir, calculator, tmp_path)
    version = engine.version
    groups = loop.run(runner.run_batch(samples(4) * 1, group_size=1, sampling=SamplingParams(temperature=1.0)))
    groups += loop.run(runner.run_batch([s for s in samples(3) for _ in range(4)], group_size=4,
                                        sampling=SamplingParams(temperature=1.0)))
    episodes = [e for g in groups for e in g.episodes]
    worst, tools, turns = 0.0, 0, 0
    for episode in episodes:
        assert episode.training is not None, (episode.id, episode.status, episode.error)
        calls = [c for c in recording.calls if c.request_id == episode.id]
        diff, tool_turns = check_episode(episode, calls, {version: tool_model_dir})
        worst, tools, turns = max(worst, diff), tools + tool_turns, max(turns, len(calls))
    print(f"{len(episodes)} episodes, {tools} tool results, up to {turns} engine calls per episode; "
          f"max |vLLM - HF teacher-forced| logprob {worst:.2e}")
    assert tools >= len(episodes) // 2 and turns >= 2  # multi-turn tool episodes, not single answers
    assert worst < TOLERANCE


def test_versions_across_a_weight_update_mid_episodes(engine, loop, tool_model_dir, perturbed_model_dir,
                                                      calculator, tmp_path):
    from aworld_core.schemas import SamplingParams

    runner, recording = runner_for(engine, tool_model_dir, calculator, tmp_path)
    old, aborted = engine.version, engine.aborted

    async def episodes_with_an_update():
        batch = asyncio.create_task(runner.run_batch([s for s in samples(4) for _ in range(4)], group_size=4,
                                                     sampling=SamplingParams(temperature=1.0)))
        # some turns done and some generations in flight: the update aborts them mid-turn
        while (len(recording.calls) < 8 or not engine.llm.get_num_unfinished_requests()) and not batch.done():
            await asyncio.sleep(0.002)
        await engine.update_weights_from_dir(perturbed_model_dir)
        return await batch

    try:
        groups = loop.run(episodes_with_an_update())
        new = engine.version
        episodes = [e for g in groups for e in g.episodes]
        worst, seen = 0.0, set()
        for episode in episodes:
            assert episode.training is not None, (episode.id, episode.status, episode.error)
            calls = [c for c in recording.calls if c.request_id == episode.id]
            diff, _ = check_episode(episode, calls, {old: tool_model_dir, new: perturbed_model_dir})
            worst = max(worst, diff)
            versions = [v for v, m in zip(episode.training.response_versions, episode.training.response_mask,
                                          strict=True) if m]
            assert versions == sorted(versions)  # never an old token after a new one
            seen |= set(versions)
        print(f"{len(episodes)} episodes across an update (versions {sorted(seen)}, "
              f"{engine.aborted} requests aborted so far): max |vLLM - HF| logprob {worst:.2e}")
        assert seen == {old, new} and worst < TOLERANCE
        assert engine.aborted > aborted and any(c.output.stop_reason == ABORT for c in recording.calls)
    finally:
        loop.run(engine.update_weights_from_dir(tool_model_dir))
