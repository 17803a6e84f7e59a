"""Trajectory processing: reading every source, filters with reasons, best-of-n, dedupe, the
split by task, the conversions (token-exact from real TokenLLM episodes; messages, verl, swift),
the CLI and the HF ``datasets`` round trip of the export."""

from __future__ import annotations

import json

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.errors import UsageError
from aworld_core.export import read_episodes, write_episodes, write_jsonl
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import (
    AworldTask,
    Episode,
    EpisodeStatus,
    ExpData,
    ExpMeta,
    TaskResult,
    TaskStatus,
    ToolCall,
    TrainingView,
    TrajectoryStep,
)
from aworld_core.testing import assistant_turn_text, get_tiny_model_dir, load_template, load_tiny_tokenizer
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM
from aworld_core.trajectories import (
    FilterSpec,
    TokenizerMismatchError,
    filter_episodes,
    messages_rows,
    read_trajectories,
    split_by_task,
    token_rows,
)
from aworld_core.trajectories.cli import main as cli
from aworld_swift.sft_rows import sft_rows as swift_rows  # the backends' own formats (Backend.formats)
from aworld_verl.sft_rows import sft_rows as verl_rows

CALL_MSG = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}]}
MESSAGES = [
    {"role": "user", "content": "What is 2 + 3?"},
    CALL_MSG,
    {"role": "tool", "tool_call_id": "c0", "name": "calc", "content": "5"},
    {"role": "assistant", "content": "<answer>5</answer>"},
]


def episode(task: str, *, status: str = "success", reward: float | None = 1.0, tool: bool = True,
            stop: str | None = None, tokens: int | None = 10, answer: str = "5", sample_id: str | None = None,
            ep_id: str | None = None, extra_views: int = 0) -> Episode:
    """A hand-made episode: 2 steps with a tool call (or 1 without), optional token view."""
    steps = []
    if tool:
        steps.append(TrajectoryStep(exp_meta=ExpMeta(task_id=task, agent_id="a", step=0),
                                    exp_data=ExpData(actions=[ToolCall(id="c0", name="calc", arguments='{"expr":"2+3"}')])))
    steps.append(TrajectoryStep(exp_meta=ExpMeta(task_id=task, agent_id="a", step=len(steps))))
    messages = [dict(m) for m in (MESSAGES if tool else [MESSAGES[0], MESSAGES[3]])]
    messages[-1]["content"] = f"<answer>{answer}</answer>"
    view = None
    if tokens is not None:
        view = TrainingView(prompt_ids=[1] * 4, response_ids=[2] * (tokens - 4), response_mask=[1] * (tokens - 4),
                            response_logprobs=[0.0] * (tokens - 4), response_versions=[0] * (tokens - 4),
                            num_turns=len(steps), truncated=stop == "length")
    metadata: dict = {}
    if stop:
        metadata["stop"] = stop
    if sample_id:
        metadata["sample_id"] = sample_id
    if extra_views:
        metadata["extra_training"] = [view.model_dump()] * extra_views if view else []
    kwargs = {"id": ep_id} if ep_id else {}
    return Episode(task_id=task, agent_id="a", status=EpisodeStatus(status), reward=reward if status == "success" else None,
                   steps=steps, messages=messages, training=view, metadata=metadata, final_answer=answer, **kwargs)


