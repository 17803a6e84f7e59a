"""Asynchronous GRPO (``async_rollout``) with ``use_vllm: true``: the next step's episodes are sampled
by vLLM while a step trains; after each step the trained weights go into the engine (vLLM aborts the
requests in flight, ``TokenLLM`` resumes them on the new weights; the engine-level abort/resume is
``test_engine.py``'s), so episodes span updates (here the calculator holds each tool call until
the next update is in, so every episode started ahead of its step spans one). Every
trained token's logprob is vLLM's for the weights of the version it carries (within the engine's
float tolerance of the HF model's teacher-forced logprob), and no token is staler than the bound."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from typing import Any

import pytest
from test_trl_vllm import TOLERANCE, job

from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers


class Gate:
    """A tool latency that holds each call until the next weight update is in vLLM (at most
    ``timeout_s``): armed while a step trains (from the end of its batch to the next batch the
    trainer waits for), so every episode started ahead of its step samples its tool call before an
    update and its answer after it, and no call waits while the trainer waits for it."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self.armed = False
        self.released = 0.0

    def __bool__(self) -> bool:
        return True

    def release(self) -> None:
        self.released = time.monotonic()

    async def wait(self) -> None:
        started = time.monotonic()
        while self.armed and self.released <= started and time.monotonic() - started < self.timeout_s:
            await asyncio.sleep(0.02)


class GatedCalculator:
    """The demo's calculator app (``build_app``) with a :class:`Gate`, served by uvicorn in a thread."""

    def __init__(self, gate: Gate):
        import secrets
        import socket

        import uvicorn

        from aworld_cpu_grpo_demo.calculator import build_app

        self.token = secrets.token_urlsafe(16)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(build_app(self.token, "127.0.0.1", gate), log_level="warning"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)

    def __enter__(self) -> GatedCalculator:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def mcp_config(self) -> dict[str, Any]:
        config, _ = get_agent_tool_env_and_servers(f"http://127.0.0.1:{self.port}/mcp", self.token,
                                                  name="calculator", release_workspace=False)
        return config


def _logprobs_of(model: Any, prompt: list[int], ids: list[int]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
    table = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    return table.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()


@pytest.mark.slow
def test_async_grpo_on_vllm_trains_each_token_with_the_version_that_sampled_it(tmp_path, tool_model_dir,
                                                                             monkeypatch):
    import aworld_trl.async_grpo as ag
    from aworld_trl.trainer import train

    records: list[dict[str, Any]] = []
    snapshots: dict[int, Any] = {}
    engines: list[Any] = []
    base = ag.async_trainer_class

    def recording_class() -> type:
        class Recording(base()):  # type: ignore[misc, valid-type]
            def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
                # while the trainer waits for a batch no update can come: a held call would only
                # run out its timeout (an episode's second call, made after the last release)
                gate.armed = False
                out = super()._generate_and_score_completions(inputs)
                gate.armed = True  # training: the batches started ahead wait for the update it makes
                engines.append(self.aworld_async.engine)
                records.append({"step": int(self.state.global_step),
                                **{k: v.detach().clone() for k, v in out.items() if hasattr(v, "detach")}})
                return out

        return Recording

    publish, apply = ag.WeightSync.publish, ag.WeightSync._apply
    gate = Gate()

    async def applied(self: Any, snapshot: Any, version: int, mode: str) -> None:
        await apply(self, snapshot, version, mode)
        gate.release()

    def keep(self: Any, model: Any, version: int) -> None:
        snapshots[version] = copy.deepcopy(model).eval()
        publish(self, model, version)

    monkeypatch.setattr(ag, "async_trainer_class", recording_class)
    monkeypatch.setattr(ag.WeightSync, "publish", keep)
    monkeypatch.setattr(ag.WeightSync, "_apply", applied)
    with GatedCalculator(gate) as calculator:
        config = job(tmp_path, tool_model_dir, calculator.mcp_config(), max_steps=3)
        # no held-out evaluation: after the last update the armed gate would hold each of its tool calls
        # for its whole timeout (60 s in all), and nothing here checks it
        config["backends"]["trl"]["aworld"].update(async_rollout={"max_staleness": 1}, eval_before=False,
                                                    eval_after=False)
        config["reward"] = {"name": "exact_answer"}
        result = train(config, str(tmp_path / "run"))

    assert len(records) == 3 and result.metrics["async/prefetch_misses"] == 0
    engine = engines[0]
    print(f"vLLM weight updates {engine.updates}, requests aborted by them {engine.aborted}")
    assert engine.updates >= 3  # the initial weights, then after steps 1 and 2 (and 3)
    worst = 0.0
    stale = spanning = 0
    for record in records:
        step = record["step"]
        for i in range(record["completion_ids"].shape[0]):
            mask = (record["completion_mask"][i] * record["tool_mask"][i]).bool().tolist()
            n = int(record["completion_mask"][i].sum())
            prompt = record["prompt_ids"][i][record["prompt_mask"][i].bool()].tolist()
            ids = record["completion_ids"][i, :n].tolist()
            versions = record["aworld_versions"][i, :n].tolist()
            sampled = record["sampling_per_token_logps"][i, :n].tolist()
            trained = {v for v, m in zip(versions, mask, strict=False) if m}
            spanning += len(trained) > 1
            for version in trained:
                assert 0 <= step - version <= 1, (step, version)
                expected = _logprobs_of(snapshots[version], prompt, ids)
                for k in range(n):
                    if mask[k] and versions[k] == version:
                        worst = max(worst, abs(sampled[k] - expected[k]))
                        stale += version < step
    print(f"max |vLLM - HF(version)| {worst:.2e}; stale tokens {stale}; episodes spanning an update {spanning}")
    assert worst < TOLERANCE
    assert stale > 0 and spanning > 0
    assert set(result.metrics["async/staleness_tokens"]) <= {"0", "1"}
