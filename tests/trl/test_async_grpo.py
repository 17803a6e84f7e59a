"""Asynchronous GRPO (``backends.trl.aworld.async_rollout``) on TRL's real ``GRPOTrainer``.

Scripted engine (rare cases forced exactly, as the rules allow): the calculator episodes run over
the real MCP server, the loss is TRL's on a real tiny model, and the engine answers a tool call
then an answer, with logprob -0.5 per token and the version it holds. A second turn waits (up to
a few seconds) for the engine's version to change, so every batch started ahead of its step spans
a weight update (a partial rollout). Checked: every trained token's version is exactly what the
engine stamped; the staleness bound holds on every token and is reached; the behaviour weight of
every stale token is exactly ``min(exp(logp_prox + 0.5), cap)`` with ``logp_prox`` the trained
weights' own log-probability, and 1 on fresh tokens; ``max_staleness: 0`` trains bit for bit what
the synchronous rollout trains.

HF engine: a real run through ``aworld_trl.trainer.train`` (the rollout engine samples from a
private copy of the trained model): every trained token's logprob equals the teacher-forced
logprob of the weights of its version, including episodes that span an update.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import TokenOutput
from aworld_core.tokens.scripted import ScriptedTokenEngine

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
BEHAV_LOGP = -0.5
QUESTION = re.compile(r"What is (\d+) \* (\d+)\?")


class CalcScriptEngine(ScriptedTokenEngine):
    """Tool call first, then an answer (right for even-numbered group members, wrong for odd ones).

    ``gate_s`` > 0: an answer waits up to that long for the engine's version to change after the
    episode's tool call was sampled, so an episode started ahead of its step spans an update. It
    waits only while ``armed``: while a step trains (``_recording`` disarms it while the trainer
    waits for a batch, when no update can come: the first batch's answers each waited out the
    whole ``gate_s`` before, 10 s of the test's 11)."""

    def __init__(self, tokenizer: Any, gate_s: float = 0.0):
        super().__init__(self._script)
        self.tokenizer = tokenizer
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.gate_s = gate_s
        self.armed = False
        self.first_version: dict[str, int] = {}
        self.stamped: dict[str, list[tuple[list[int], int]]] = {}  # request id -> (ids, version) per call

    def set_version(self, version: int) -> None:
        self.version = version

    def _script(self, prompt_ids: list[int], sampling: SamplingParams, request_id: str) -> TokenOutput:
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        a, b = (int(x) for x in QUESTION.findall(text)[-1])
        if "<|im_start|>tool" not in text:
            reply = '<tool_call>{"name":"calc","arguments":{"expr":"' + f"{a}*{b}" + '"}}</tool_call>'
        else:
            member = int(request_id.rsplit("-", 1)[-1])
            reply = f"<answer>{a * b if member % 2 == 0 else a * b + 1}</answer>"
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.eos]
        return TokenOutput(ids, [BEHAV_LOGP] * len(ids), None, self.version)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, request_id: str) -> TokenOutput:
        if request_id in self.first_version and self.gate_s:
            began = asyncio.get_running_loop().time()
            while self.armed and self.version == self.first_version[request_id] and \
                    asyncio.get_running_loop().time() - began < self.gate_s:
                await asyncio.sleep(0.01)
        out = await super().generate(prompt_ids, sampling, request_id=request_id)
        self.first_version.setdefault(request_id, int(out.version))
        self.stamped.setdefault(request_id, []).append((list(out.token_ids), int(out.version)))
        return out


def _job(tmp_path: Path, model_dir: Path, calculator: Any, write_samples: Any, steps: int,
         async_rollout: dict[str, Any] | None, concurrency: int = 8) -> dict[str, Any]:
    aworld: dict[str, Any] = {"progress": False, "print_every": 0, "eval_before": False, "eval_after": False}
    if async_rollout is not None:
        aworld["async_rollout"] = async_rollout
    return {
        "name": "async-test", "backend": "trl", "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"name": "calc-agent", "max_steps": 3, "mcp_config": calculator.mcp_config()},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 16))},
        "reward": {"name": "exact_answer"},
        "rollout": {"concurrency": concurrency, "episode_timeout_s": 60},
        "backends": {"trl": {
            "max_steps": steps, "per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 1e-2,
            "temperature": 1.0, "max_completion_length": 64, "beta": 0.0, "seed": 0, "aworld": aworld,
        }},
    }


