"""Agents the task-service tests run, in-process and in server subprocesses.

Referenced by file path (``.../service_agents.py:calc_agent``), so a server process imports it
without the test tree on its path. The LLM is the loopback OpenAI stub whose URL the test puts
in ``AWORLD_TEST_LLM_URL``; ``calc_script`` is the stub's deterministic script.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from aworld_core import Agent, AgentConfig, Runners
from aworld_core.schemas import AworldTask

THIS_FILE = Path(__file__).resolve()


def ref(name: str) -> str:
    return f"{THIS_FILE}:{name}"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def calc_agent() -> Agent:
    """A real Agent with one Python tool, talking to the loopback stub."""
    return Agent(
        "calc",
        system_prompt="Add the two numbers with the add tool, then answer in <answer></answer>.",
        conf=AgentConfig(
            llm_base_url=os.environ.get("AWORLD_TEST_LLM_URL", "http://127.0.0.1:9/v1"),  # no stub: never called
            llm_model_name="stub-model",
            llm_api_key="test-key",
            llm_retries=1,
            llm_timeout_s=30,
        ),
        tools=[add],
    )


def calc_script(body: dict[str, Any]) -> Any:
    """The stub's script: call add(a, b) for 'add A and B', then answer with the tool's result."""
    from support.openai_stub import reply, tool_call

    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return f"<answer>{last['content']}</answer>"
    user = next(m for m in reversed(messages) if m["role"] == "user")
    text = user["content"] if isinstance(user["content"], str) else json.dumps(user["content"])
    if "fail-llm" in text:
        return reply(status=400, body={"error": {"message": "stub refuses this task"}})
    numbers = [int(n) for n in re.findall(r"-?\d+", text)[-2:]]
    if len(numbers) < 2:
        return "I need two numbers."
    return reply(tool_calls=[tool_call("add", {"a": numbers[0], "b": numbers[1]})])


_shared: dict[str, Agent] = {}


async def witnessed_calc(task: AworldTask) -> Any:
    """Runs the calc Agent through Runners, and writes when each run starts and ends to
    ``$AWORLD_TEST_WITNESS_DIR/<pid>.jsonl``: the independent record the fault tests check for
    two hosts running one task at the same time."""
    agent = _shared.get("calc") or _shared.setdefault("calc", calc_agent())
    log = Path(os.environ["AWORLD_TEST_WITNESS_DIR"]) / f"{os.getpid()}.jsonl"
    _witness(log, task.task_id, "start")
    episode = await Runners.run(task.agent_input, agent=agent, task_id=task.task_id, timeout=task.timeout)
    _witness(log, task.task_id, "end")
    return episode


def _witness(log: Path, task_id: str, event: str) -> None:
    line = json.dumps({"task_id": task_id, "pid": os.getpid(), "event": event, "t": time.time()}) + "\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of a short line: whole or not at all under SIGKILL
    finally:
        os.close(fd)


async def echo(task: AworldTask) -> str:
    """A task function (no LLM): answers with the input."""
    return f"echo: {task.agent_input}"


async def noop(task: AworldTask) -> str:
    return "ok"


async def slow(task: AworldTask) -> str:
    """Sleeps ``metadata.sleep_s`` seconds (default 30): for timeouts, cancels and full queues."""
    await asyncio.sleep(float(task.metadata.get("sleep_s", 30)))
    return "slept"


async def side_effect(task: AworldTask) -> str:
    """Works ``metadata.work_s`` seconds, then does its side effect (an ``effect`` line in
    ``$AWORLD_TEST_WITNESS_DIR/<pid>.jsonl``, outside the store) and returns at once: a run that
    did the effect finished. ``start`` / ``end`` lines frame every run, a stopped one too."""
    log = Path(os.environ["AWORLD_TEST_WITNESS_DIR"]) / f"{os.getpid()}.jsonl"
    _witness(log, task.task_id, "start")
    try:
        await asyncio.sleep(float(task.metadata.get("work_s", 0.2)))
        _witness(log, task.task_id, "effect")
        return f"did {task.task_id}"
    finally:
        _witness(log, task.task_id, "end")


async def broken(task: AworldTask) -> str:
    raise RuntimeError(f"broken agent on purpose for {task.task_id}")


def calc_agent_for_task(task: AworldTask) -> Agent:
    """A factory that takes the task (it applies overrides itself): uses the task's model name."""
    agent = calc_agent()
    if task.llm_model_name:
        agent.conf = agent.conf.model_copy(update={"llm_model_name": task.llm_model_name})
    return agent


def not_an_agent() -> int:
    return 42
