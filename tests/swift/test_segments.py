"""Segmented episodes on ms-swift (issue 27): every segment's sampled tokens train, nothing else.

The agent compacts its context with a summary the policy writes (``agent.compaction``), so each
episode is two training segments: the question, the tool call and the summary; then a fresh
prompt (the task with the summary) and the answer. Through ms-swift's own colocate driver
(``run_multi_turn``) with the tiny tool model and the real MCP server, the scheduler samples the
second segment from its own prompt, and the trainer's seam (``aworld_swift.segments``) makes each
segment one row of ms-swift's batch; ms-swift's ``encode_sample`` of those rows labels exactly the
ids its engine sampled, each under the very prompt it was sampled from. The real trainer
(``swift rlhf``) trains such episodes in ``test_grpo_trains_every_segment`` (slow).
"""

from __future__ import annotations

import io
import json
from copy import copy, deepcopy
from pathlib import Path
from typing import Any

import pytest
import yaml
from swift_testkit import MODEL_TYPE, SYSTEM_PROMPT, TEMPLATE, add_question, read_jsonl
from test_scheduler import REWARD, _rows, _trained, cleanup, swift_parts  # noqa: F401 (fixtures)

from aworld_core.config import load_job_config
from aworld_core.errors import UsageError
from aworld_core.export import read_jsonl as read_episodes
from aworld_swift.runtime import SwiftRuntime, set_runtime
from aworld_swift.segments import segment_outputs
from aworld_swift.trajectory import INFO_KEY

HERE = Path(__file__).resolve().parent
COMPACTION = {"strategy": "summary", "max_context_tokens": 16, "summary_prompt": "Summarize.", "max_compactions": 1}


def _compacting_runtime(tmp_path: Path, mcp_config: dict[str, Any]) -> SwiftRuntime:
    job = load_job_config(data={
        "name": "swift-segments",
        "output_dir": str(tmp_path / "run"),
        "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT, "max_steps": 4, "mcp_config": mcp_config,
                  "compaction": COMPACTION},
        "reward": {"name": REWARD, "trajectory_aware": True},
        "rollout": {"episode_timeout_s": 60},
    })
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    runtime = SwiftRuntime(job, tmp_path / "run" / "job.json")
    set_runtime(runtime)
    return runtime


def _recorded_rollout(parts: dict[str, Any], rows: list[dict[str, Any]], generations: int, max_turns: int = 5,
                      logprobs: list[list[float]] | None = None,
                      ) -> tuple[list[Any], list[Any], list[tuple[list[int], list[int]]]]:
    """ms-swift's colocate driver over the batch; every generation its engine made, as (the prompt
    ids ms-swift's template encoded the request to, the sampled ids); with ``logprobs``, the engine's
    logprobs of each generation go there (in the same order)."""
    from swift.infer_engine import RequestConfig
    from swift.infer_engine.protocol import RolloutInferRequest, RolloutOutput
    from swift.rl_core.data import GRPOSample
    from swift.rollout import invoke_async_hook, run_multi_turn

    from aworld_swift.scheduler import AworldScheduler

    engine, template = parts["engine"], copy(parts["template"])
    template.set_mode("transformers")
    scheduler = AworldScheduler(max_turns=max_turns, tokenizer=parts["processor"], template=parts["template"])
    samples = [GRPOSample.from_row(row) for row in rows for _ in range(generations)]
    for index, sample in enumerate(samples):
        sample.request_id = f"req-{index}"
        sample.prompt_id = f"prompt-{index // generations}"
    requests = [sample.to_infer_request(include_extra=True) for sample in samples]
    config = RequestConfig(n=1, max_tokens=48, temperature=1.0, return_details=True, logprobs=True)
    generated: list[tuple[list[int], list[int]]] = []

    def infer(batch: list[RolloutInferRequest], cfg: RequestConfig) -> list[RolloutOutput]:
        if not batch:
            return []
        prompts = [list(template.encode(deepcopy(request))["input_ids"]) for request in batch]
        responses = engine.infer(batch, cfg, use_tqdm=False)
        generated.extend((p, list(r.choices[0].token_ids)) for p, r in zip(prompts, responses, strict=True))
        if logprobs is not None:
            logprobs.extend([item["logprob"] for item in r.choices[0].logprobs["content"]] for r in responses)
        return [RolloutOutput(response=r) for r in responses]

    invoke_async_hook(scheduler.on_trajectory_start(requests))
    for request, sample in zip(requests, samples, strict=True):
        sample.messages = request.messages
    first = infer([sample.to_infer_request(include_extra=True) for sample in samples], config)
    outputs = run_multi_turn(requests, first, scheduler, infer, config, max_turns=max_turns)
    return samples, outputs, generated