def _recording(cls: type, records: list[dict[str, Any]], engine: CalcScriptEngine | None = None) -> type:
    """``cls`` recording each batch (rows + tensors) and, for the async trainer, the correction."""

    class Recording(cls):  # type: ignore[misc, valid-type]
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            if engine is not None:
                engine.armed = False  # the trainer waits for this batch: no update can come
            out = super()._generate_and_score_completions(inputs)
            if engine is not None:
                engine.armed = True  # training: the episodes started ahead wait for its update
            records.append({"step": int(self.state.global_step), "inputs": [dict(r) for r in inputs],
                            **{k: v.detach().clone() for k, v in out.items() if hasattr(v, "detach")}})
            return out

        def _aworld_correct(self, inputs: dict[str, Any], logps: Any) -> None:
            import torch

            before = inputs["advantages"].detach().clone()
            super()._aworld_correct(inputs, logps)
            # the proximal policy recomputed here, independently: the trained weights, teacher-forced
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            with torch.no_grad():
                logits = self.model(input_ids=ids, attention_mask=attention).logits.float()
            width = inputs["completion_ids"].shape[1]
            table = torch.log_softmax(logits[:, -width - 1:-1] / self.temperature, dim=-1)
            recomputed = table.gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)
            records[-1].setdefault("corrections", []).append({
                "step": int(self.state.global_step), "before": before, "after": inputs["advantages"].detach().clone(),
                "prox": logps.detach().clone(), "recomputed": recomputed, "versions": inputs["aworld_versions"].clone(),
                "mask": (inputs["completion_mask"] * inputs["tool_mask"]).clone(),
                "episodes": None})

    return Recording


def _train_scripted(tmp_path: Path, model_dir: Path, calculator: Any, write_samples: Any, *, steps: int,
                    async_rollout: dict[str, Any] | None, gate_s: float = 0.0, concurrency: int = 8) -> dict[str, Any]:
    """TRL's GRPO on ``model_dir`` with the scripted engine; the batches, final weights, engine."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from aworld_core.datasets import load_dataset_section
    from aworld_core.runtime.loop_thread import LoopThread
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_core.worker import EpisodeRunner, FailedSteps, build_agent, build_token_llm, load_job
    from aworld_trl.async_grpo import AsyncRollout, async_trainer_class
    from aworld_trl.grpo import trainer_class
    from aworld_trl.options import grpo_config
    from aworld_trl.rollout import AworldRollout, make_reward_func, trl_sampling

    tmp_path.mkdir(parents=True, exist_ok=True)
    job = load_job(_job(tmp_path, model_dir, calculator, write_samples, steps, async_rollout, concurrency))
    args, options = grpo_config(job, tmp_path / "run")
    tokenizer = load_tokenizer(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    engine = CalcScriptEngine(tokenizer, gate_s=gate_s)
    llm = build_token_llm(engine, tokenizer, job, max_response_tokens=args.max_completion_length)
    runner = EpisodeRunner.from_job(job, llm, agent=build_agent(job))
    samples = load_dataset_section(job.train_dataset, job.base_dir)
    records: list[dict[str, Any]] = []
    with LoopThread("async-test") as loop:
        common = dict(loop=loop, engine=engine, placeholder_id=tokenizer.eos_token_id, sampling=trl_sampling(args),
                      trajectory_every=0, failed_steps=FailedSteps(3))
        if async_rollout is None:
            rollout: Any = AworldRollout(runner, samples, **common)
            cls = trainer_class()
        else:
            rollout = AsyncRollout(runner, samples, **common, **options.async_rollout.model_dump())
            cls = async_trainer_class()
        trainer = _recording(cls, records, engine)(
            model=model, reward_funcs=[make_reward_func("exact_answer")], args=args,
            train_dataset=Dataset.from_list(rollout.dataset_rows()), processing_class=tokenizer, rollout_func=rollout)
        trainer.train()
        rollout.sync_weights(model, trainer.state.global_step)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"records": records, "weights": weights, "engine": engine, "rollout": rollout, "trainer": trainer}


def _rows(record: dict[str, Any]) -> list[tuple[str, list[int], list[int]]]:
    """(episode id, sampled ids, versions) of each trained row of a batch, in the batch's order."""
    rows = []
    for i, row in enumerate(record["inputs"]):
        n = int(record["completion_mask"][i].sum())
        rows.append((row["aworld_episode_id"], record["completion_ids"][i, :n].tolist(),
                     record["aworld_versions"][i, :n].tolist() if "aworld_versions" in record else row["aworld_versions"]))
    return rows


