"""media-video through the endpoint: keyframes, transcription and description of a video made here
with ffmpeg, ffmpeg running in the episode's sandbox, the models being the loopback fakes."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from gaia_env.conftest import call, connect, text_of, upload

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg (make sysdeps)")


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("videos")
    base = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=duration=3:size=320x240:rate=10"]
    subprocess.run(
        [*base, "-f", "lavfi", "-i", "sine=frequency=440:duration=3", "-g", "10", "-c:v", "mpeg4", "-c:a", "aac",
         "-shortest", str(out / "clip.mp4")],
        check=True,
    )
    subprocess.run([*base, "-g", "10", "-c:v", "mpeg4", str(out / "silent.mp4")], check=True)
    return {name: (out / name).read_bytes() for name in ("clip.mp4", "silent.mp4")}


async def test_keyframes_are_images_with_times(env_server, videos):
    await upload(env_server, "ep-video", "clip.mp4", videos["clip.mp4"])
    async with connect(env_server, episode="ep-video", servers="media-video-server") as client:
        result = await client.call_tool("media-video__keyframes", {"path": "clip.mp4", "count": 3})
    assert not result.is_error, text_of(result)
    assert "3 keyframes of clip.mp4 at 0.00 s, 1.00 s, 2.00 s" in text_of(result)
    images = result.content[1:]
    assert len(images) == 3 and all(i.mime_type == "image/jpeg" for i in images)
    assert base64.b64decode(images[0].data)[:2] == b"\xff\xd8"
    leftovers = list((Path(env_server.workspace_root) / "ep-video" / ".sandbox").glob("kf-*"))
    assert leftovers == []


async def test_transcription_of_the_audio_track(env_server, fakes, videos):
    await upload(env_server, "ep-video2", "clip.mp4", videos["clip.mp4"])
    await upload(env_server, "ep-video2", "silent.mp4", videos["silent.mp4"])
    text, err = await call(env_server, "media-video__transcribe", {"path": "clip.mp4"}, episode="ep-video2")
    assert not err and text.startswith("transcript of clip.mp4.mp3 (") and "by shared-model" in text
    text, err = await call(env_server, "media-video__transcribe", {"path": "silent.mp4"}, episode="ep-video2")
    assert err and "no audio track" in text


async def test_description_through_the_vision_model(env_server, fakes, videos):
    await upload(env_server, "ep-video3", "clip.mp4", videos["clip.mp4"])
    text, err = await call(
        env_server, "media-video__describe", {"path": "clip.mp4", "question": "What is shown?", "frames": 2}, episode="ep-video3"
    )
    assert not err and "image data:image/jpeg" in text and "What is shown?" in text
    content = json.loads(fakes.seen("/llm/v1/chat/completions")[-1]["body"])["messages"][0]["content"]
    assert sum(1 for part in content if part["type"] == "image_url") == 2
    assert "keyframes of the video at 0.00 s" in content[0]["text"]


async def test_bad_inputs_are_clear_errors(env_server, videos):
    await upload(env_server, "ep-video4", "notes.txt", b"not a video")
    text, err = await call(env_server, "media-video__keyframes", {"path": "notes.txt"}, episode="ep-video4")
    assert err and "ffmpeg failed" in text
    text, err = await call(env_server, "media-video__keyframes", {"path": "../x.mp4"}, episode="ep-video4")
    assert err and "outside the workspace" in text
    text, err = await call(env_server, "media-video__keyframes", {"path": "missing.mp4"}, episode="ep-video4")
    assert err and "not found" in text
