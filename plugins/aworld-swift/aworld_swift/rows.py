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

An agent written against the OpenAI API (``agent.openai_agent``) is probed the same way through
its own client: the function runs once on the first sample against a loopback endpoint that
records its first Chat Completions request and answers it with a 400 (which OpenAI SDKs do not
retry), so the function fails at once. The request is read as the core's gateway reads it
(``parse_chat``: a field the gateway would refuse is refused here, at launch), and its tools are
the row's. Its ``tool_choice`` comes back with them (the launch refuses a forced first turn where
ms-swift's driver cannot honour it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


PROBE_MODEL = "aworld-swift-tool-probe"
PROBE_ANSWER = ("aworld-swift's launch probe records the agent's first request (its tools) and answers no "
                "request; this error is expected")


@contextmanager
def _first_request() -> Iterator[tuple[str, dict[str, Any]]]:
    """A loopback HTTP endpoint (its base URL) that records the first JSON body POSTed to it
    (``recorded["body"]``) and answers 400."""
    import http.server
    import threading

    recorded: dict[str, Any] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if "body" not in recorded and self.path.rstrip("/").endswith("/chat/completions"):
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                recorded["body"] = body if isinstance(body, dict) else {}
            error = {"error": {"message": PROBE_ANSWER, "type": "invalid_request_error", "param": None, "code": None}}
            data = json.dumps(error).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="aworld-swift-probe", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", recorded
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def list_openai_agent_tools(agent: Any, sample: Sample, *, timeout: float | None = None
                                  ) -> tuple[list[dict[str, Any]], str | None]:
    """The tools (and ``tool_choice``) of the first Chat Completions request an OpenAI-API agent
    (:class:`aworld_core.worker.OpenAIAgent`) sends on ``sample``: see the module docstring."""
    import asyncio

    from aworld_core.errors import AworldError
    from aworld_core.gateway import parse_chat

    with _first_request() as (base_url, recorded):
        # done once the first request is recorded, whatever the function does with the error (a function
        # still running in its thread then finds the endpoint gone at its next call)
        call = asyncio.ensure_future(agent.call(sample, base_url=base_url, api_key="aworld",
                                                model=PROBE_MODEL))
        try:
            async with asyncio.timeout(timeout):
                while "body" not in recorded and not call.done():
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise UsageError(f"listing the tools of agent.openai_agent {agent.ref!r} failed: it sent no request "
                             f"within {timeout:g} s of the probe episode") from None
        finally:
            if not call.done():
                call.cancel()
            await asyncio.gather(call, return_exceptions=True)  # the expected end: its request answered 400
    if "body" not in recorded:
        raise UsageError(f"listing the tools of agent.openai_agent {agent.ref!r} failed: its probe run on sample "
                         f"{sample.id!r} sent no POST /v1/chat/completions (the swift backend trains agents on the "
                         "Chat Completions API)")
    try:
        chat = parse_chat(recorded["body"])
    except AworldError as exc:
        raise UsageError(f"agent.openai_agent {agent.ref!r}: its first request would be refused by the gateway: "
                         f"{exc}") from None
    return list(chat.tools or []), chat.turn.function or chat.turn.tool_choice


def parse_sample(raw: str | dict[str, Any]) -> Sample:
    """A row's ``aworld_sample`` (JSON text, or already parsed) back as the ``Sample``."""
    return Sample.model_validate_json(raw) if isinstance(raw, str) else Sample.model_validate(raw)


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