def test_filters_count_each_dropped_episode_under_its_first_reason():
    episodes = [
        episode("t1"),                                     # kept
        episode("t2", status="failed"),                    # status
        episode("t3", reward=0.0),                         # reward
        episode("t4", stop="length"),                      # truncated
        episode("t5", tool=False),                         # no tool call
        episode("t6", tokens=400),                         # too long
        episode("t7", tokens=None),                        # no token data (length limit set)
        episode("t8", stop="max_steps", reward=0.0),       # reward comes first
    ]
    kept, report = filter_episodes(episodes, FilterSpec(min_reward=1.0, tool_use=True, max_tokens=100))
    assert [e.task_id for e in kept] == ["t1"]
    reasons = {reason: tally.episodes for reason, tally in report.dropped.items()}
    assert reasons == {
        "status failed (kept: success)": 1,
        "reward below 1": 2,
        "truncated (length limit or max_steps)": 1,
        "no tool call": 1,
        "more than 100 tokens": 1,
        "no token data (a token length limit is set)": 1,
    }
    assert report.total.episodes == 8 and report.kept.episodes == 1 and report.kept.tokens == 10
    assert report.dropped["more than 100 tokens"].tokens == 400
    assert report.sampled_tokens == 6 and report.tasks_total == 8 and report.tasks_kept == 1
    text = "\n".join(report.lines())
    assert "kept 1 episodes of 1 tasks, 10 tokens" in text and "no tool call" in text
    # the defaults: only success, truncated dropped, nothing else checked
    kept, _ = filter_episodes(episodes)
    assert {e.task_id for e in kept} == {"t1", "t3", "t5", "t6", "t7"}
    kept, _ = filter_episodes(episodes, FilterSpec(drop_truncated=False, statuses=["success", "failed"]))
    assert len(kept) == 8


def test_dedupe_and_best_of_n_per_task():
    same = [episode("t1", ep_id=f"e{i}") for i in range(3)]                        # identical trajectories
    tries = [episode("t2", reward=r, answer=str(i), ep_id=f"f{i}") for i, r in enumerate([0.0, 1.0, 0.5])]
    kept, report = filter_episodes(same + tries, FilterSpec(best_of_n=1))
    assert [e.id for e in kept] == ["e0", "f1"]
    assert report.dropped["duplicate of a kept trajectory of the same task"].episodes == 2
    assert report.dropped["not among the best 1 of its task"].episodes == 2
    kept, _ = filter_episodes(same + tries, FilterSpec(best_of_n=2, dedupe=False))
    assert [e.id for e in kept] == ["e0", "e1", "f1", "f2"]
    # one dataset row run as several tasks groups by its sample_id
    grouped = [episode(f"task-{i}", sample_id="row-7", reward=float(i), answer=str(i)) for i in range(3)]
    kept, _ = filter_episodes(grouped, FilterSpec(best_of_n=1))
    assert [e.task_id for e in kept] == ["task-2"]


def test_multi_agent_views_count_and_convert():
    swarm = episode("t1", extra_views=2)
    kept, report = filter_episodes([swarm])
    assert report.kept.tokens == 30 and report.sampled_tokens == 18
    assert len(token_rows(kept)) == 3 and len(token_rows(kept, extra_views=False)) == 1


def test_split_keeps_a_task_on_one_side_and_is_stable():
    episodes = [episode(f"t{i % 40}", ep_id=f"e{i}", answer=str(i)) for i in range(200)]
    train, val = split_by_task(episodes, 0.25, seed=3)
    assert not {e.task_id for e in train} & {e.task_id for e in val}
    assert 0.1 < len({e.task_id for e in val}) / 40 < 0.4
    assert split_by_task(episodes, 0.25, seed=3) == (train, val)


def test_read_task_results_exports_and_eval_outputs(tmp_path):
    results = tmp_path / "results.jsonl"
    with results.open("w") as handle:
        for i, status in enumerate(["success", "failed"]):
            task = AworldTask(task_id=f"task-{i}", agent_id="a", agent_input="q", metadata={"sample_id": f"row-{i}"})
            result = TaskResult(task_id=task.task_id, agent_id="a", status=TaskStatus(status), created_at=0.0,
                                task=task, episode=episode(task.task_id, status=status))
            handle.write(result.model_dump_json() + "\n")
        missing = TaskResult(task_id="task-x", agent_id="a", status=TaskStatus.FAILED, created_at=0.0,
                             error="agent not found")
        handle.write(missing.model_dump_json() + "\n")
    write_jsonl([episode("e1")], tmp_path / "eval.jsonl")
    write_episodes([episode("p1")], tmp_path / "episodes.parquet")
    collection = read_trajectories([results, tmp_path / "eval.jsonl", tmp_path / "episodes.parquet"])
    assert [e.task_id for e in collection.episodes] == ["task-0", "task-1", "e1", "p1"]
    assert collection.episodes[0].metadata["sample_id"] == "row-0"
    assert collection.without_episode == ["task-x (failed: agent not found)"]
    assert read_trajectories(tmp_path).sources  # a directory: its jsonl and parquet files
    # read_episodes says what a task-result file is and how to read it
    with pytest.raises(UsageError, match="task service result.*read_trajectories"):
        read_episodes(results)
    bad = tmp_path / "dataset.jsonl"
    bad.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(UsageError, match="neither an episode"):
        read_trajectories(bad)
    with pytest.raises(UsageError, match="not found"):
        read_trajectories(tmp_path / "nope.jsonl")


