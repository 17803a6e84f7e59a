"""Reading collected trajectories, whatever wrote them, as ``Episode``\\ s.

Three sources hold episodes:

* exported episode files (``aworld_core.export``: JSONL or parquet) — training runs'
  ``trajectories.jsonl`` and evaluation outputs (``eval.jsonl``, ``eval_before.jsonl``) are these;
* task service downloads (``AworldTaskClient.download_trajectories``): JSONL of ``TaskResult``
  (state + task + episode). Each result's episode is taken; the task's ``metadata.sample_id`` (when
  set) is copied to the episode's metadata, so several tasks for one dataset row group together;
  a result without an episode (the task failed before its agent ran) is reported, not dropped
  silently.

Each line or row is recognised by its own fields, so one call can read a mix of files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aworld_core.errors import UsageError
from aworld_core.export import PARQUET_SCHEMA_KEY, episode_from_dict, is_task_result, iter_parquet, json_lines
from aworld_core.schemas import Episode, TaskResult

SAMPLE_ID = "sample_id"  # metadata key naming the dataset row several episodes came from


@dataclass
class Collection:
    """What was read: the episodes and the task results that carried none."""

    episodes: list[Episode] = field(default_factory=list)
    without_episode: list[str] = field(default_factory=list)  # "task_id (status: error)"
    sources: dict[str, int] = field(default_factory=dict)  # file -> episodes read from it


def task_key(episode: Episode) -> str:
    """The task an episode answered, for best-of-n, dedupe and the train/val split: the dataset
    row's id when recorded (``metadata.sample_id``), else the episode's ``task_id``."""
    value = episode.metadata.get(SAMPLE_ID)
    return str(value) if value is not None else episode.task_id


def _from_task_result(data: dict[str, Any], where: str, out: Collection) -> Episode | None:
    try:
        result = TaskResult.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise UsageError(f"{where} looks like a task service result but is not a valid one: {problems}") from None
    if result.episode is None:
        out.without_episode.append(f"{result.task_id} ({result.status.value}: {result.error or 'no trajectory'})")
        return None
    episode = result.episode
    sample_id = (result.task.metadata.get(SAMPLE_ID) if result.task is not None else None)
    if sample_id is not None and SAMPLE_ID not in episode.metadata:
        episode = episode.model_copy(update={"metadata": {**episode.metadata, SAMPLE_ID: sample_id}})
    return episode


def _read_jsonl(path: Path, out: Collection) -> int:
    count = 0
    for where, data in json_lines(path):
        if not isinstance(data, dict):
            raise UsageError(f"{where} is a {type(data).__name__}, not an episode or task result object")
        if is_task_result(data):
            episode = _from_task_result(data, where, out)
        elif "steps" in data or "schema_version" in data:
            episode = episode_from_dict(data, where)
        else:
            raise UsageError(
                f"{where} is neither an episode (aworld_core.export, evaluation output) nor a task service "
                f"result (download_trajectories); its keys are {sorted(data)[:12]}. Is this a dataset or an "
                f"already converted training file?"
            )
        if episode is not None:
            out.episodes.append(episode)
            count += 1
    return count


def _read_parquet(path: Path, out: Collection) -> int:
    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(str(path)).schema_arrow.metadata or {}
    except Exception as exc:  # pyarrow's ArrowInvalid
        raise UsageError(f"'{path}' is not a readable parquet file: {exc}") from None
    if PARQUET_SCHEMA_KEY not in metadata:
        raise UsageError(
            f"'{path}' is a parquet file but not an episode export (no {PARQUET_SCHEMA_KEY.decode()} metadata); "
            f"trajectories are read from aworld_core.export files or task service downloads (JSONL)"
        )
    before = len(out.episodes)
    out.episodes.extend(iter_parquet(path))
    return len(out.episodes) - before


def read_trajectories(paths: str | Path | Sequence[str | Path]) -> Collection:
    """Episodes from exported episode files, evaluation outputs and task service downloads.

    ``paths``: files (``.jsonl``/``.ndjson``/``.json`` lines, ``.parquet``) or directories (their
    ``*.jsonl`` and ``*.parquet`` files). A bad file or record raises ``UsageError`` naming it.
    """
    items: Iterable[str | Path] = [paths] if isinstance(paths, (str, Path)) else paths
    out = Collection()
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = sorted([*path.glob("*.jsonl"), *path.glob("*.parquet")])
            if not found:
                raise UsageError(f"directory '{path}' holds no .jsonl or .parquet trajectory files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"trajectory file '{path}' not found")
    if not files:
        raise UsageError("no trajectory files given")
    for path in files:
        suffix = path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            count = _read_parquet(path, out)
        elif suffix in (".jsonl", ".ndjson", ".json"):
            count = _read_jsonl(path, out)
        else:
            raise UsageError(f"cannot tell the format of '{path}': trajectory files are .jsonl or .parquet")
        out.sources[str(path)] = count
    return out
