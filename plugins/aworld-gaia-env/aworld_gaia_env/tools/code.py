"""intelligence-code and terminal: Python and shell in the episode's workspace, sandboxed.

The limits and isolation are :mod:`aworld_gaia_env.sandbox`'s; a run that hits one still returns
normally, with what it printed and a note naming the limit, so the model can adapt its code.
"""

from __future__ import annotations

import re

from pydantic import Field

from aworld_gaia_env.tools.base import Args, ToolContext, tool


class PythonArgs(Args):
    code: str = Field(description="Python source to run as a script; print what you need to see.")
    timeout_s: float | None = Field(
        default=None, gt=0, description="Wall-clock limit in seconds (capped by the server's SANDBOX_TIMEOUT_S)."
    )


@tool(
    "intelligence-code",
    "run_python",
    "Run Python code in a sandbox whose working directory is the episode's workspace (pandas, numpy, openpyxl "
    "and the other installed packages are available; no network; limited CPU time, memory and output). "
    "Returns the exit code, stdout and stderr.",
    PythonArgs,
)
async def run_python(ctx: ToolContext, args: PythonArgs) -> str:
    result = await ctx.services.sandbox.run_python(args.code, ctx.workspace, timeout_s=args.timeout_s)
    return result.render()


class GenerateArgs(Args):
    task: str = Field(description="What the code should do, including file names and the expected output.")
    context: str | None = Field(default=None, description="Anything else the code writer should know.")


_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


@tool(
    "intelligence-code",
    "generate_python",
    "Ask a code model (CODE_LLM_*, else MCP_LLM_*) to write Python for a task; returns the code without running it "
    "(run it with intelligence-code__run_python).",
    GenerateArgs,
)
async def generate_python(ctx: ToolContext, args: GenerateArgs) -> str:
    endpoint = ctx.services.llm_endpoint("code", "intelligence-code__generate_python")
    prompt = args.task if not args.context else f"{args.task}\n\nContext:\n{args.context}"
    reply = await ctx.services.chat(
        endpoint,
        [
            {
                "role": "system",
                "content": "Write one self-contained Python 3 script for the task. It runs with the working "
                "directory set to the folder holding the task's files and has no network. Print the results. "
                "Answer with the code in a single ```python block.",
            },
            {"role": "user", "content": prompt},
        ],
        tool="intelligence-code__generate_python",
    )
    match = _FENCE.search(reply)
    return match.group(1).strip() if match else reply.strip()


class ShellArgs(Args):
    command: str = Field(description="A shell command (bash) run in the episode's workspace.")
    timeout_s: float | None = Field(default=None, gt=0, description="Wall-clock limit in seconds (capped by the server).")


@tool(
    "terminal",
    "run_command",
    "Run a shell command in the episode's workspace (no network; only the system's programs are visible besides it, "
    "read-only; "
    "limited CPU time, memory, processes and output). Returns the exit code, stdout and stderr.",
    ShellArgs,
)
async def run_command(ctx: ToolContext, args: ShellArgs) -> str:
    result = await ctx.services.sandbox.run_shell(args.command, ctx.workspace, timeout_s=args.timeout_s)
    return result.render()


TOOLS = [run_python, generate_python, run_command]
