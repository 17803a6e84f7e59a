"""media-video: keyframes, audio transcription and a description of a video in the workspace.

ffmpeg (Debian's package) parses the video inside the episode's sandbox (bubblewrap, the episode's
uid, no network, the sandbox's CPU/memory limits): a crafted video attacks a process that sees only
the workspace. Its outputs go to the workspace's hidden scratch directory and are read back and
removed by the race-free workspace reader. Transcription and description go to the configured
OpenAI-compatible models, like media-audio (``AUDIO_LLM_*``) and media-image (``IMAGE_LLM_*``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import secrets
import shutil

from pydantic import Field

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools.base import Args, ToolContext, ToolOutput, tool
from aworld_gaia_env.tools.llm_tools import _needs_llm
from aworld_gaia_env.workspace import SCRATCH, Workspace

SERVER = "media-video"
_PTS = re.compile(r"pts_time:([0-9.]+)")
_MAX_KEYFRAMES = 60


def _ffmpeg() -> str | None:
    return shutil.which("ffmpeg") or (os.path.exists("/usr/bin/ffmpeg") and "/usr/bin/ffmpeg") or None


def _needs_ffmpeg(settings: GaiaEnvSettings) -> ToolError | None:
    if _ffmpeg() is None:
        return ToolError("media-video needs ffmpeg: apt-get install -y ffmpeg (make sysdeps installs it)")
    return None


def _needs(role: str, tool_name: str):  # type: ignore[no-untyped-def]
    llm = _needs_llm(role, tool_name)

    def check(settings: GaiaEnvSettings) -> ToolError | None:
        return _needs_ffmpeg(settings) or llm(settings)

    return check


async def _run_ffmpeg(ctx: ToolContext, args: list[str]) -> str:
    """ffmpeg in the episode's sandbox; its stderr (ffmpeg logs there)."""
    result = await ctx.services.sandbox.run([_ffmpeg() or "ffmpeg", "-hide_banner", "-nostdin", *args], ctx.workspace)
    if result.timed_out or result.exit_code != 0:
        tail = result.stderr.strip().splitlines()[-3:]
        raise ToolError(f"ffmpeg failed on the video ({result.limit_note or f'exit {result.exit_code}'}): {' | '.join(tail)}")
    return result.stderr


def _video_path(ctx: ToolContext, path: str) -> str:
    with ctx.workspace.open_file(path, "video") as (_, rel):  # exists, a regular file, no links
        return str(ctx.workspace.path / rel)


def _take(workspace: Workspace, prefix: str) -> list[tuple[str, bytes]]:
    """The scratch files named ``prefix*`` (sorted), read and removed."""
    directory = workspace.path / SCRATCH
    names = sorted(n for n in os.listdir(directory) if n.startswith(prefix)) if directory.is_dir() else []
    out = []
    for name in names:
        out.append((name, workspace.read_bytes(f"{SCRATCH}/{name}")))
        with contextlib.suppress(OSError):
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)
    return out


async def _keyframes(ctx: ToolContext, path: str, count: int) -> list[tuple[float, bytes]]:
    source = _video_path(ctx, path)
    ctx.workspace.add_file(f"{SCRATCH}/.keep", b"")  # the scratch directory, made root-side and owned by the episode
    prefix = f"kf-{secrets.token_hex(4)}-"
    stderr = await _run_ffmpeg(
        ctx,
        ["-loglevel", "info", "-skip_frame", "nokey", "-i", source, "-an", "-vsync", "vfr",
         "-vf", "scale='min(640,iw)':-2,showinfo", "-frames:v", str(_MAX_KEYFRAMES), "-q:v", "4",
         str(ctx.workspace.path / SCRATCH / f"{prefix}%03d.jpg")],
    )
    times = [float(t) for t in _PTS.findall(stderr)]
    frames = await asyncio.to_thread(_take, ctx.workspace, prefix)
    if not frames:
        raise ToolError(f"{path!r} has no video frames ffmpeg could decode")
    pairs = [(times[i] if i < len(times) else 0.0, data) for i, (_, data) in enumerate(frames)]
    if len(pairs) > count:  # evenly spread over the video
        step = len(pairs) / count
        pairs = [pairs[int(i * step)] for i in range(count)]
    return pairs


