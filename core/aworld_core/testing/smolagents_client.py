"""smolagents' ``ToolCallingAgent`` as a job's ``agent.openai_agent``: real smolagents, unmodified.

:func:`smolagents_agent` is an agent function as the worker kit runs it (``f(sample, *, base_url,
api_key, model)``, a plain ``def``: the kit calls it in a thread so the loop serving the gateway
stays free): an ``OpenAIServerModel`` pointed at the episode's gateway URL drives a
``ToolCallingAgent`` with two local tools (``calc``, the CPU demo's tool, and ``add``, the test MCP
server's). smolagents sends its earlier tool calls back as assistant text and the tool results as
user ``Observation:`` messages, so each turn after the first rewrites the history: the gateway
starts a new token-exact segment from a fresh render of what it sent (docs/token-fidelity.md,
"Segments"), and a backend must train every segment's sampled tokens.

With ``max_steps=1`` (the default here) an episode is two model calls whatever the policy writes:
the first step, a tool call (smolagents asks ``tool_choice: "required"``, so its opening is forced,
mask 0), then smolagents' own final-answer call on the re-serialized memory: two segments. Each
request carries ``max_tokens`` (:data:`MAX_TOKENS`), so an untrained policy's call ends inside a
backend's response budget. The prompt templates are shortened (a tiny test model's context is small; ``prompt_templates`` is
smolagents' public option for them). Needs ``pip install smolagents`` (imported on call).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

#: smolagents' steps before its final-answer call (one tool call, then the answer: two segments)
MAX_STEPS = 1
#: tokens per request (``max_tokens``), so every call ends within a tiny test budget
MAX_TOKENS = 20
SYSTEM_PROMPT = (
    "Use a tool, then answer. Tools:{%- for tool in tools.values() %} {{ tool.name }}{%- endfor %}."
)
FINAL_PRE = "Answer from this memory:"
FINAL_POST = "Now answer: {{task}}"
_EXPR = re.compile(r"^\s*(\d{1,12})\s*([*+-])\s*(\d{1,12})\s*$")


def _calc(expr: str) -> str:
    """Evaluate an expression such as 12*34 (whole numbers, one of * + -).

    Args:
        expr: the expression
    """
    match = _EXPR.match(str(expr))
    if match is None:
        raise ValueError(f"cannot evaluate {expr!r}: write two whole numbers and one of * + -")
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    return str(a * b if op == "*" else a + b if op == "+" else a - b)


def _add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return int(a) + int(b)


def _tools() -> list[Any]:
    import smolagents

    tools = []
    for name, func in (("calc", _calc), ("add", _add)):
        func.__name__ = name
        with warnings.catch_warnings():  # it warns about pytest's assertion rewriting, taken for a decorator
            warnings.simplefilter("ignore", UserWarning)
            tools.append(smolagents.tool(func))
    return tools


def _question(sample: Any) -> str:
    """The sample's last user message as text (smolagents takes a task string)."""
    for message in reversed(list(sample.prompt)):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    raise ValueError(f"sample {sample.id!r} has no user message")


def smolagents_agent(sample: Any, *, base_url: str, api_key: str, model: str, max_steps: int = MAX_STEPS,
                     max_tokens: int | None = MAX_TOKENS, system_prompt: str = SYSTEM_PROMPT) -> str | None:
    """One smolagents ``ToolCallingAgent`` run on ``sample`` against ``base_url``; its final answer.

    ``max_tokens`` goes with every request (smolagents forwards its model's keyword arguments to
    the API call): a tiny untrained policy that never stops still ends each call, well within a
    backend's response budget, so the episode keeps both its calls. ``system_prompt`` is
    smolagents' system prompt template (Jinja over ``tools``). A test that needs other values
    names a wrapper of its own as ``agent.openai_agent``."""
    import importlib.resources

    import smolagents
    import yaml

    templates = yaml.safe_load(
        importlib.resources.files("smolagents.prompts").joinpath("toolcalling_agent.yaml").read_text(encoding="utf-8")
    )
    templates["system_prompt"] = system_prompt
    templates["final_answer"] = {"pre_messages": FINAL_PRE, "post_messages": FINAL_POST}
    extra = {} if max_tokens is None else {"max_tokens": max_tokens}
    llm = smolagents.OpenAIServerModel(model_id=model, api_base=base_url, api_key=api_key,
                                       client_kwargs={"max_retries": 0}, **extra)
    agent = smolagents.ToolCallingAgent(tools=_tools(), model=llm, max_steps=max_steps, verbosity_level=0,
                                        prompt_templates=templates)
    answer = agent.run(_question(sample))
    return None if answer is None else str(answer)
