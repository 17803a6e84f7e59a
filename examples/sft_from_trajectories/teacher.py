"""The teacher the task servers run: a scripted policy over the student's tokenizer.

It stands in for "a stronger agent" honestly: it is a program, not a model, and it is not
perfect. For "What is A * B?" it calls the calculator (``calc``, a real MCP server) and copies
the result into ``<answer>...</answer>``; on a quarter of the attempts (chosen by a hash of the
episode id) it answers a guess of the right length without the tool instead, which the reward
scores 0 and the filter drops.

It answers as a ``TokenEngine``: the ids it "samples" are its reply encoded with the student's
tokenizer, so every episode carries a token view of the student's vocabulary (``TokenLLM``
records prompt ids, sampled ids with mask 1 and the tool's tokens with mask 0) and SFT can train
on exactly those ids. Its logprobs are 0.0 (a deterministic policy).

Loaded by file path in each task server (``--agents teacher=.../teacher.py:solve``); the server
process gets the tokenizer directory as ``AWORLD_SFT_TOKENIZER`` and the calculator as
``MCP_SERVER_URL`` / ``MCP_SERVER_TOKEN`` / ``MCP_SERVERS``, and ``AWORLD_SFT_TEACHER_DELAY_S``: a
wait per reply standing for a served model's latency (0: the program's own speed, CPU-bound).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from typing import Any

TOKENIZER_ENV = "AWORLD_SFT_TOKENIZER"
DELAY_ENV = "AWORLD_SFT_TEACHER_DELAY_S"  # seconds per reply, as a served model would take (default 0)
GUESS_RATE = 0.25
QUESTION = re.compile(r"What is (\d+) \* (\d+)\?")
USER, TOOL, END = "<|im_start|>user\n", "<|im_start|>tool\n", "<|im_end|>"

_runner: Any = None


def reply_for(conversation: str, episode_id: str) -> str:
    """The teacher's next assistant message for the rendered conversation so far."""
    last_user, last_tool = conversation.rfind(USER), conversation.rfind(TOOL)
    if last_tool > last_user:  # the calculator answered: copy its result
        start = last_tool + len(TOOL)
        return f"<answer>{conversation[start: conversation.find(END, start)].strip()}</answer>"
    a, b = QUESTION.findall(conversation[last_user:])[-1]
    rng = random.Random(int.from_bytes(hashlib.sha256(episode_id.encode()).digest()[:8], "big"))
    if rng.random() < GUESS_RATE:
        digits = len(str(int(a) * int(b)))
        return f"<answer>{rng.randint(10 ** (digits - 1), 10**digits - 1)}</answer>"
    call = json.dumps({"name": "calc", "arguments": {"expr": f"{a}*{b}"}}, separators=(",", ":"))
    return f"<tool_call>{call}</tool_call>"


def teacher_engine(tokenizer: Any, delay_s: float = 0.0) -> Any:
    """A ``ScriptedTokenEngine`` whose script is :func:`reply_for` over the decoded prompt;
    ``delay_s`` per reply stands for a served model's latency."""
    from aworld_core.tokens import ScriptedTokenEngine, TokenOutput

    def script(prompt_ids: list[int], sampling: Any, request_id: str) -> TokenOutput:
        text = reply_for(tokenizer.decode(prompt_ids, skip_special_tokens=False), request_id) + END
        ids = tokenizer.encode(text, add_special_tokens=False)
        return TokenOutput(ids, [0.0] * len(ids), None, 0)

    return ScriptedTokenEngine(script, delay_s=delay_s)


def _build_runner() -> Any:
    from aworld_core.config import JobConfig
    from aworld_core.tokens import load_tokenizer
    from aworld_core.worker import EpisodeRunner, build_agent, build_token_llm

    directory = os.environ.get(TOKENIZER_ENV)
    if not directory:
        raise RuntimeError(f"set {TOKENIZER_ENV} to the student's model directory (its tokenizer)")
    job = JobConfig.model_validate({"model": {"path": directory, "tool_parser": "hermes"},
                                    "agent": {"name": "calculator-agent", "max_steps": 3}})
    tokenizer = load_tokenizer(directory)
    llm = build_token_llm(teacher_engine(tokenizer, float(os.environ.get(DELAY_ENV) or 0)), tokenizer, job)
    return EpisodeRunner(build_agent(job), llm)


async def solve(task: Any) -> Any:
    """The task function: one episode of the teacher on ``task`` (scored by the server's reward)."""
    from aworld_core.schemas import RolloutContext
    from aworld_service import task_sample

    global _runner
    if _runner is None:
        _runner = _build_runner()
    context = RolloutContext(episode_id=f"ep-{task.task_id}", task_id=task.task_id, timeout=task.timeout,
                             max_steps=task.max_steps)
    return await _runner.run(task_sample(task), context, notify=False)


if os.environ.get(TOKENIZER_ENV):  # in a task server: build now, before it serves, not inside its event loop
    _runner = _build_runner()