class KeyframesArgs(Args):
    path: str = Field(description="Video file in the workspace (mp4, webm, mkv, mov, ...).")
    count: int = Field(default=6, ge=1, le=20, description="How many keyframes, spread over the video.")


@tool(SERVER, "keyframes", "Keyframes of a video in the workspace as images, with their times.", KeyframesArgs,
      missing=_needs_ffmpeg)
async def keyframes(ctx: ToolContext, args: KeyframesArgs) -> ToolOutput:
    frames = await _keyframes(ctx, args.path, args.count)
    times = ", ".join(f"{t:.2f} s" for t, _ in frames)
    return ToolOutput(
        f"{len(frames)} keyframes of {args.path} at {times}",
        tuple((base64.b64encode(data).decode(), "image/jpeg") for _, data in frames),
    )


class TranscribeArgs(Args):
    path: str = Field(description="Video file in the workspace.")
    language: str | None = Field(default=None, description="ISO-639-1 language hint, e.g. 'en'.")


@tool(SERVER, "transcribe", "Transcribe the audio track of a video with the speech model (AUDIO_LLM_*, else MCP_LLM_*).",
      TranscribeArgs, missing=_needs("audio", "media-video__transcribe"))
async def transcribe(ctx: ToolContext, args: TranscribeArgs) -> str:
    import aiohttp

    source = _video_path(ctx, args.path)
    ctx.workspace.add_file(f"{SCRATCH}/.keep", b"")
    prefix = f"audio-{secrets.token_hex(4)}"
    try:
        await _run_ffmpeg(ctx, ["-loglevel", "error", "-i", source, "-vn", "-ac", "1", "-ar", "16000", "-b:a", "48k",
                                str(ctx.workspace.path / SCRATCH / f"{prefix}.mp3")])
    except ToolError as exc:
        if "does not contain any stream" in str(exc) or "matches no streams" in str(exc):
            raise ToolError(f"{args.path!r} has no audio track to transcribe") from None
        raise
    audio = await asyncio.to_thread(_take, ctx.workspace, prefix)
    if not audio:
        raise ToolError(f"{args.path!r} has no audio track to transcribe")
    endpoint = ctx.services.llm_endpoint("audio", "media-video__transcribe")
    form = aiohttp.FormData()
    form.add_field("model", endpoint.model)
    if args.language:
        form.add_field("language", args.language)
    form.add_field("file", audio[0][1], filename=os.path.basename(args.path) + ".mp3", content_type="audio/mpeg")
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    result = await ctx.services.fetch(
        f"{endpoint.base_url}/audio/transcriptions", method="POST", service=f"media-video__transcribe (model {endpoint.model})",
        headers=headers, data=form, timeout_s=ctx.settings.llm_timeout_s,
    )
    payload = result.json("media-video__transcribe")
    if "text" not in payload:
        raise ToolError(f"the transcription endpoint answered without 'text': {str(payload)[:200]}")
    return payload["text"]


class DescribeArgs(Args):
    path: str = Field(description="Video file in the workspace.")
    question: str = Field(default="Describe what happens in this video, including any text shown.",
                          description="What to ask about the video.")
    frames: int = Field(default=6, ge=1, le=16, description="Keyframes the vision model sees.")


@tool(SERVER, "describe", "Ask a vision model about a video through its keyframes (IMAGE_LLM_*, else MCP_LLM_*).",
      DescribeArgs, missing=_needs("image", "media-video__describe"))
async def describe(ctx: ToolContext, args: DescribeArgs) -> str:
    frames = await _keyframes(ctx, args.path, args.frames)
    endpoint = ctx.services.llm_endpoint("image", "media-video__describe")
    times = ", ".join(f"{t:.2f} s" for t, _ in frames)
    content: list[dict[str, object]] = [
        {"type": "text", "text": f"{args.question}\n(The images are keyframes of the video at {times}.)"}
    ]
    content += [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(data).decode()}}
        for _, data in frames
    ]
    return await ctx.services.chat(endpoint, [{"role": "user", "content": content}], tool="media-video__describe")


TOOLS = [keyframes, transcribe, describe]
