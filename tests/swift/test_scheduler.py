"""The aworld scheduler under ms-swift's own multi-turn drivers, without the trainer around it.

``swift.rollout.run_multi_turn`` (what the GRPO trainer runs in colocate mode) and
``MultiTurnScheduler.run`` (what a ``swift rollout`` server runs) drive the real ``AworldScheduler``
with ms-swift's ``TransformersEngine`` sampling from the tiny tool model; the agent calls the real
MCP server. What ms-swift would train is rebuilt with its own ``encode_sample`` and
``collate_to_grpo_micro_batch``, rewards come from its ``compute_rewards_per_func``, and all of it
is checked against the episodes the core recorded.
"""

from __future__ import annotations

import json
from copy import copy
from pathlib import Path
from typing import Any

import pytest
from swift_testkit import MODEL_TYPE, SYSTEM_PROMPT, TEMPLATE, read_jsonl, write_add_dataset

from aworld_core.config import load_job_config
from aworld_core.datasets import load_dataset_section
from aworld_core.errors import AworldError, UsageError
from aworld_core.export import read_jsonl as read_episodes
from aworld_core.hookspecs import hookimpl
from aworld_swift.rows import swift_row
from aworld_swift.runtime import SwiftRuntime, set_runtime
from aworld_swift.trajectory import INFO_KEY

REWARD = f"{Path(__file__).resolve().parent / 'swift_rewards.py'}:tool_answer"


@pytest.fixture(scope="module")
def swift_parts(tool_model_dir: Path) -> dict[str, Any]:
    import torch
    from swift import get_model_processor, get_template
    from swift.infer_engine import TransformersEngine

    model, processor = get_model_processor(str(tool_model_dir), model_type=MODEL_TYPE, torch_dtype=torch.float32)
    template = get_template(processor, template_type=TEMPLATE)
    engine = TransformersEngine(model, template=copy(template), max_batch_size=0)
    return {"engine": engine, "processor": processor, "template": template}


def _runtime(tmp_path: Path, mcp_config: dict[str, Any], **rollout: Any) -> SwiftRuntime:
    job = load_job_config(data={
        "name": "scheduler-test",
        "output_dir": str(tmp_path / "run"),
        "agent": {"name": "calc", "system_prompt": SYSTEM_PROMPT, "max_steps": 3, "mcp_config": mcp_config},
        "reward": {"name": REWARD, "trajectory_aware": True},
        "rollout": {"episode_timeout_s": 60, **rollout},
    })
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    runtime = SwiftRuntime(job, tmp_path / "run" / "job.json")
    set_runtime(runtime)
    return runtime