@pytest.mark.slow
def test_staleness_zero_trains_exactly_what_the_synchronous_run_trains(tmp_path, tool_model_dir, calculator,
                                                                        write_samples):
    sync = _train_scripted(tmp_path / "sync", tool_model_dir, calculator, write_samples, steps=3, async_rollout=None)
    zero = _train_scripted(tmp_path / "zero", tool_model_dir, calculator, write_samples, steps=3,
                           async_rollout={"max_staleness": 0})
    assert len(sync["records"]) == len(zero["records"]) == 3
    for a, b in zip(sync["records"], zero["records"], strict=True):
        assert [r["aworld_sample_id"] for r in a["inputs"]] == [r["aworld_sample_id"] for r in b["inputs"]]
        for key in ("prompt_ids", "completion_ids", "completion_mask", "tool_mask", "advantages"):
            assert a[key].equal(b[key]), key
        # every token of the staleness-0 run was sampled by the weights it trains
        versions = b["aworld_versions"][(b["completion_mask"] * b["tool_mask"]).bool()]
        assert versions.eq(b["step"]).all()
    assert any(r["advantages"].abs().sum() > 0 for r in sync["records"])  # the runs trained something
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(str(tool_model_dir)).state_dict()
    assert any(not v.equal(initial[k]) for k, v in sync["weights"].items())
    assert sync["weights"].keys() == zero["weights"].keys()
    for name, value in sync["weights"].items():
        assert value.equal(zero["weights"][name]), name
    assert zero["rollout"].misses == 0


@pytest.mark.slow
def test_versions_bound_and_behaviour_weights_are_exact(tmp_path, tool_model_dir, calculator, write_samples):
    """``max_staleness: 2``: tokens 0, 1 and 2 updates old, each version and weight exact."""
    import torch

    staleness = 2

    steps = 4
    out = _train_scripted(tmp_path, tool_model_dir, calculator, write_samples, steps=steps,
                          async_rollout={"max_staleness": staleness, "weight_cap": 2.0}, gate_s=10.0,
                          concurrency=8 * (staleness + 1))  # rollout.concurrency bounds episodes across batches
    records, engine = out["records"], out["engine"]
    assert [r["step"] for r in records] == list(range(steps))
    assert out["rollout"].misses == 0
    seen_staleness: set[int] = set()
    spanning = 0
    for record in records:
        step = record["step"]
        for episode_id, ids, versions in _rows(record):
            stamped = engine.stamped[episode_id]
            # the trained tokens' versions are exactly what the engine stamped on each call, in order
            expected = [v for call_ids, v in stamped for _ in call_ids]
            assert [v for v in versions if v >= 0] == expected
            assert [t for t, v in zip(ids, versions, strict=True) if v >= 0] == [t for c, _ in stamped for t in c]
            assert all(0 <= step - v <= staleness for v in expected), (step, expected)
            seen_staleness.update(step - v for v in expected)
            spanning += len({v for _, v in stamped}) > 1
        assert len(record["corrections"]) == 1
        c = record["corrections"][0]
        mask = c["mask"].bool()
        assert torch.allclose(c["prox"][mask], c["recomputed"][mask], atol=1e-5)
        stale = mask & (c["versions"] < step)
        expected_w = torch.ones_like(c["prox"])
        expected_w[stale] = torch.exp(c["prox"][stale] - BEHAV_LOGP).clamp(max=2.0)
        assert torch.equal(c["after"], c["before"].unsqueeze(1) * expected_w)
        if step >= 1:
            assert bool(stale.any()), f"step {step}: nothing was sampled ahead"
    assert seen_staleness == set(range(staleness + 1))  # the bound is reached, never passed
    assert spanning > 0  # episodes continued across an update (partial rollouts)
    counts = out["rollout"].staleness
    assert set(counts) == set(range(staleness + 1))