def test_every_segment_trains_exactly_its_sampled_tokens(tmp_path, swift_parts, mcp_config, add_tools, cleanup):  # noqa: F811
    from aworld_swift.segments import segment_outputs

    _compacting_runtime(tmp_path, mcp_config)
    rows = _rows(tmp_path, add_tools, [(2, 3), (1, 4)])
    samples, outputs, generated = _recorded_rollout(swift_parts, rows, generations=2)
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    segmented = 0
    for sample, output in zip(samples, outputs, strict=True):
        info = output.rollout_infos[INFO_KEY]
        episode = episodes[info["episode_id"]]
        if not info["trained"]:
            continue
        view = episode.training
        if view.num_segments == 1:
            continue
        segmented += 1
        assert [s.start for s in view.segments()] == ["first", "compaction"]
        # one ms-swift row per segment, all of the trajectory's request (its group is its prompt's)
        expanded = segment_outputs(output, sample.request_id)
        assert len(expanded) == view.num_segments == len(info["segments"])
        assert {o.response.id for o in expanded} == {sample.request_id}
        trained_sampled: list[int] = []
        for row_output, segment in zip(expanded, view.segments(), strict=True):
            row = deepcopy(sample)
            row.apply_rollout_output(rollout_output=row_output)
            input_ids, labels = _trained(swift_parts, row)
            # ms-swift trains the segment on the prompt it sampled it from (the view records it), then
            # exactly the segment's response: sampled ids labelled with themselves, everything else masked
            assert input_ids == [*segment.prompt_ids, *segment.response_ids]
            assert labels == [-100] * len(segment.prompt_ids) + [
                i if m else -100 for i, m in zip(segment.response_ids, segment.response_mask, strict=True)]
            # every generation of this segment was sampled from exactly the sequence it is trained in
            position, turns = len(segment.prompt_ids), 0
            for prompt, sampled in generated:
                if prompt == input_ids[:position] and sampled and input_ids[position:position + len(sampled)] == sampled:
                    assert all(labels[position + k] == sampled[k] for k in range(len(sampled)))
                    position += len(sampled)
                    turns += 1
                    while position < len(input_ids) and labels[position] == -100:
                        position += 1  # the environment ids up to the next generation
            assert position == len(input_ids) and turns == segment.num_turns
            # the logprobs ms-swift keeps are one per label, the engine's own
            assert sum(len(lp) for lp in row.rollout_logprobs) == sum(segment.response_mask)
            trained_sampled += [i for i, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]
        calls = [step.exp_data.llm_call for step in episode.steps]
        assert trained_sampled == [i for call in calls for i in call.token_data.response_ids]
    assert segmented >= 2


def test_a_batch_of_segmented_episodes_gets_advantages_over_episodes(
        tmp_path, swift_parts, mcp_config, add_tools, cleanup):  # noqa: F811
    """ms-swift's request-aware advantages over the expanded rows: one reward per episode, each
    segment with its episode's advantage, the group statistics over episodes."""
    import torch
    from swift.rewards import orms
    from swift.rl_core.advantage import compute_advantages, compute_advantages_dynamic
    from swift.rl_core.grpo_algorithm import compute_rewards_per_func

    import aworld_swift.swift_plugin  # noqa: F401  (registers the ms-swift names, installs the seams)
    from aworld_swift.segments import segment_outputs

    _compacting_runtime(tmp_path, mcp_config)
    rows = _rows(tmp_path, add_tools, [(2, 3)])
    samples, outputs, _ = _recorded_rollout(swift_parts, rows, generations=3)
    expanded = []
    for sample, output in zip(samples, outputs, strict=True):
        for row_output in segment_outputs(output, sample.request_id):
            row = deepcopy(sample)
            row.apply_rollout_output(rollout_output=row_output)
            expanded.append(row)
    assert len(expanded) > len(samples)  # at least one episode has two rows
    table = compute_rewards_per_func(expanded, [orms["aworld"]()], None, device=torch.device("cpu"))
    advantages, _ = compute_advantages_dynamic(
        table, torch.ones(1), [s.prompt_id for s in expanded], [s.request_id for s in expanded])
    per_episode, _ = compute_advantages(table[[_last(expanded, s.request_id) for s in samples]], torch.ones(1), 3)
    by_request = dict(zip([s.request_id for s in samples], per_episode.tolist(), strict=True))
    for row, advantage in zip(expanded, advantages.tolist(), strict=True):
        assert advantage == pytest.approx(by_request[row.request_id], abs=1e-5)


def _last(rows: list[Any], request_id: str) -> int:
    return max(i for i, row in enumerate(rows) if row.request_id == request_id)