class EpisodeObserver:
    """A plugin that records every ``on_episode_end`` call."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def on_episode_end(self, episode: Any) -> None:
        self.seen.append(episode.id)


@pytest.fixture
def observer() -> Any:
    from aworld_core.plugins import get_plugin_manager

    manager, watcher = get_plugin_manager(), EpisodeObserver()
    manager.register(watcher, name="swift-test-observer")
    yield watcher
    manager.pm.unregister(name="swift-test-observer")


@pytest.fixture
def cleanup() -> Any:
    yield
    from aworld_swift.runtime import get_runtime

    try:
        get_runtime().close()
    except UsageError:
        pass
    set_runtime(None)


def _rows(tmp_path: Path, tools: list[dict[str, Any]], pairs: list[tuple[int, int]], **extra: Any) -> list[dict]:
    path = write_add_dataset(tmp_path / "data.jsonl", pairs, **extra)
    from aworld_core.config import DatasetSection

    samples = load_dataset_section(DatasetSection(path=str(path)))
    return [swift_row(sample, tools) for sample in samples]


def _rollout(parts: dict[str, Any], rows: list[dict[str, Any]], max_turns: int = 3, generations: int = 2,
             logprobs: bool = False, tag: str = "", temperature: float = 1.0) -> tuple[Any, list[Any], list[Any]]:
    """What the trainer does for a batch: requests, trajectory start, first turn, then the driver."""
    from swift.infer_engine import RequestConfig
    from swift.infer_engine.protocol import RolloutInferRequest, RolloutOutput
    from swift.rl_core.data import GRPOSample
    from swift.rollout import invoke_async_hook, run_multi_turn

    from aworld_swift.scheduler import AworldScheduler

    engine = parts["engine"]
    scheduler = AworldScheduler(max_turns=max_turns, tokenizer=parts["processor"], template=parts["template"])
    samples = [GRPOSample.from_row(row) for row in rows for _ in range(generations)]
    for index, sample in enumerate(samples):
        sample.request_id = f"{tag}req-{index}"
        sample.prompt_id = f"{tag}prompt-{index // generations}"
    requests = [sample.to_infer_request(include_extra=True) for sample in samples]
    config = RequestConfig(n=1, max_tokens=48, temperature=temperature, return_details=True, logprobs=logprobs)

    def infer(batch: list[RolloutInferRequest], cfg: RequestConfig) -> list[RolloutOutput]:
        return [RolloutOutput(response=r) for r in engine.infer(batch, cfg, use_tqdm=False)] if batch else []

    invoke_async_hook(scheduler.on_trajectory_start(requests))
    for request, sample in zip(requests, samples, strict=True):
        sample.messages = request.messages
    first = infer([sample.to_infer_request(include_extra=True) for sample in samples], config)
    outputs = run_multi_turn(requests, first, scheduler, infer, config, max_turns=max_turns)
    for sample, output in zip(samples, outputs, strict=True):
        sample.apply_rollout_output(rollout_output=output)
    return scheduler, samples, outputs


def _trained(parts: dict[str, Any], sample: Any) -> tuple[list[int], list[int]]:
    """ms-swift's own encoding of a finished sample for the loss: input ids and labels."""
    from swift.rlhf_trainers.utils import encode_sample

    template = copy(parts["template"])
    template.set_mode("train")
    encoded = encode_sample(sample, template)
    return list(encoded["input_ids"]), list(encoded["labels"])


def _rollout_logps(parts: dict[str, Any], samples: list[Any]) -> tuple[Any, Any]:
    """What the trainer builds for rollout importance sampling from a batch: ms-swift's own encoding
    and collation; ``None`` logps when any trajectory's logprobs do not match its labels."""
    import torch
    from swift.rlhf_trainers.utils import collate_to_grpo_micro_batch, encode_sample

    template = copy(parts["template"])
    template.set_mode("train")
    for sample in samples:
        encoded = encode_sample(sample, template)
        encoded.pop("_extra_kwargs", None)
        sample.encoded = encoded
    _, grpo_batch = collate_to_grpo_micro_batch(samples, template, device=torch.device("cpu"), use_logits_to_keep=True)
    return grpo_batch.rollout_per_token_logps, grpo_batch.completion_mask


def _assert_logprobs_match_labels(parts: dict[str, Any], samples: list[Any]) -> None:
    for sample in samples:
        labels = sum(m for segment in sample.response_loss_mask for m in segment)
        assert labels == sum(len(turn) for turn in sample.rollout_logprobs) > 0
    logps, completion = _rollout_logps(parts, samples)
    assert logps is not None  # ms-swift keeps rollout importance sampling for the batch
    for row, sample in enumerate(samples):
        flat = [lp for turn in sample.rollout_logprobs for lp in turn]
        assert logps[row][completion[row]].tolist() == pytest.approx(flat)


def _rewards(samples: list[Any], names: list[str]) -> list[list[float]]:
    """ms-swift's own reward call over a batch: one column per reward function."""
    import torch
    from swift.rewards import orms
    from swift.rl_core.grpo_algorithm import compute_rewards_per_func

    import aworld_swift.swift_plugin  # noqa: F401  (registers the ms-swift names)

    table = compute_rewards_per_func(samples, [orms[name]() for name in names], None, device=torch.device("cpu"))
    return [[float(v) for v in table[:, i]] for i in range(len(names))]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory, swift_parts: dict[str, Any], mcp_config: dict[str, Any],
          add_tools: list[dict[str, Any]]) -> Any:
    """One batch through ms-swift's driver, two generations per task: two tasks, one whose reward
    breaks, and one whose reward breaks for its second member only."""
    tmp_path = tmp_path_factory.mktemp("swift-batch")
    runtime = _runtime(tmp_path, mcp_config)
    rows = _rows(tmp_path, add_tools, [(1, 2), (3, 4)])
    rows += _rows(tmp_path / "broken", add_tools, [(2, 5)], prefix="broken", extra_info={"break_reward": True})
    rows += _rows(tmp_path / "half", add_tools, [(4, 1)], prefix="half", extra_info={"break_odd": True})
    _, samples, outputs = _rollout(swift_parts, rows, logprobs=True)
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    yield {"runtime": runtime, "rows": rows, "samples": samples, "outputs": outputs, "episodes": episodes,
           "path": tmp_path}
    runtime.close()
    set_runtime(None)