def _logprobs_of(model: Any, prompt: list[int], ids: list[int]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
    table = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    return table.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True])
def test_hf_engine_samples_from_the_published_weights(tmp_path, tool_model_dir, calculator, write_samples,
                                                      monkeypatch, lora):
    """Through ``train``: every trained token's logprob is the teacher-forced logprob of the weights
    of its version (the rollout engine's copy), stale and fresh tokens alike; with LoRA only the
    adapters are copied each step (the frozen base is in the copy from the start)."""
    import copy

    import aworld_trl.async_grpo as ag
    from aworld_trl.trainer import train

    snapshots: dict[int, Any] = {}
    records: list[dict[str, Any]] = []
    original = ag.async_trainer_class

    def recording_class() -> type:
        return _recording(original(), records)

    monkeypatch.setattr(ag, "async_trainer_class", recording_class)
    publish = ag.WeightSync.publish

    def keep(self: Any, model: Any, version: int) -> None:
        snapshots[version] = copy.deepcopy(model).eval()
        publish(self, model, version)

    monkeypatch.setattr(ag.WeightSync, "publish", keep)
    config = _job(tmp_path, tool_model_dir, calculator, write_samples, 3, {"max_staleness": 1})
    config["backends"]["trl"]["aworld"]["engine_batch_window_s"] = 0.02
    if lora:
        config["backends"]["trl"]["aworld"]["lora"] = {"r": 4, "alpha": 8, "dropout": 0.0}
    result = train(config, str(tmp_path / "run"))
    assert result.metrics["async/prefetch_misses"] == 0
    assert set(result.metrics["async/staleness_tokens"]) <= {"0", "1"}
    checked = stale = 0
    for record in records:
        for i in range(len(record["inputs"])):
            mask = (record["completion_mask"][i] * record["tool_mask"][i]).bool()
            n = int(record["completion_mask"][i].sum())
            prompt = record["prompt_ids"][i][record["prompt_mask"][i].bool()].tolist()
            ids = record["completion_ids"][i, :n].tolist()
            versions = record["aworld_versions"][i, :n].tolist()
            sampled = record["sampling_per_token_logps"][i, :n].tolist()
            for version in {v for v, m in zip(versions, mask.tolist(), strict=False) if m}:
                assert record["step"] - version in (0, 1)
                expected = _logprobs_of(snapshots[version], prompt, ids)
                for k in range(n):
                    if mask[k] and versions[k] == version:
                        assert math.isclose(sampled[k], expected[k], abs_tol=2e-4), (version, k)
                        checked += 1
                        stale += version < record["step"]
    assert checked > 0 and stale > 0
    logged = [json.loads(line) for line in Path(result.artifacts["metrics"]).read_text().splitlines()]
    assert any("aworld/staleness_mean" in r for r in logged)


