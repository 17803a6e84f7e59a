"""download__gaia_attachment: put a GAIA task's attached file into the episode's workspace.

The environment reads attachments from its own copy of GAIA (``GAIA_DIR``), so an agent whose
runner cannot send ``X-Gaia-Task-Id`` (or upload the file) still gets its file, by the name the
question gives. GAIA names attachments by task id, so names do not collide across tasks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from aworld_gaia_env.errors import MissingConfigError, ToolError
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools.base import Args, ToolContext, tool

_INDEX: dict[str, dict[str, str]] = {}


def _needs_gaia_dir(settings: GaiaEnvSettings) -> ToolError | None:
    if settings.gaia_dir is None:
        return MissingConfigError("download__gaia_attachment", ["GAIA_DIR (a local copy of the GAIA dataset)"])
    return None


def attachments_by_name(gaia_dir: Path) -> dict[str, str]:
    key = str(gaia_dir)
    if key not in _INDEX:
        from aworld_gaia_env.data import attachment_index

        _INDEX[key] = {Path(path).name: path for path in attachment_index(gaia_dir).values()}
    return _INDEX[key]


class AttachmentArgs(Args):
    file_name: str = Field(description="The attachment's file name as the question gives it.")


@tool(
    "download",
    "gaia_attachment",
    "Copy the file attached to a GAIA task into the episode's workspace (by the file name the question gives).",
    AttachmentArgs,
    missing=_needs_gaia_dir,
)
async def gaia_attachment(ctx: ToolContext, args: AttachmentArgs) -> str:
    assert ctx.settings.gaia_dir is not None
    index = await asyncio.to_thread(attachments_by_name, ctx.settings.gaia_dir)
    source = index.get(Path(args.file_name).name)
    if source is None:
        raise ToolError(f"no GAIA attachment named {args.file_name!r} in this environment's GAIA_DIR")
    rel, size = await asyncio.to_thread(ctx.workspace.copy_in, Path(source))
    return f"{rel} is in the workspace ({size} bytes)"


TOOLS = [gaia_attachment]