def test_the_trainer_refuses_a_per_row_loss_for_a_segmented_batch():
    from types import SimpleNamespace

    from swift.infer_engine.protocol import RolloutOutput

    from aworld_swift.segments import check_trainer

    entry = {"episode_id": "ep", "segments": [{"segment": 0, "reward": None}, {"segment": 1, "reward": None}]}
    output = RolloutOutput.model_construct(rollout_infos={INFO_KEY: entry})
    trainer = SimpleNamespace(loss_type="grpo", args=SimpleNamespace(dynamic_sample=False),
                              template=SimpleNamespace(padding_free=False))
    with pytest.raises(UsageError, match="token-mean loss_type.*loss_type: dapo"):
        check_trainer(trainer, [output])
    trainer.loss_type = "dapo"
    check_trainer(trainer, [output])
    trainer.args.dynamic_sample = True
    with pytest.raises(UsageError, match="dynamic_sample: false"):
        check_trainer(trainer, [output])
    trainer.args.dynamic_sample = False
    entry["segments"][1]["reward"] = 1.0
    with pytest.raises(UsageError, match="per-segment rewards"):
        check_trainer(trainer, [output])


def test_canary_ms_swift_keeps_the_seams_segments_rely_on():
    """Fails loudly when ms-swift moves or reshapes what ``aworld_swift.segments`` wraps."""
    from swift.rlhf_trainers.grpo_trainer import GRPOTrainer
    from swift.rlhf_trainers.rollout_mixin import RolloutTrainerMixin

    from aworld_swift.segments import check_seams, install

    check_seams()
    install()
    install()  # idempotent
    assert RolloutTrainerMixin._postprocess_rollout_outputs._aworld
    assert GRPOTrainer._compute_loss._aworld
    check_seams()  # still true through the wrappers