@pytest.mark.slow
def test_hf_engine_update_aborts_the_running_decode_and_the_next_call_samples_new_weights(tool_model_dir):
    """An update waits one token, not a generation: the decode in flight hands back what it sampled
    (``stop_reason="abort"``, the old version), and what follows samples the new weights."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    from aworld_core.runtime.loop_thread import LoopThread
    from aworld_core.tokens.engine import ABORT
    from aworld_core.tokens.hf_engine import HFTokenEngine
    from aworld_core.tokens.llm import load_tokenizer
    from aworld_trl.async_grpo import WeightSync

    tokenizer = load_tokenizer(tool_model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(tool_model_dir))
    engine = HFTokenEngine(model, tokenizer, max_new_tokens=1000, batch_window_s=0)
    engine.stop_token_ids = set()  # a long generation to interrupt
    prompt = tokenizer.encode("<|im_start|>user\nWhat is 1234 * 5678?<|im_end|>\n<|im_start|>assistant\n")
    sampling = SamplingParams(temperature=1.0, max_tokens=150)
    long = SamplingParams(temperature=1.0, max_tokens=1000)  # room for a starved test thread to publish
    newer = copy.deepcopy(model)
    with torch.no_grad():
        for param in newer.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    with LoopThread("abort-test") as loop:
        weights = WeightSync(engine, loop)
        weights.publish(model, 0)
        weights.flush(timeout=60)
        seen: list[int] = []

        async def interrupted() -> TokenOutput:
            parts = []
            async for part in engine.stream(prompt, long, request_id="r"):
                parts.append(part)
                seen.extend(part.token_ids)
            ids = [t for p in parts for t in p.token_ids]
            return TokenOutput(ids, [x for p in parts for x in p.logprobs], parts[-1].stop_reason, 0)

        future = asyncio.run_coroutine_threadsafe(interrupted(), loop.loop)
        while len(seen) < 3:
            time.sleep(0.005)
        weights.publish(newer, 1)
        out = future.result(timeout=120)
        weights.flush(timeout=60)
        assert out.stop_reason == ABORT and 3 <= len(out.token_ids) < 1000
        resumed = loop.run(engine.generate(prompt + out.token_ids, sampling, request_id="r"))
    assert resumed.version == 1 and out.version == 0
    # the resumed tokens' logprobs are the new weights', teacher-forced
    ids = resumed.token_ids
    assert _logprobs_of(newer, prompt + out.token_ids, ids) == pytest.approx(resumed.logprobs, abs=1e-4)
    assert _logprobs_of(model, prompt, out.token_ids) == pytest.approx(out.logprobs, abs=1e-4)


def test_async_settings_that_cannot_be_honoured_are_refused(tmp_path):
    from aworld_core.errors import ConfigError
    from aworld_core.worker import load_job
    from aworld_trl.options import grpo_config

    def job(**trl: Any) -> Any:
        aworld = {"async_rollout": {"max_staleness": 1}, **trl.pop("aworld", {})}
        return load_job({"name": "x", "backend": "trl", "output_dir": str(tmp_path), "model": {"path": str(tmp_path)},
                         "backends": {"trl": {"aworld": aworld, **trl}}})

    grpo_config(job(), tmp_path)  # accepted
    with pytest.raises(ConfigError, match="num_iterations"):
        grpo_config(job(num_iterations=2), tmp_path)
    with pytest.raises(ConfigError, match="vespo"):
        grpo_config(job(loss_type="vespo"), tmp_path)
    with pytest.raises(ConfigError, match="rollout_torch_threads"):
        grpo_config(job(aworld={"rollout_torch_threads": 1}), tmp_path)
    with pytest.raises(ConfigError, match="max_staleness"):
        grpo_config(job(aworld={"async_rollout": {"max_staleness": -1}}), tmp_path)


def test_behaviour_weights_formula():
    import torch

    from aworld_trl.async_grpo import behaviour_weights, staleness_counts

    prox = torch.tensor([[-1.0, -2.0, -0.1, -3.0]])
    behav = torch.tensor([[-1.5, -1.0, -3.0, 0.0]])
    versions = torch.tensor([[4, 3, 2, -1]])
    mask = torch.tensor([[1, 1, 1, 0]])
    weights, stats = behaviour_weights(prox, behav, versions, 4, mask, cap=2.0)
    assert weights.tolist() == [[1.0, pytest.approx(math.exp(-1.0)), 2.0, 1.0]]
    assert stats["aworld/staleness_max"] == 2.0 and stats["aworld/stale_token_rate"] == pytest.approx(2 / 3)
    assert stats["aworld/behaviour_weight_capped_rate"] == 0.5
    assert staleness_counts(versions, 4, mask) == {0: 1, 1: 1, 2: 1}
