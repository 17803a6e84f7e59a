"""The job's datasets as ms-swift GRPO rows (JSONL), with the agent's tools.

One row per sample: ``messages`` (the sample's prompt, which ms-swift groups generations by and
logs; the scheduler replaces it with the messages the episode really starts with), ``tools``
(the OpenAI schemas of the trained agent's tools, JSON; ms-swift renders them into the prompt
with its agent template) and ``aworld_sample`` (the whole ``Sample`` as JSON: id, prompt, ground
truth, data source, extra info; the scheduler and the reward functions read it back).

ms-swift takes each trajectory's tools from its dataset row before the trajectory starts, so
they are listed once at launch: a probe episode runs the agent on the first sample with a client
that records the tools the trained agent is offered (MCP servers connected and listed, names
disambiguated, swarm members as tools: exactly the runtime's own list) and answers at once. The
scheduler checks each episode's tools against its row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aworld_core import LLMResponse
from aworld_core.errors import UsageError
from aworld_core.schemas import Message, Sample, SamplingParams

SAMPLE_COLUMN = "aworld_sample"
TRAIN_FILE = "swift_train.jsonl"
TEST_FILE = "swift_test.jsonl"


class ToolProbeLLM:
    """An LLM client that records what the trained agent is offered and ends its turn at once."""

    def __init__(self) -> None:
        self.tools: list[dict[str, Any]] | None = None
        self.messages: list[Message] | None = None

    async def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
                   sampling: SamplingParams | None = None, *, session_id: str | None = None) -> LLMResponse:
        if self.messages is None:
            self.messages = list(messages)
            self.tools = list(tools or [])
        return LLMResponse(content="", finish_reason="stop", model="aworld-swift-tool-probe")

    def finish_session(self, session_id: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def list_agent_tools(agent: Any, sample: Sample, *, timeout: float | None = None) -> list[dict[str, Any]]:
    """The tool schemas the trained agent of ``agent`` is offered on ``sample`` (one probe episode)."""
    from aworld_core import get_plugin_manager, maybe_await
    from aworld_core.schemas import EpisodeStatus

    probe = ToolProbeLLM()
    manager = get_plugin_manager()
    context: dict[str, Any] = {"episode_id": f"ep-swift-tool-probe-{sample.id}", "timeout": timeout, "max_steps": 1}
    episode = await maybe_await(manager.hook.rollout(agent=agent, sample=sample, llm=probe, context=context))
    if probe.tools is None:
        status = getattr(episode, "status", None)
        error = getattr(episode, "error", None)
        if status is not None and status is not EpisodeStatus.SUCCESS:
            raise UsageError(f"listing the agent's tools failed: the probe episode {status.value}: {error}")
        raise UsageError(
            "listing the agent's tools failed: the trained agent was never asked anything in the probe episode "
            "(is an agent marked trainable?)"
        )
    return probe.tools


def swift_row(sample: Sample, tools: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "messages": [{"role": m.get("role", "user"), "content": _text(m.get("content"))} for m in sample.prompt],
        SAMPLE_COLUMN: sample.model_dump_json(),
    }
    if tools:
        row["tools"] = json.dumps(list(tools), ensure_ascii=False)
    return row


def write_rows(samples: Sequence[Sample], tools: Sequence[dict[str, Any]] | None, path: Path) -> Path:
    ids: set[str] = set()
    for sample in samples:
        if sample.id in ids:
            raise UsageError(f"the dataset has two rows with id '{sample.id}'; sample ids must be unique")
        ids.add(sample.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for sample in samples:
            handle.write(json.dumps(swift_row(sample, tools), ensure_ascii=False) + "\n")
    return path


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