def test_ms_swift_trains_exactly_the_episode_tokens(batch, swift_parts):
    tokenizer = swift_parts["processor"]
    assert len(batch["episodes"]) == 8
    multi_turn = 0
    for sample, output in zip(batch["samples"], batch["outputs"], strict=True):
        info = output.rollout_infos[INFO_KEY]
        if info["reward_errors"]:
            continue
        episode = batch["episodes"][info["episode_id"]]
        assert episode.status.value == "success" and info["trained"] and episode.reward is not None
        view = episode.training
        # one continued assistant segment: the token client's sequence, exactly
        assert output.response_token_ids == [view.response_ids]
        assert output.response_loss_mask == [view.response_mask]
        sampled = [i for i, m in zip(view.response_ids, view.response_mask, strict=True) if m]
        calls = [step.exp_data.llm_call for step in episode.steps]
        assert sampled == [i for call in calls for i in call.token_data.response_ids]
        # logprobs travel with the sampled tokens (ms-swift's engine reported them here)
        assert output.rollout_logprobs == [[lp for lp, m in zip(view.response_logprobs, view.response_mask,
                                                                strict=True) if m]]
        # environment tokens (mask 0) hold the tool result the MCP server returned
        env = [i for i, m in zip(view.response_ids, view.response_mask, strict=True) if not m]
        results = [r.content for step in episode.steps for r in step.exp_data.state.action_result]
        if results:
            multi_turn += 1
            assert f"<tool_response>\n{results[0]}\n</tool_response>" in tokenizer.decode(env)
        # what ms-swift trains: its prompt, then exactly these ids, labelled exactly on the sampled ones
        input_ids, labels = _trained(swift_parts, sample)
        assert input_ids == [*view.prompt_ids, *view.response_ids]
        assert labels[: len(view.prompt_ids)] == [-100] * len(view.prompt_ids)
        response_labels = labels[len(view.prompt_ids):]
        assert response_labels == [i if m else -100 for i, m in zip(view.response_ids, view.response_mask,
                                                                    strict=True)]
    assert multi_turn >= 2  # the tool model calls the tool, reads the result, answers


def test_a_failed_reward_trains_nothing_of_its_trajectory(batch, swift_parts):
    broken = [(s, o) for s, o in zip(batch["samples"], batch["outputs"], strict=True)
              if o.rollout_infos[INFO_KEY]["reward_errors"]]
    assert len(broken) == 3  # both members of one task, the second of another
    for sample, output in broken:
        info = output.rollout_infos[INFO_KEY]
        assert info["status"] == "success" and info["reward"] is None and not info["trained"]
        assert "broken on purpose" in json.dumps(info["reward_errors"])
        episode = batch["episodes"][info["episode_id"]]
        assert episode.metadata["swift"]["trained"] is False
        _assert_only_last_label(swift_parts, sample, output)
        # the one labelled token keeps its logprob, so the batch's rollout logprobs stay aligned
        assert output.rollout_logprobs == [[episode.training.response_logprobs[-1]]]


def test_every_trajectory_keeps_one_logprob_per_label(batch, swift_parts):
    _assert_logprobs_match_labels(swift_parts, batch["samples"])