def test_exported_parquet_loads_with_hf_datasets_and_reads_back_losslessly(tmp_path):
    datasets = pytest.importorskip("datasets")
    episodes = [episode("t1"), episode("t2", status="failed"), episode("t3", tokens=None)]
    episodes[0].rewards = {"exact": 1.0, "format": 0.1}
    episodes[1].reward_errors = {"exact": "ValueError: no answer"}
    path = tmp_path / "episodes.parquet"
    write_episodes(episodes, path)
    assert read_episodes(path) == episodes
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert loaded[0]["rewards"] == [{"name": "exact", "value": 1.0}, {"name": "format", "value": 0.1}]
    assert loaded[1]["reward_errors"] == [{"name": "exact", "error": "ValueError: no answer"}]
    assert loaded[0]["training"]["response_mask"] == [1] * 6 and loaded[2]["training"] is None
    # what datasets writes back is still an episode file
    again = tmp_path / "again.parquet"
    loaded.to_parquet(str(again))
    import pyarrow.parquet as pq

    table = pq.read_table(str(again))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **pq.read_schema(str(path)).metadata})
    pq.write_table(table, str(again))
    assert read_episodes(again) == episodes


# -- conversions -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer(get_tiny_model_dir())


def calc(expr: str) -> str:
    """Evaluate a sum like '2+3'."""
    return str(sum(int(x) for x in expr.split("+")))


