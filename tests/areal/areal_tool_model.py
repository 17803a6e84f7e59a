"""A tiny model taught one tool-using conversation, so a real model makes a real MCP tool call.

The random tiny model (``aworld_core.testing.tiny_model``) never writes a parseable tool call. Here it is
fitted for a few seconds on one conversation with the ``add`` tool of a real MCP server:
the conversation is recorded by running the agent once with a scripted client (which also
captures the exact tool schemas the runtime offers), rendered with the chat template the
token path uses, and trained with the loss on the assistant's tokens only. Greedy decoding then
reproduces: a ``<tool_call>`` for ``add``, then a final answer after the tool result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import Sample, SamplingParams, ToolCall

SYSTEM_PROMPT = "You add numbers with the add tool, then give the answer."
QUESTION = "What is 2 plus 3?"
ANSWER_TEXT = "The answer is 5."
ASSISTANT_OPEN = "<|im_start|>assistant\n"
TURN_CLOSE = "<|im_end|>"


def agent_section(server: Any, **extra: Any) -> dict[str, Any]:
    """The job's ``agent`` section: the adder agent on the test MCP server."""
    return {
        "name": "adder",
        "system_prompt": SYSTEM_PROMPT,
        "max_steps": 4,
        "mcp_config": {"mcpServers": {"calc": server.config()}},
        **extra,
    }


def job_dict(model_dir: Path, server: Any, **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": "areal-test",
        "model": {"path": str(model_dir)},
        "agent": agent_section(server),
        "reward": {"name": "gsm8k"},
        "rollout": {"episode_timeout_s": 60},
    }
    job.update(extra)
    return job


def make_workflow(model_dir: Path, server: Any, *, gconfig: Any = None, job: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """An ``AworldWorkflow`` for the adder job; greedy, short generations unless ``gconfig`` says."""
    from areal.api.cli_args import GenerationHyperparameters

    from aworld_areal.workflow import AworldWorkflow

    if gconfig is None:
        gconfig = GenerationHyperparameters(greedy=True, max_new_tokens=48, max_tokens=2048)
    return AworldWorkflow(job or job_dict(model_dir, server), gconfig, str(model_dir), **kwargs)


def tool_sample(sample_id: str = "add-2-3") -> Sample:
    return Sample(id=sample_id, prompt=[{"role": "user", "content": QUESTION}], ground_truth="5", data_source="toy")


class ScriptedClient:
    """An LLM client that answers from a script and records what the runtime offered it."""

    def __init__(self) -> None:
        self.tools: list[dict[str, Any]] | None = None
        self.calls = 0

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
        *,
        session_id: str | None = None,
    ) -> LLMResponse:
        self.tools = tools
        self.calls += 1
        if self.calls == 1:
            call = ToolCall(id="call_0", name="add", arguments=json.dumps({"a": 2, "b": 3}))
            return LLMResponse(content="", tool_calls=[call], finish_reason="tool_calls")
        return LLMResponse(content=ANSWER_TEXT, finish_reason="stop")

    async def aclose(self) -> None:
        return None


def assistant_labels(tokenizer: Any, text: str) -> tuple[list[int], list[int]]:
    """Ids of ``text`` and labels that are -100 except on assistant content and its end token."""
    spans = []
    start = text.find(ASSISTANT_OPEN)
    while start != -1:
        begin = start + len(ASSISTANT_OPEN)
        end = text.find(TURN_CLOSE, begin) + len(TURN_CLOSE)
        spans.append((begin, end))
        start = text.find(ASSISTANT_OPEN, end)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    labels = [
        tok if any(b <= s < e for b, e in spans) else -100
        for tok, (s, _) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
    ]
    return list(enc["input_ids"]), labels


def fit_tool_model(base_dir: Path, out_dir: Path, text: str, *, max_steps: int = 200, lr: float = 3e-3) -> Path:
    """Copy the tiny model at ``base_dir`` into ``out_dir`` after fitting it to ``text``.

    Stops once every assistant token is the argmax under teacher forcing (so greedy decoding
    reproduces the conversation) with some margin (mean loss < 0.1).
    """
    import torch
    from transformers import Qwen2ForCausalLM

    from aworld_core.tokens.llm import load_tokenizer

    tokenizer = load_tokenizer(base_dir)
    model = Qwen2ForCausalLM.from_pretrained(str(base_dir))
    ids, labels = assistant_labels(tokenizer, text)
    input_ids = torch.tensor([ids])
    target = torch.tensor([labels])
    shifted = target[0, 1:]
    taught = shifted != -100
    torch.manual_seed(0)
    optim = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(max_steps):
        out = model(input_ids=input_ids, labels=target)
        exact = bool((out.logits[0, :-1].argmax(-1)[taught] == shifted[taught]).all())
        if exact and out.loss.item() < 0.1:
            break
        optim.zero_grad()
        out.loss.backward()
        optim.step()
    else:
        raise RuntimeError(f"the tiny model did not learn the tool conversation in {max_steps} steps")
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