def _job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any]) -> Path:
    rows = [{"id": "add-0", "question": add_question(2, 3), "answer": "5"},
            {"id": "add-1", "question": add_question(1, 4), "answer": "5"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {
        "name": "swift-segments-grpo",
        "backend": "swift",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT, "max_steps": 4, "mcp_config": mcp_config,
                  "compaction": COMPACTION},
        "train_dataset": {"path": str(tmp_path / "train.jsonl")},
        "reward": {"name": f"{HERE / 'swift_rewards.py'}:answer_parity", "trajectory_aware": True},
        "rollout": {"max_turns": 5, "episode_timeout_s": 120},
        "backends": {"swift": {
            "model_type": MODEL_TYPE, "template": TEMPLATE, "tuner_type": "full", "torch_dtype": "float32",
            "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 48,
            "max_steps": 2, "temperature": 1.0, "learning_rate": 1e-3, "beta": 0.0, "logging_steps": 1,
            "loss_type": "dapo", "save_strategy": "no", "dataloader_num_workers": 0,
            "reward_funcs": ["aworld"], "external_plugins": [str(HERE / "record_batches.py")],
        }},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.slow
def test_grpo_trains_every_segment(tmp_path, tool_model_dir, mcp_config, monkeypatch):
    """``python -m aworld_core.run`` -> ``swift rlhf``: the batches ms-swift's trainer encodes hold one
    row per segment, each labelled exactly on that segment's sampled ids, every row of an episode
    with the episode's reward."""
    record = tmp_path / "batches.jsonl"
    monkeypatch.setenv("AWORLD_SWIFT_TEST_RECORD", str(record))
    out = io.StringIO()
    assert main_run(["--config", str(_job(tmp_path, tool_model_dir, mcp_config))], out) == 0
    batches = read_jsonl(record)
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    assert len(episodes) == 8
    rows_of: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        rows_of.setdefault(batch["rollout_infos"]["aworld"]["episode_id"], []).append(batch)
    assert set(rows_of) == set(episodes)  # no episode left out of its group
    segmented = 0
    for episode_id, rows in rows_of.items():
        episode = episodes[episode_id]
        if not episode.metadata["swift"]["trained"]:
            continue
        view = episode.training
        assert len(rows) == view.num_segments
        assert len({r["request_id"] for r in rows}) == 1  # one trajectory of its group
        assert len({r["rewards"]["aworld"] for r in rows}) == 1  # one reward per episode
        for row, segment in zip(sorted(rows, key=lambda r: r["rollout_infos"]["aworld"].get("segment") or 0),
                                view.segments(), strict=True):
            assert row["input_ids"] == [*segment.prompt_ids, *segment.response_ids]
            assert row["labels"] == [-100] * len(segment.prompt_ids) + [
                i if m else -100 for i, m in zip(segment.response_ids, segment.response_mask, strict=True)]
        sampled = [i for s in view.segments() for i, m in zip(s.response_ids, s.response_mask, strict=True) if m]
        assert sampled == [i for step in episode.steps for i in step.exp_data.llm_call.token_data.response_ids]
        segmented += view.num_segments > 1
    assert segmented >= 2
    log = read_jsonl(tmp_path / "run" / "swift" / "logging.jsonl")
    assert any(float(entry.get("grad_norm", 0)) > 0 for entry in log)  # the policy really moved


def main_run(argv: list[str], out: io.StringIO) -> int:
    from aworld_core.run import main

    return main(argv, out=out)


def test_dry_run_refuses_a_compacting_agent_without_a_token_mean_loss(tmp_path, capsys):
    from test_plan import _dry_run, _job_file

    path = _job_file(tmp_path)
    job = yaml.safe_load(path.read_text())
    job["agent"]["compaction"] = COMPACTION
    path.write_text(yaml.safe_dump(job))
    code, text = _dry_run(path)
    text += capsys.readouterr().err
    assert code == 2 and "backends.swift.loss_type" in text and "dapo" in text
    for key in ("dynamic_sample", "padding_free"):  # refused by the trainer at a segmented batch: here first
        job["backends"]["swift"] = {"loss_type": "dapo", key: True}
        path.write_text(yaml.safe_dump(job))
        code, text = _dry_run(path)
        text += capsys.readouterr().err
        assert code == 2 and f"backends.swift.{key}" in text, text
    job["backends"]["swift"] = {"loss_type": "dapo"}
    path.write_text(yaml.safe_dump(job))
    assert _dry_run(path)[0] == 0


SMOLAGENTS = "segment_agents:smolagents_agent"


def _smolagents_job(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "swift-smolagents",
        "output_dir": str(tmp_path / "run"),
        "agent": {"openai_agent": SMOLAGENTS},
        "reward": {"name": f"{HERE / 'swift_rewards.py'}:sampled_parity", "trajectory_aware": True},
        "rollout": {"episode_timeout_s": 120},
        **extra,
    }


def _smolagents_rows(tmp_path: Path, pairs: list[tuple[int, int]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The rows aworld-swift's launch writes for the smolagents agent: its tools listed by the probe
    (one real smolagents run against a loopback endpoint that records its first request)."""
    import asyncio

    from swift_testkit import write_add_dataset

    from aworld_core.config import DatasetSection
    from aworld_core.datasets import load_dataset_section
    from aworld_core.worker import OpenAIAgent
    from aworld_swift.rows import list_openai_agent_tools, swift_row

    samples = load_dataset_section(DatasetSection(path=str(write_add_dataset(tmp_path / "data.jsonl", pairs))))
    tools, choice = asyncio.run(list_openai_agent_tools(OpenAIAgent.load(SMOLAGENTS, str(HERE)), samples[0],
                                                        timeout=60))
    assert choice == "required"  # smolagents forces its tool call
    return [swift_row(sample, tools) for sample in samples], tools


def test_a_smolagents_episode_trains_every_segment_exactly(tmp_path, swift_parts, cleanup):  # noqa: F811
    """Real smolagents (``ToolCallingAgent`` over ``OpenAIServerModel``, unmodified) as the job's
    ``agent.openai_agent``, through the core's gateway and ms-swift's own colocate driver. Its first call
    asks ``tool_choice: "required"``: ms-swift samples it after the forced call opening (held by the
    prompt's id-backed assistant message, never trained); it sends its tool call back as assistant text
    and the result as a user "Observation:" message, and its final-answer call sends no tools, so each
    episode is two segments. Each becomes one row of ms-swift's batch, which labels exactly the ids
    ms-swift's engine sampled for it (their logprobs the engine's), each under the very prompt it was
    sampled from, and nothing else."""
    pytest.importorskip("smolagents")
    from aworld_swift.segments import segment_outputs

    job = load_job_config(data=_smolagents_job(tmp_path))
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    set_runtime(SwiftRuntime(job, tmp_path / "run" / "job.json"))
    rows, tools = _smolagents_rows(tmp_path, [(2, 3)])
    assert sorted(t["function"]["name"] for t in tools) == ["add", "calc", "final_answer"]
    engine_logprobs: list[list[float]] = []
    samples, outputs, generated = _recorded_rollout(swift_parts, rows, generations=2, logprobs=engine_logprobs)
    decode = swift_parts["processor"].decode
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    trained_episodes = 0
    for sample, output in zip(samples, outputs, strict=True):
        info = output.rollout_infos[INFO_KEY]
        episode = episodes[info["episode_id"]]
        assert info["trained"], info
        view = episode.training
        assert [s.start for s in view.segments()] == ["first", "rewrite"]
        first, second = view.segments()
        # the first turn was sampled after the forced call opening (the end of its prompt, not trained)
        assert decode(first.prompt_ids).replace(" ", "").endswith('<tool_call>\n{"name":"')
        # smolagents' final-answer call: its memory re-serialized as plain messages (a new render)
        assert decode(second.prompt_ids).rstrip().endswith("Now answer: What is 2 + 3?<|im_end|>\n<|im_start|>assistant")
        assert "[{'type'" not in decode(first.prompt_ids) + decode(second.prompt_ids)  # text parts read as text
        expanded = segment_outputs(output, sample.request_id)
        assert len(expanded) == 2 and {o.response.id for o in expanded} == {sample.request_id}
        trained_sampled: list[int] = []
        for row_output, segment in zip(expanded, view.segments(), strict=True):
            row = deepcopy(sample)
            row.apply_rollout_output(rollout_output=row_output)
            input_ids, labels = _trained(swift_parts, row)
            assert input_ids == [*segment.prompt_ids, *segment.response_ids]
            assert labels == [-100] * len(segment.prompt_ids) + [
                i if m else -100 for i, m in zip(segment.response_ids, segment.response_mask, strict=True)]
            # each generation of the segment was sampled from exactly the sequence it is trained in
            position, turns, engine_lps = len(segment.prompt_ids), 0, []
            for (prompt, sampled), lps in zip(generated, engine_logprobs, strict=True):
                if prompt == input_ids[:position] and sampled and input_ids[position:position + len(sampled)] == sampled:
                    position += len(sampled)
                    turns += 1
                    engine_lps += lps
                    while position < len(input_ids) and labels[position] == -100:
                        position += 1
            assert position == len(input_ids) and turns == segment.num_turns == 1
            # the logprobs ms-swift trains with are the engine's own, one per label (the tolerance: the group's
            # two members may sample the same ids from the same prompt, matched here to either generation of
            # the padded batch)
            assert [lp for turn in row.rollout_logprobs for lp in turn] == pytest.approx(engine_lps, abs=1e-5)
            assert [lp for lp, m in zip(segment.response_logprobs, segment.response_mask, strict=True) if m] == \
                [lp for turn in row.rollout_logprobs for lp in turn]
            trained_sampled += [i for i, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]
        trained_episodes += 1
        # nothing but what the engine sampled for this trajectory is trained
        assert len(trained_sampled) == sum(len(s.response_ids) for s in view.segments())
    assert trained_episodes == 2


@pytest.mark.slow
def test_grpo_trains_every_segment_of_a_smolagents_episode(tmp_path, tool_model_dir, monkeypatch):
    """``python -m aworld_core.run`` -> ``swift rlhf`` with ``agent.openai_agent`` (real smolagents): the launch
    lists the agent's tools from its first request, and the batches ms-swift's trainer encodes hold one row
    per segment (two per episode), each labelled exactly on that segment's sampled ids, one reward per
    episode."""
    pytest.importorskip("smolagents")
    record = tmp_path / "batches.jsonl"
    monkeypatch.setenv("AWORLD_SWIFT_TEST_RECORD", str(record))
    path = _job(tmp_path, tool_model_dir, {})
    job = yaml.safe_load(path.read_text())
    job["agent"] = {"openai_agent": f"{HERE / 'segment_agents.py'}:smolagents_agent"}
    job["reward"] = {"name": f"{HERE / 'swift_rewards.py'}:sampled_parity", "trajectory_aware": True}
    job["rollout"] = {"episode_timeout_s": 120}
    path.write_text(yaml.safe_dump(job))
    assert main_run(["--config", str(path)], io.StringIO()) == 0
    row = read_jsonl(tmp_path / "run" / "swift_train.jsonl")[0]
    assert sorted(t["function"]["name"] for t in json.loads(row["tools"])) == ["add", "calc", "final_answer"]
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    assert len(episodes) == 8
    rows_of: dict[str, list[dict[str, Any]]] = {}
    for batch in read_jsonl(record):
        rows_of.setdefault(batch["rollout_infos"]["aworld"]["episode_id"], []).append(batch)
    assert set(rows_of) == set(episodes)
    trained = 0
    for episode_id, rows in rows_of.items():
        episode = episodes[episode_id]
        if not episode.metadata["swift"]["trained"]:
            continue
        view = episode.training
        assert view.num_segments == len(rows) == 2
        assert len({r["request_id"] for r in rows}) == 1 and len({r["rewards"]["aworld"] for r in rows}) == 1
        for row, segment in zip(sorted(rows, key=lambda r: r["rollout_infos"]["aworld"]["segment"]),
                                view.segments(), strict=True):
            assert row["input_ids"] == [*segment.prompt_ids, *segment.response_ids]
            assert row["labels"] == [-100] * len(segment.prompt_ids) + [
                i if m else -100 for i, m in zip(segment.response_ids, segment.response_mask, strict=True)]
        trained += 1
    assert trained >= 4


def test_a_clients_max_tokens_is_honoured_and_its_sampling_refused(tmp_path, swift_parts, cleanup):  # noqa: F811
    """ms-swift samples every turn with its own limits; a client's ``max_tokens`` cuts each sample where an
    engine honouring it would have stopped (the rest is never seen, never trained), and a temperature
    other than the job's is refused (400 naming it), never ignored."""
    pytest.importorskip("smolagents")
    from aworld_core.schemas import SamplingParams
    from aworld_core.tokens.turn import TurnRefused
    from aworld_swift.trajectory import RequestRecorder

    data = _smolagents_job(tmp_path)
    data["agent"]["openai_agent"] = "segment_agents:short_smolagents_agent"
    job = load_job_config(data=data)
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    set_runtime(SwiftRuntime(job, tmp_path / "run" / "job.json"))
    rows, _ = _smolagents_rows(tmp_path, [(2, 3)])
    samples, outputs, generated = _recorded_rollout(swift_parts, rows, generations=2)
    assert max(len(sampled) for _, sampled in generated) > 5  # ms-swift sampled past the client's limit
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    for sample, output in zip(samples, outputs, strict=True):
        info = output.rollout_infos[INFO_KEY]
        view = episodes[info["episode_id"]].training
        assert view.num_segments == 2
        for segment in view.segments():
            assert sum(segment.response_mask) <= 5
        # what ms-swift trains of the trajectory: at most the kept ids (none when a cut turn is closed by template
        # tokens ms-swift would label: the trajectory is then untrainable, all but one label masked)
        for row_output in segment_outputs(output, sample.request_id):
            assert sum(sum(mask) for mask in row_output.response_loss_mask) <= 5

    recorder = RequestRecorder(None, {"temperature": 1.0, "top_p": None, "top_k": None})
    recorder.check_sampling(SamplingParams(temperature=1.0, max_tokens=5, stop=["Observation:"]))
    for key, value in (("temperature", 0.3), ("top_p", 0.9), ("seed", 7)):
        with pytest.raises(TurnRefused, match=f"'{key}'") as refused:
            recorder.check_sampling(SamplingParams(**{key: value}))
        assert refused.value.param == key


@pytest.mark.parametrize("driver", ["colocate", "server"])
def test_one_call_at_most_keeps_the_first_of_two_sampled_calls(driver, tmp_path, swift_parts, cleanup):  # noqa: F811
    """``parallel_tool_calls: false`` (the core stops the turn on the call's closing token, a stop token id
    ms-swift's engine does not take per request): a sample holding two calls is cut after the first call's
    closing token, as an engine honouring the stop id would have stopped; the episode sees one call and
    ms-swift trains exactly the kept ids, in both drivers. The two-call sample is forced (the tiny model
    rarely writes two): the engine's generation is replaced by a two-call continuation."""
    import asyncio

    rows = _openai_agent_rows(tmp_path, "segment_agents:one_call_agent")
    tok = swift_parts["processor"]
    call = '<tool_call>\n{{"name": "add", "arguments": {{"a": {}, "b": {}}}}}\n</tool_call>'
    first, second = tok.encode(call.format(2, 3), add_special_tokens=False), tok.encode(
        "\n" + call.format(4, 5) + "<|im_end|>", add_special_tokens=False)
    engine = swift_parts["engine"]

    def two_calls(response: Any) -> Any:
        response.choices[0].token_ids = [*first, *second]
        response.choices[0].logprobs = None
        return response

    class TwoCalls:
        """ms-swift's engine, its every sample replaced by two calls (what a model ignoring the limit writes)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def infer(self, batch: list[Any], cfg: Any, **kwargs: Any) -> list[Any]:
            return [two_calls(response) for response in engine.infer(batch, cfg, **kwargs)]

        async def infer_async(self, request: Any, cfg: Any, **kwargs: Any) -> Any:
            return two_calls(await engine.infer_async(request, cfg, **kwargs))

    if driver == "colocate":
        out_samples, outputs, _ = _recorded_rollout({**swift_parts, "engine": TwoCalls()}, rows, generations=1)
    else:
        from swift.infer_engine import RequestConfig
        from swift.rl_core.data import GRPOSample

        from aworld_swift.scheduler import AworldScheduler

        scheduler = AworldScheduler(infer_engine=TwoCalls(), max_turns=3)
        sample = GRPOSample.from_row(rows[0])
        sample.request_id = sample.prompt_id = "server-0"
        config = RequestConfig(n=1, max_tokens=48, temperature=1.0, return_details=True)
        out_samples, outputs = [sample], [asyncio.run(scheduler.run(sample.to_infer_request(include_extra=True),
                                                                    config))]
        assert not scheduler.trajectories
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    info = outputs[0].rollout_infos[INFO_KEY]
    episode = episodes[info["episode_id"]]
    assert episode.status.value == "success" and info["trained"], info
    assert episode.final_answer == "add"  # the client got one call back
    view = episode.training
    assert view.num_turns == 1 and view.response_ids == first and view.response_mask == [1] * len(first)
    assert outputs[0].response_token_ids == [first] and outputs[0].response_loss_mask == [[1] * len(first)]
    input_ids, labels = _trained(swift_parts, _applied(out_samples[0], outputs[0]))
    assert labels[len(input_ids) - len(first):] == first and all(x == -100 for x in labels[:-len(first)])


def test_one_call_at_most_trains_a_call_the_turn_ended_after(tmp_path, swift_parts, cleanup):  # noqa: F811
    """Under ``parallel_tool_calls: false`` a turn of one call the model ended itself (the closer, then the
    end-of-turn id) is kept whole: the end id is sampled, so the continued trajectory trains (cut after the
    closer, the token client would append that id as an environment id, which ms-swift's template labels)."""

    rows = _openai_agent_rows(tmp_path, "segment_agents:two_turn_agent")
    tok = swift_parts["processor"]
    one = tok.encode('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>',
                     add_special_tokens=False)
    answer = tok.encode("5<|im_end|>", add_special_tokens=False)
    engine, turns = swift_parts["engine"], []

    class OneCall:
        """ms-swift's engine sampling one call, then the answer."""

        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def infer(self, batch: list[Any], cfg: Any, **kwargs: Any) -> list[Any]:
            responses = engine.infer(batch, cfg, **kwargs)
            for response in responses:
                response.choices[0].token_ids = list(answer if turns else one)
                response.choices[0].logprobs = None
                turns.append(1)
            return responses

    out_samples, outputs, _ = _recorded_rollout({**swift_parts, "engine": OneCall()}, rows, generations=1)
    episode = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}[
        outputs[0].rollout_infos[INFO_KEY]["episode_id"]]
    info = outputs[0].rollout_infos[INFO_KEY]
    assert episode.final_answer == "add|0" and info["trained"], info
    view = episode.training
    assert view.num_turns == 2 and view.response_ids[: len(one)] == one and view.response_ids[-len(answer):] == answer
    assert [m for m, i in zip(view.response_mask, view.response_ids, strict=True) if m] == [1] * (len(one) + len(answer))
    input_ids, labels = _trained(swift_parts, _applied(out_samples[0], outputs[0]))
    assert input_ids == [*view.prompt_ids, *view.response_ids]
    assert labels == [-100] * len(view.prompt_ids) + [
        i if m else -100 for i, m in zip(view.response_ids, view.response_mask, strict=True)]


def _applied(sample: Any, output: Any) -> Any:
    sample.apply_rollout_output(rollout_output=output)
    return sample


def test_a_new_segment_past_the_length_limit_ends_the_episode_after_the_last_sampled_segment(
        tmp_path, swift_parts, cleanup):  # noqa: F811
    """smolagents' rewritten second segment is rendered from a prompt longer than ms-swift's length limit
    (which leaves room for the first segment's turn): the episode ends as a length stop when that segment
    opens, and what trains is the first segment alone, exactly its sampled ids. No row for the segment that
    was never sampled (an empty response under a prompt ms-swift never rendered)."""
    pytest.importorskip("smolagents")
    from test_scheduler import _limited

    from aworld_swift.segments import segment_outputs

    (tmp_path / "free" / "run").mkdir(parents=True)
    free = SwiftRuntime(load_job_config(data=_smolagents_job(tmp_path / "free")), tmp_path / "free" / "run" / "job.json")
    set_runtime(free)
    rows, _ = _smolagents_rows(tmp_path, [(2, 3)])
    _, free_outputs, _ = _recorded_rollout(swift_parts, rows, generations=1)
    free.close()
    free_view = {e.id: e for e in read_episodes(tmp_path / "free" / "run" / "trajectories.jsonl")}[
        free_outputs[0].rollout_infos[INFO_KEY]["episode_id"]].training
    first, second = free_view.segments()
    # the first prompt as ms-swift renders it (ending with the forced call opening) and room for 8 sampled
    # ids (the engine's max_model_len caps the turn), less than the rewritten segment's prompt adds to it
    # (the memory's call, its observation and smolagents' final-answer messages)
    limit = len(first.prompt_ids) + 8
    assert len(second.prompt_ids) > limit
    job = load_job_config(data=_smolagents_job(tmp_path))
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    set_runtime(SwiftRuntime(job, tmp_path / "run" / "job.json"))
    parts = _limited(swift_parts, limit)
    samples, outputs, generated = _recorded_rollout(parts, rows, generations=2)
    assert len(generated) == 2  # ms-swift sampled the first segment only
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    for sample, output in zip(samples, outputs, strict=True):
        info = output.rollout_infos[INFO_KEY]
        episode = episodes[info["episode_id"]]
        assert "no position is left" in episode.metadata["swift_length"], info
        view = episode.training
        assert view.num_segments == 1 and view.truncated and view.response_mask[-1] == 1
        assert info["segments"] is None and episode.metadata["swift"]["segments"] == 1
        expanded = segment_outputs(output, sample.request_id)
        assert len(expanded) == 1
        if not info["trained"]:
            continue
        row = deepcopy(sample)
        row.apply_rollout_output(rollout_output=expanded[0])
        input_ids, labels = _trained(swift_parts, row)
        assert input_ids == [*view.prompt_ids, *view.response_ids]
        assert labels == [-100] * len(view.prompt_ids) + [
            i if m else -100 for i, m in zip(view.response_ids, view.response_mask, strict=True)]


def test_a_forced_first_turn_is_refused_by_the_server_mode_driver(tmp_path, swift_parts, cleanup):  # noqa: F811
    """ms-swift's server-mode driver (``MultiTurnScheduler.run``) drops the first prompt's trailing
    assistant message, so an episode whose first turn is forced (tool_choice) is refused there, at its
    first generation: a clear error, nothing sampled unconstrained."""
    pytest.importorskip("smolagents")
    from swift.infer_engine import RequestConfig
    from swift.rl_core.data import GRPOSample

    from aworld_swift.scheduler import AworldScheduler

    job = load_job_config(data=_smolagents_job(tmp_path))
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    set_runtime(SwiftRuntime(job, tmp_path / "run" / "job.json"))
    rows, _ = _smolagents_rows(tmp_path, [(2, 3)])
    scheduler = AworldScheduler(infer_engine=swift_parts["engine"], max_turns=5, tokenizer=swift_parts["processor"],
                                template=swift_parts["template"])
    request = GRPOSample.from_row(rows[0]).to_infer_request(include_extra=True)
    config = RequestConfig(n=1, max_tokens=48, temperature=1.0, return_details=True)
    import asyncio

    with pytest.raises(UsageError, match="tool_choice.*colocate mode"):
        asyncio.run(scheduler.run(request, config))
    # canary: the reason for the refusal; when ms-swift stops dropping the first prompt's assistant message,
    # this fails and the refusal can go
    import inspect

    from swift.rollout.multi_turn import MultiTurnScheduler

    source = inspect.getsource(MultiTurnScheduler.run)
    assert "if current_turn == 1:" in source and "remove_response(messages)" in source


def test_launch_refuses_an_openai_api_agent_that_forces_its_first_turn_in_server_mode(tmp_path):
    """The launch's probe sees smolagents' tool_choice 'required' on its first call: in server mode the
    run is refused before ms-swift starts."""
    pytest.importorskip("smolagents")
    from swift_testkit import write_add_dataset

    from aworld_swift.launch import write_datasets

    write_add_dataset(tmp_path / "data.jsonl", [(2, 3)])
    data = _smolagents_job(tmp_path, train_dataset={"path": str(tmp_path / "data.jsonl")},
                           backends={"swift": {"vllm_mode": "server"}})
    job = load_job_config(data=data)
    with pytest.raises(UsageError, match="tool_choice 'required'.*colocate mode"):
        write_datasets(job, tmp_path / "out")
    data["backends"] = {"swift": {}}
    written = write_datasets(load_job_config(data=data), tmp_path / "out")
    row = json.loads(Path(written["swift_train.jsonl"]).read_text().splitlines()[0])
    assert sorted(t["function"]["name"] for t in json.loads(row["tools"])) == ["add", "calc", "final_answer"]


def test_dry_run_accepts_an_openai_api_agent(tmp_path, capsys):
    """``agent.openai_agent`` trains on the swift backend: its --dry-run plan is accepted."""
    from test_plan import _dry_run, _job_file

    path = _job_file(tmp_path)
    job = yaml.safe_load(path.read_text())
    job["agent"] = {"openai_agent": "aworld_core.testing.smolagents_client:smolagents_agent"}
    job["rollout"] = {}  # max_turns cannot limit such an agent (refused by the job schema)
    path.write_text(yaml.safe_dump(job))
    code, text = _dry_run(path)
    assert code == 0, text + capsys.readouterr().err


def _openai_agent_rows(tmp_path: Any, agent: str) -> list[Any]:
    """The smolagents job with ``agent`` as its OpenAI-API agent, its runtime set, and ms-swift's rows
    for one problem (2 + 3) with the agent's tools."""
    import asyncio

    from swift_testkit import write_add_dataset

    from aworld_core.config import DatasetSection
    from aworld_core.datasets import load_dataset_section
    from aworld_core.worker import OpenAIAgent
    from aworld_swift.rows import list_openai_agent_tools, swift_row

    data = _smolagents_job(tmp_path)
    data["agent"]["openai_agent"] = agent
    job = load_job_config(data=data)
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    set_runtime(SwiftRuntime(job, tmp_path / "run" / "job.json"))
    samples = load_dataset_section(DatasetSection(path=str(write_add_dataset(tmp_path / "data.jsonl", [(2, 3)]))))
    tools, _ = asyncio.run(list_openai_agent_tools(OpenAIAgent.load(agent, str(HERE)), samples[0], timeout=60))
    return [swift_row(sample, tools) for sample in samples]