async def _token_episode(tok, answer: str = "The answer is 5.") -> tuple[Episode, list[list[int]]]:
    template = load_template("qwen2_5")
    call = {"role": "assistant", "content": "Let me compute.",
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2+3"}}}]}
    turns = [tok.encode(assistant_turn_text(tok, template, m), add_special_tokens=False)
             for m in (call, {"role": "assistant", "content": answer})]
    llm = TokenLLM(ScriptedTokenEngine(list(turns)), tok, chat_template=template)
    agent = Agent("solver", system_prompt="Use the calc tool.",
                  conf=AgentConfig(llm_base_url="http://127.0.0.1:9/v1", llm_model_name="unused"), tools=[calc])
    return await run_episode(agent, "What is 2 + 3?", llm=llm), turns


async def test_token_rows_mask_exactly_the_sampled_ids_of_each_turn(tok):
    ep, turns = await _token_episode(tok)
    [row] = token_rows([ep], tok)
    assert row["prompt_ids"] == ep.training.prompt_ids and row["completion_ids"] == ep.training.response_ids
    ids, mask = row["completion_ids"], row["completion_mask"]
    trained = [t for t, m in zip(ids, mask, strict=True) if m]
    assert trained == turns[0] + turns[1]
    # the sampled turns sit where they were sampled: turn 1 first, turn 2 last; between them only env
    assert ids[: len(turns[0])] == turns[0] and mask[: len(turns[0])] == [1] * len(turns[0])
    assert ids[-len(turns[1]):] == turns[1] and mask[-len(turns[1]):] == [1] * len(turns[1])
    env = ids[len(turns[0]): len(ids) - len(turns[1])]
    assert env and mask[len(turns[0]): len(ids) - len(turns[1])] == [0] * len(env)
    assert "<tool_response>\n5\n</tool_response>" in tok.decode(env)


async def test_token_rows_refuse_another_tokenizer_and_missing_tokens(tok, tmp_path):
    from aworld_core.testing import build_tiny_tokenizer

    ep, _ = await _token_episode(tok)
    other = build_tiny_tokenizer(vocab_size=400, seed=7)
    with pytest.raises(TokenizerMismatchError, match="sampled with another tokenizer"):
        token_rows([ep], other)
    with pytest.raises(UsageError, match="no token data"):
        token_rows([episode("t1", tokens=None)])


def test_message_formats():
    ep = episode("t1")
    [row] = messages_rows([ep], tools=[{"type": "function", "function": {"name": "calc"}}])
    call = row["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "calc", "arguments": {"expr": "2+3"}} and row["tools"][0]["function"]["name"] == "calc"
    assert row["messages"][2] == {"role": "tool", "content": "5", "tool_call_id": "c0", "name": "calc"}
    [vrow] = verl_rows([ep])
    assert vrow["messages"] == row["messages"] and "tools" not in vrow
    [srow] = swift_rows([ep], tools=[{"type": "function", "function": {"name": "calc"}}])
    roles = [(m["role"], m.get("loss")) for m in srow["messages"]]
    assert roles == [("user", None), ("tool_call", True), ("tool_response", None), ("assistant", True)]
    assert json.loads(srow["messages"][1]["content"]) == {"name": "calc", "arguments": {"expr": "2+3"}}
    assert json.loads(srow["tools"])[0]["function"]["name"] == "calc"
    assert all(m["content"] is not None for m in srow["messages"])


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_filter_and_convert(tmp_path, capsys):
    source = tmp_path / "collected.jsonl"
    write_jsonl([episode(f"t{i}", reward=float(i % 2), answer=str(i)) for i in range(20)]
                + [episode("tf", status="failed")], source)
    out = tmp_path / "data"
    assert cli(["filter", str(source), "-o", str(out), "--min-reward", "1", "--val-fraction", "0.3"]) == 0
    printed = capsys.readouterr().out
    assert "read 21 episodes of 21 tasks" in printed and "kept 10 episodes" in printed
    assert "reward below 1" in printed and "status failed" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["kept"]["episodes"] == 10 == report["train_episodes"] + report["val_episodes"]
    assert cli(["convert", str(out / "train.jsonl"), "-o", str(tmp_path / "t.parquet"), "--format", "verl"]) == 0
    assert cli(["convert", str(out / "train.jsonl"), "-o", str(tmp_path / "s.jsonl"), "--format", "swift"]) == 0
    assert "swift rows" in capsys.readouterr().out
    # found through the backends' registrations: the same rows as their own functions
    import pyarrow.parquet as pq

    kept = read_trajectories(out / "train.jsonl").episodes
    table = pq.read_table(tmp_path / "t.parquet").to_pylist()  # arrow adds the null struct fields
    assert [(r["task_id"], [m["role"] for m in r["messages"]]) for r in table] == [
        (r["task_id"], [m["role"] for m in r["messages"]]) for r in verl_rows(kept)]
    assert [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()] == swift_rows(kept)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    assert cli(["filter", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path)]) == 2
    assert "not found" in capsys.readouterr().err
    good = tmp_path / "e.jsonl"
    write_jsonl([episode("t1")], good)
    assert cli(["filter", str(good), "-o", str(tmp_path), "--val-fraction", "1.5"]) == 2
    assert cli(["convert", str(good), "-o", str(tmp_path / "x.jsonl"), "--format", "tokens"]) == 2
    assert "--tokenizer" in capsys.readouterr().err
    assert cli(["convert", str(good), "-o", str(tmp_path / "x.csv"), "--format", "messages"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli(["convert", str(good), "-o", "x.jsonl", "--format", "alpaca"])
    assert exc.value.code == 2


def test_a_trajectory_file_is_refused_as_a_dataset(tmp_path):
    from aworld_core.datasets import load_samples
    from aworld_core.errors import DatasetError

    write_jsonl([episode("t1")], tmp_path / "episodes.jsonl")
    write_episodes([episode("t1")], tmp_path / "episodes.parquet")
    for path in (tmp_path / "episodes.jsonl", tmp_path / "episodes.parquet"):
        with pytest.raises(DatasetError, match="holds episodes.*include the answers.*sft:"):
            load_samples(path)
