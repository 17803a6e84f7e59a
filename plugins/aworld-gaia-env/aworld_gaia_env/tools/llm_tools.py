"""intelligence-think, intelligence-guard, media-image, media-audio: tools backed by a model.

All go to an OpenAI-compatible endpoint: ``MCP_LLM_*`` by default, overridden per tool by
``THINK_LLM_*``, ``GUARD_LLM_*``, ``IMAGE_LLM_*``, ``AUDIO_LLM_*``. When neither is set the tool
is still listed and answers with an error naming the variables to set.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
from collections.abc import Callable
from pathlib import PurePosixPath

from pydantic import Field

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.services import resolve_llm_endpoint
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools.base import Args, ToolContext, ToolOutput, tool


def _needs_llm(role: str, tool_name: str) -> Callable[[GaiaEnvSettings], ToolError | None]:
    def check(settings: GaiaEnvSettings) -> ToolError | None:
        try:
            resolve_llm_endpoint(settings, role, tool_name)
        except ToolError as exc:
            return exc
        return None

    return check


class ThinkArgs(Args):
    question: str = Field(description="The problem to reason about.")
    context: str | None = Field(default=None, description="Facts gathered so far.")


@tool(
    "intelligence-think",
    "think",
    "Ask a reasoning model to think a problem through step by step (THINK_LLM_*, else MCP_LLM_*).",
    ThinkArgs,
    missing=_needs_llm("think", "intelligence-think__think"),
)
async def think(ctx: ToolContext, args: ThinkArgs) -> str:
    endpoint = ctx.services.llm_endpoint("think", "intelligence-think__think")
    prompt = args.question if not args.context else f"{args.question}\n\nWhat is known so far:\n{args.context}"
    return await ctx.services.chat(
        endpoint,
        [
            {"role": "system", "content": "Reason step by step, check each step, and end with the conclusion."},
            {"role": "user", "content": prompt},
        ],
        tool="intelligence-think__think",
    )


class GuardArgs(Args):
    question: str = Field(description="The task as it was asked.")
    answer: str = Field(description="The proposed final answer.")
    reasoning: str | None = Field(default=None, description="How the answer was reached.")


@tool(
    "intelligence-guard",
    "check_answer",
    "Ask a reviewer model whether a proposed answer really answers the question in the requested form "
    "(GUARD_LLM_*, else MCP_LLM_*).",
    GuardArgs,
    missing=_needs_llm("guard", "intelligence-guard__check_answer"),
)
async def check_answer(ctx: ToolContext, args: GuardArgs) -> str:
    endpoint = ctx.services.llm_endpoint("guard", "intelligence-guard__check_answer")
    content = f"Question:\n{args.question}\n\nProposed answer:\n{args.answer}"
    if args.reasoning:
        content += f"\n\nReasoning:\n{args.reasoning}"
    return await ctx.services.chat(
        endpoint,
        [
            {
                "role": "system",
                "content": "You review answers. Say whether the answer is supported and in exactly the form the "
                "question asks for (units, rounding, list format). Reply 'OK' or list the problems.",
            },
            {"role": "user", "content": content},
        ],
        tool="intelligence-guard__check_answer",
    )


class ImageArgs(Args):
    path: str | None = Field(default=None, description="Image file in the workspace.")
    url: str | None = Field(default=None, description="Or an http(s) URL of the image.")
    question: str = Field(default="Describe the image in detail, including any text in it.", description="What to ask about it.")


_IMAGE_MAX_BYTES = 20 * 2**20


@tool(
    "media-image",
    "ask_image",
    "Ask a vision model about an image from the workspace or a URL (IMAGE_LLM_*, else MCP_LLM_*).",
    ImageArgs,
    missing=_needs_llm("image", "media-image__ask_image"),
)
async def ask_image(ctx: ToolContext, args: ImageArgs) -> str | ToolOutput:
    if (args.path is None) == (args.url is None):
        raise ToolError("give exactly one of 'path' (a workspace file) or 'url'")
    if args.path is not None:
        data = await asyncio.to_thread(ctx.workspace.read_bytes, args.path, max_bytes=_IMAGE_MAX_BYTES, kind="image")
        mime = mimetypes.guess_type(PurePosixPath(args.path).name)[0] or "image/png"
    else:
        result = await ctx.services.fetch(args.url, service="image download", untrusted=True, max_bytes=_IMAGE_MAX_BYTES)
        data = result.body
        mime = result.content_type.split(";")[0] or "image/png"
    if not mime.startswith("image/"):
        raise ToolError(f"{args.path or args.url!r} is {mime}, not an image")
    endpoint = ctx.services.llm_endpoint("image", "media-image__ask_image")
    encoded = base64.b64encode(data).decode()
    return await ctx.services.chat(
        endpoint,
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": args.question},
                    {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}},
                ],
            }
        ],
        tool="media-image__ask_image",
    )


class AudioArgs(Args):
    path: str = Field(description="Audio file in the workspace (mp3, wav, m4a, ...).")
    language: str | None = Field(default=None, description="ISO-639-1 language hint, e.g. 'en'.")


@tool(
    "media-audio",
    "transcribe",
    "Transcribe an audio file from the workspace with a speech model (AUDIO_LLM_*, else MCP_LLM_*; the endpoint's "
    "/audio/transcriptions).",
    AudioArgs,
    missing=_needs_llm("audio", "media-audio__transcribe"),
)
async def transcribe(ctx: ToolContext, args: AudioArgs) -> str:
    import aiohttp

    data = await asyncio.to_thread(ctx.workspace.read_bytes, args.path, kind="audio file")
    name = PurePosixPath(args.path).name
    endpoint = ctx.services.llm_endpoint("audio", "media-audio__transcribe")
    form = aiohttp.FormData()
    form.add_field("model", endpoint.model)
    if args.language:
        form.add_field("language", args.language)
    form.add_field(
        "file", data, filename=name, content_type=mimetypes.guess_type(name)[0] or "application/octet-stream"
    )
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    result = await ctx.services.fetch(
        f"{endpoint.base_url}/audio/transcriptions",
        method="POST",
        service=f"media-audio__transcribe (model {endpoint.model})",
        headers=headers,
        data=form,
        timeout_s=ctx.settings.llm_timeout_s,
    )
    payload = result.json("media-audio__transcribe")
    if "text" not in payload:
        raise ToolError(f"the transcription endpoint answered without 'text': {str(payload)[:200]}")
    return payload["text"]


TOOLS = [think, check_answer, ask_image, transcribe]