def _assert_only_last_label(parts: dict[str, Any], sample: Any, output: Any) -> None:
    """Untrained: every loss mask zeroed but the last token's (ms-swift's GRPO needs one label per
    sample; the reward functions give such a trajectory advantage 0)."""
    mask = [m for segment in output.response_loss_mask for m in segment]
    assert sum(mask) == 1 and mask[-1] == 1
    input_ids, labels = _trained(parts, sample)
    assert [i for i, label in enumerate(labels) if label != -100] == [len(labels) - 1]
    assert labels[-1] == input_ids[-1]


def test_an_unreachable_tool_server_fails_the_episode_and_batches_that_only_fail_stop_training(
        tmp_path, swift_parts, add_tools, observer, cleanup):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = {"mcpServers": {"calc": {"type": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp", "timeout": 2}}}
    _runtime(tmp_path, dead, max_failed_steps=2)
    rows = _rows(tmp_path, add_tools, [(1, 1)])
    _, samples, outputs = _rollout(swift_parts, rows, generations=1, logprobs=True)
    info = outputs[0].rollout_infos[INFO_KEY]
    assert info["status"] == "failed" and "MCPConnectionError" in info["error"] and not info["trained"]
    assert outputs[0].rollout_infos["num_turns"] == 1
    _assert_only_last_label(swift_parts, samples[0], outputs[0])
    _assert_logprobs_match_labels(swift_parts, samples)
    episode = read_episodes(tmp_path / "run" / "trajectories.jsonl")[0]
    assert episode.status.value == "failed" and episode.training is None and episode.reward is None
    assert observer.seen == [episode.id]  # on_episode_end once, for a failed episode too
    # the first batch in which nothing could train is counted, the second stops training with its cause
    assert _rewards(samples, ["aworld"]) == [[0.0]]
    _, again, _ = _rollout(swift_parts, rows, generations=1, tag="next-")
    with pytest.raises(AworldError, match=r"2 consecutive training steps.*MCPConnectionError.*rollout.max_failed_steps"):
        _rewards(again, ["aworld"])


def test_a_timed_out_episode_trains_nothing(tmp_path, swift_parts, mcp_config, add_tools, cleanup):
    _runtime(tmp_path, mcp_config, episode_timeout_s=0.01)
    rows = _rows(tmp_path, add_tools, [(4, 4)])
    _, samples, outputs = _rollout(swift_parts, rows, generations=1)
    info = outputs[0].rollout_infos[INFO_KEY]
    assert info["status"] == "timeout" and not info["trained"]
    _assert_only_last_label(swift_parts, samples[0], outputs[0])


def _by_task(batch: dict[str, Any]) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for index, output in enumerate(batch["outputs"]):
        rows.setdefault(output.rollout_infos[INFO_KEY]["task_id"], []).append(index)
    return rows


def test_reward_functions_give_the_core_rewards_under_keep_group_neutral(batch):
    from aworld_core.rewards.builtin import gsm8k_reward

    set_runtime(batch["runtime"])
    job, gsm8k = _rewards(batch["samples"], ["aworld", "aworld_gsm8k"])
    infos = [o.rollout_infos[INFO_KEY] for o in batch["outputs"]]
    episodes = [batch["episodes"][i["episode_id"]] for i in infos]
    truths = [json.loads(s.extra["aworld_sample"])["ground_truth"] for s in batch["samples"]]
    own = [gsm8k_reward("x", e.final_answer or "", t) for e, t in zip(episodes, truths, strict=True)]
    groups = _by_task(batch)
    for task in ("add-0", "add-1"):  # every member trained: the core's rewards, as computed on the episodes
        assert [job[i] for i in groups[task]] == [episodes[i].reward for i in groups[task]]
        assert [gsm8k[i] for i in groups[task]] == [own[i] for i in groups[task]]
    # every member's reward failed: the group is dropped, nobody has an advantage
    assert [job[i] for i in groups["broken-0"]] == [0.0, 0.0] == [gsm8k[i] for i in groups["broken-0"]]
    # the second member's reward failed: it is neutral (the group's mean of those that train), the group keeps its size
    first, second = groups["half-0"]
    assert infos[first]["trained"] and not infos[second]["trained"]
    assert job[first] == job[second] == episodes[first].reward
    assert gsm8k[first] == gsm8k[second] == own[first]
    metrics = batch["runtime"].last_metrics
    assert metrics["aworld/episodes"] == 8.0 and metrics["aworld/failed_rate"] == 0.0
    assert metrics["aworld/untrained/reward_failed"] == 3.0 and metrics["aworld/trained_rate"] == 5 / 8
    assert metrics["aworld/tool_call_rate"] > 0 and metrics["aworld/turns"] >= 1


def test_drop_group_gives_no_member_of_a_group_with_a_failure_an_advantage(batch, tmp_path, mcp_config):
    runtime = _runtime(tmp_path, mcp_config, failed_episodes="drop_group")
    try:
        (job,) = _rewards(batch["samples"], ["aworld"])
        groups = _by_task(batch)
        episodes = [batch["episodes"][o.rollout_infos[INFO_KEY]["episode_id"]] for o in batch["outputs"]]
        assert [job[i] for i in groups["half-0"]] == [0.0, 0.0]
        assert [job[i] for i in groups["broken-0"]] == [0.0, 0.0]
        for task in ("add-0", "add-1"):
            assert [job[i] for i in groups[task]] == [episodes[i].reward for i in groups[task]]
        assert runtime.last_metrics["aworld/untrained/group_dropped"] == 1.0
        assert runtime.last_metrics["aworld/trained_rate"] == 4 / 8
    finally:
        runtime.close()
        set_runtime(batch["runtime"])


def test_rows_from_another_scheduler_are_scored_from_their_completion(batch):
    from swift.rewards import orms

    import aworld_swift.swift_plugin  # noqa: F401  (registers the ms-swift names)

    set_runtime(batch["runtime"])
    plain = orms["aworld_gsm8k"]()(["The answer is 3.", "no idea"], aworld_sample=[batch["rows"][0]["aworld_sample"]] * 2)
    assert plain == [1.0, 0.0]


def test_tools_that_differ_from_the_dataset_row_stop_training(tmp_path, swift_parts, mcp_config, add_tools, cleanup):
    _runtime(tmp_path, mcp_config)
    stale = json.loads(json.dumps(add_tools))
    stale[0]["function"]["description"] = "An old description."
    rows = _rows(tmp_path, stale, [(1, 2)])
    with pytest.raises(UsageError, match="differ from the tools its converted dataset row lists"):
        _rollout(swift_parts, rows, generations=1)


def test_trajectories_file_and_infos_are_plain_json(batch):
    for output in batch["outputs"]:
        json.dumps(output.rollout_infos)  # travels from a rollout server to the trainer in server mode
    lines = read_jsonl(batch["path"] / "run" / "trajectories.jsonl")
    turns = {line["id"]: line["metadata"]["swift"]["turns"] for line in lines}
    for output in batch["outputs"]:
        assert turns[output.rollout_infos[INFO_KEY]["episode_id"]] == output.rollout_infos["num_turns"]


def test_server_mode_run_keeps_rollout_logprobs_with_a_failed_trajectory(tmp_path, swift_parts, mcp_config, add_tools,
                                                                           observer, cleanup):
    """A ``swift rollout`` server calls ``MultiTurnScheduler.run`` per request on its own loop: the same
    hooks, the same exact sequence, and for a trajectory that does not train as many logprobs as labels
    (one), so the trainer keeps rollout importance sampling for the whole batch."""
    import asyncio

    from swift.infer_engine import RequestConfig
    from swift.infer_engine.protocol import RolloutOutput
    from swift.rl_core.data import GRPOSample

    from aworld_swift.scheduler import AworldScheduler

    _runtime(tmp_path, mcp_config)
    scheduler = AworldScheduler(infer_engine=swift_parts["engine"], max_turns=3)
    rows = _rows(tmp_path, add_tools, [(1, 2), (3, 4)])
    rows += _rows(tmp_path / "broken", add_tools, [(2, 5)], prefix="broken", extra_info={"break_reward": True})
    samples, requests = [], []
    for index, row in enumerate(rows):
        sample = GRPOSample.from_row(row)
        sample.request_id = sample.prompt_id = f"server-{index}"
        samples.append(sample)
        requests.append(sample.to_infer_request(include_extra=True))
    config = RequestConfig(n=1, max_tokens=48, temperature=1.0, return_details=True, logprobs=True)

    async def run_all() -> list[Any]:
        return list(await asyncio.gather(*(scheduler.run(request, config) for request in requests)))

    # as the trainer gets them: JSON from the rollout server
    outputs = [RolloutOutput.model_validate_json(o.model_dump_json()) for o in asyncio.run(run_all())]
    for sample, output in zip(samples, outputs, strict=True):
        sample.apply_rollout_output(rollout_output=output)
    episodes = {e.id: e for e in read_episodes(tmp_path / "run" / "trajectories.jsonl")}
    for sample, output in zip(samples, outputs, strict=True):
        info = output.rollout_infos[INFO_KEY]
        episode = episodes[info["episode_id"]]
        assert output.rollout_infos["num_turns"] == len(episode.steps)
        if info["reward_errors"]:
            assert not info["trained"]
            _assert_only_last_label(swift_parts, sample, output)
            assert output.rollout_logprobs == [[episode.training.response_logprobs[-1]]]
            continue
        view = episode.training
        assert info["trained"] and output.response_token_ids == [view.response_ids]
        assert output.response_loss_mask == [view.response_mask]
        assert output.rollout_logprobs == [[lp for lp, m in zip(view.response_logprobs, view.response_mask,
                                                                strict=True) if m]]
    _assert_logprobs_match_labels(swift_parts, samples)
    assert not scheduler.trajectories  # every trajectory's state was released
    assert sorted(observer.seen) == sorted(episodes)  # on_episode_end once per episode


def test_a_turn_ms_swift_would_close_with_untrained_template_tokens_is_not_trained(batch, swift_parts):
    from swift.rl_core.data import GRPOSample

    from aworld_core.schemas import Sample
    from aworld_swift.scheduler import AworldScheduler
    from aworld_swift.trajectory import Trajectory

    tok = swift_parts["processor"]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    turn = tok.encode("The answer", add_special_tokens=False)  # a turn that ended without <|im_end|>
    env = tok.encode("<|im_end|>\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n"
                     "<|im_start|>assistant\n", add_special_tokens=False)
    last = [*tok.encode("3.", add_special_tokens=False), im_end]
    # ms-swift's own encoding labels the end-of-turn ids that open such a masked span
    sample = GRPOSample(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}],
                        response_token_ids=[[*turn, *env, *last]],
                        response_loss_mask=[[1] * len(turn) + [0] * len(env) + [1] * len(last)])
    input_ids, labels = _trained(swift_parts, sample)
    opened = len(input_ids) - len(last) - len(env)
    assert labels[opened] == im_end  # trained, though never sampled
    # so the scheduler trains nothing of a trajectory whose environment ids start that way
    set_runtime(batch["runtime"])
    scheduler = AworldScheduler(max_turns=3, tokenizer=tok, template=swift_parts["template"])
    probe = Sample(id="eos", prompt=[{"role": "user", "content": "hi"}])
    flagged, fine = Trajectory("eos-1", probe, batch["runtime"]), Trajectory("eos-2", probe, batch["runtime"])
    kept = [1, 1, 0]
    flagged.keep(kept)
    flagged.turn_env = env
    fine.turn_env = env[1:]  # after a sampled <|im_end|> the environment ids start with "\n"
    scheduler._check_environment_ids(flagged)
    scheduler._check_environment_ids(fine)
    assert flagged.untrainable and kept == [0, 0, 0]
    assert fine.untrainable is None


def _limited(parts: dict[str, Any], limit: int) -> dict[str, Any]:
    """ms-swift's pieces with a length limit of ``limit`` tokens: its template's ``max_length`` (past
    which ms-swift's encode raises ``MaxLengthError``) and its engine's ``max_model_len`` (which caps
    each turn's new tokens)."""
    from swift.infer_engine import TransformersEngine

    template = copy(parts["template"])
    template.max_length = limit
    engine_template = copy(template)
    engine = TransformersEngine(parts["engine"].model, template=engine_template, max_batch_size=0)
    engine.max_model_len = limit
    return {**parts, "template": template, "engine": engine}


@pytest.mark.parametrize("driver", ["colocate", "server"])
def test_a_next_prompt_past_the_length_limit_ends_the_episode_as_a_length_stop(
        driver, tmp_path, swift_parts, mcp_config, add_tools, observer, cleanup):
    """The tool result makes the next prompt longer than ms-swift can sample from (the 15-step demo run
    in server mode died on it: its rollout server answered 500, ``MaxLengthError``, and the trainer
    stopped). Such an episode ends as a length stop after the turn it sampled: recorded, scored and
    trained (its view cut after that turn, ``truncated``), and the batch goes on."""
    import asyncio

    from swift.infer_engine import RequestConfig

    from aworld_swift.scheduler import AworldScheduler

    rows = _rows(tmp_path, add_tools, [(1, 2)])
    # greedy: the same first turn with and without the limit
    free_runtime = _runtime(tmp_path / "free", mcp_config)
    _, _, free_outputs = _rollout(swift_parts, rows, generations=1, temperature=0.0)
    free_runtime.close()
    free = {e.id: e for e in read_episodes(tmp_path / "free" / "run" / "trajectories.jsonl")}
    view = free[free_outputs[0].rollout_infos[INFO_KEY]["episode_id"]].training
    first = view.response_mask.index(0)  # the first turn's sampled ids, then the tool result's ids
    assert 0 < first < len(view.response_mask) and view.num_turns >= 2  # the model called the tool
    limit = len(view.prompt_ids) + first + 1  # room for the first turn, not for the tool result after it
    parts = _limited(swift_parts, limit)

    _runtime(tmp_path / "cut", mcp_config)
    if driver == "colocate":
        _, samples, outputs = _rollout(parts, rows, generations=1, temperature=0.0)
    else:
        from swift.rl_core.data import GRPOSample

        scheduler = AworldScheduler(infer_engine=parts["engine"], max_turns=3)
        sample = GRPOSample.from_row(rows[0])
        sample.request_id = sample.prompt_id = "server-0"
        config = RequestConfig(n=1, max_tokens=48, temperature=0.0, return_details=True)
        output = asyncio.run(scheduler.run(sample.to_infer_request(include_extra=True), config))
        sample.apply_rollout_output(rollout_output=output)
        samples, outputs = [sample], [output]
        assert not scheduler.trajectories
    episodes = {e.id: e for e in read_episodes(tmp_path / "cut" / "run" / "trajectories.jsonl")}
    info = outputs[0].rollout_infos[INFO_KEY]
    episode = episodes[info["episode_id"]]
    assert episode.status.value == "success" and info["stop"] == "length" and info["trained"]
    assert "no position is left to sample in" in episode.metadata["swift_length"]
    cut = episode.training
    assert cut.truncated and cut.prompt_ids == view.prompt_ids
    # the first turn as sampled without the limit, nothing after it
    assert cut.response_ids == view.response_ids[:first] and cut.response_mask == [1] * first
    assert outputs[0].response_token_ids == [cut.response_ids]
    assert outputs[0].response_loss_mask == [cut.response_mask]
    input_ids, labels = _trained(parts, samples[0])
    assert input_ids == [*cut.prompt_ids, *cut.response_ids] and len(input_ids) < limit
    assert labels[len(cut.prompt_ids):] == cut.response_ids
    assert episode.id in observer.seen


def test_ms_swifts_jinja_template_backend_is_refused(swift_parts):
    """The jinja backend renders the id-backed assistant message ms-swift continues a trajectory with as
    the text of its id list: refused before a trajectory starts (a server the user started included)."""
    from swift import get_template

    from aworld_swift.scheduler import check_template

    jinja = get_template(swift_parts["processor"], template_type=TEMPLATE, template_backend="jinja")
    ids = swift_parts["processor"].encode("The answer", add_special_tokens=False)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ids}]
    assert str(ids) in swift_parts["processor"].decode(jinja.encode({"messages": messages})["input_ids"])
    with pytest.raises(UsageError, match="as the text of the list"):
        check_template(jinja)
    check_template(swift_parts["template"])
