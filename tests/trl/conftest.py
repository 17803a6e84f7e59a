"""Shared real components for the trl backend's tests.

* ``tool_model_dir``: a tiny Qwen2 with the demo's tokenizer and chat template, warm-started for a
  few seconds on tool traces only, so it calls the calculator on (almost) every task. Real
  weights, real tokenizer, made at test time; nothing is downloaded.
* ``calculator``: the demo's calculator, a real MCP server process on 127.0.0.1 with a token.
* ``recorded``: every batch TRL's real ``GRPOTrainer`` builds (rows after the rollout, tensors).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TEST_MODEL_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "intermediate_size": 192}


def build_tool_model(path: Path, steps: int = 100) -> Path:
    import torch

    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer
    from aworld_cpu_grpo_demo.warm_start import warm_start

    tokenizer = train_tokenizer(seed=0, corpus_size=600)
    model = new_model(tokenizer, seed=0, **TEST_MODEL_SHAPE)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see _one_torch_thread
    try:
        warm_start(model, tokenizer, steps=steps, batch_size=16, lr=5e-3, progress=False,
                   tool_first_share=1.0, copy_rate=1.0)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(path)
    save_tokenizer(tokenizer, path)
    return path


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Tiny models gain little from intra-op threads, and on a busy 2-core machine two threads
    run several times slower than one (OpenMP oversubscription). Restored after each module."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tool_model(tmp_path_factory.mktemp("tool-model"))


class Calculator:
    def __init__(self, info: dict[str, Any]):
        self.info = info
        self.url = f"http://127.0.0.1:{info['port']}/mcp"
        self.token = info["token"]

    def mcp_config(self) -> dict[str, Any]:
        from aworld_core.tools.mcp_config import get_agent_tool_env_and_servers

        config, _ = get_agent_tool_env_and_servers(self.url, self.token, name="calculator", release_workspace=False)
        return config


@pytest.fixture(scope="session")
def calculator() -> Iterator[Calculator]:
    proc = subprocess.Popen([sys.executable, "-m", "aworld_cpu_grpo_demo.calculator"], stdout=subprocess.PIPE,
                            text=True)
    try:
        yield Calculator(json.loads(proc.stdout.readline()))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _write_samples(path: Path, n: int, seed: int = 0, split: str = "train") -> Path:
    from aworld_cpu_grpo_demo.tasks import load_arith

    with path.open("w", encoding="utf-8") as handle:
        for sample in load_arith(n=n, seed=seed, split=split):
            handle.write(json.dumps(sample.model_dump(mode="json")) + "\n")
    return path


@pytest.fixture
def write_samples() -> Any:
    """``write_samples(path, n, seed=0, split="train")``: arith tasks as a JSONL dataset file."""
    return _write_samples


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record every batch the GRPO trainer builds (inputs after the rollout + padded tensors)."""
    import aworld_trl.grpo as grpo

    records: list[dict[str, Any]] = []
    original = grpo.trainer_class

    def recording_class() -> type:
        base = original()

        class Recording(base):  # type: ignore[misc, valid-type]
            def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
                out = super()._generate_and_score_completions(inputs)
                records.append({"inputs": [dict(row) for row in inputs],
                                **{k: v.detach().clone() for k, v in out.items() if hasattr(v, "detach")}})
                return out

        return Recording

    monkeypatch.setattr(grpo, "trainer_class", recording_class)
    return records
