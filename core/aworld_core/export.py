"""Trajectory export: episodes to JSONL and parquet, and back, losslessly.

What is read back equals what was written (as pydantic models): ``None`` stays ``None``, booleans
stay booleans, floats keep every bit (logprobs included), and failed episodes keep their status
and error so a dataset of trajectories shows what went wrong, not just what went right.

* **JSONL**: one episode per line, appended and flushed one at a time (:class:`JsonlEpisodeWriter`),
  so a crash loses at most the episode being written. Non-finite floats are written as Python's
  ``json`` writes them (``NaN``, ``Infinity``) because a ``-inf`` logprob must survive the trip.
* **Parquet**: one row per episode. Queryable columns are typed (ids, ``status``, ``reward``,
  ``rewards`` as a list of ``{name, value}`` structs, the token view as integer/float lists); the
  free-form parts (``steps``, ``messages``, ``metadata``) are JSON text columns, since their dicts
  have no fixed schema. Every column type has a HuggingFace ``datasets`` equivalent, so
  ``datasets.load_dataset("parquet", data_files=...)`` loads the file (arrow maps have none; files
  written with map columns before are still read back).

pyarrow is imported inside the parquet functions (it is the ``data`` extra).
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ValidationError

from aworld_core.errors import UsageError
from aworld_core.schemas import SCHEMA_VERSION, Episode, TrainingView

PARQUET_SCHEMA_KEY = b"aworld.schema_version"
_JSON_COLUMNS = ("steps", "messages", "metadata")
_COUNT_COLUMNS = ("num_steps",)


# ---------------------------------------------------------------------------------------------
# JSON encoding shared by both formats
# ---------------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    raise TypeError(
        f"cannot export a value of type {type(value).__name__} ({value!r:.80}): episode messages and "
        f"metadata must hold JSON values (str, int, float, bool, None, lists, dicts)"
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_json_default, allow_nan=True)


def episode_to_dict(episode: Episode) -> dict[str, Any]:
    """The episode as plain Python values (enums as their string values, models as dicts)."""
    data = episode.model_dump(mode="python")
    data["status"] = episode.status.value
    return data


def episode_to_json(episode: Episode) -> str:
    """One JSONL line (no newline)."""
    return _dumps(episode_to_dict(episode))


def _check_version(data: dict[str, Any], where: str) -> None:
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise UsageError(
            f"{where} was written with trajectory schema version {version}, newer than this "
            f"aworld-core reads ({SCHEMA_VERSION}); upgrade aworld-core to read it"
        )


TASK_RESULT_KEYS = frozenset({"episode", "created_at", "attempts"})


def is_task_result(data: Any) -> bool:
    """Whether a record is a task service ``TaskResult`` (state + task + episode), not an episode."""
    return isinstance(data, dict) and TASK_RESULT_KEYS <= data.keys() and "steps" not in data


def episode_from_dict(data: dict[str, Any], where: str = "record") -> Episode:
    """Validate one exported record back into an :class:`Episode`; errors name ``where``."""
    if not isinstance(data, dict):
        raise UsageError(f"{where} is a {type(data).__name__}, not an episode object")
    if is_task_result(data):
        raise UsageError(
            f"{where} is a task service result (TaskResult: the task's state, the task and its episode, as "
            f"AworldTaskClient.download_trajectories writes them), not an episode; read the file with "
            f"aworld_core.trajectories.read_trajectories(path) (it takes each result's episode and says which "
            f"tasks have none), or process it with: python -m aworld_core.trajectories filter FILE -o DIR"
        )
    _check_version(data, where)
    try:
        return Episode.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise UsageError(f"{where} is not a valid episode: {problems}") from None


# ---------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------


class JsonlEpisodeWriter:
    """Append episodes to a JSONL file one at a time; each line is flushed when written.

    Use as a context manager, or call :meth:`close`. ``append=False`` truncates the file first.
    """

    def __init__(self, path: str | Path, append: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a" if append else "w", encoding="utf-8")
        self.written = 0

    def write(self, episode: Episode) -> None:
        if self._file is None:
            raise UsageError(f"the JSONL writer for '{self.path}' is closed")
        line = episode_to_json(episode)  # encode first: a bad value must not leave half a line
        self._file.write(line + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JsonlEpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_jsonl(path: str | Path, episode: Episode) -> None:
    """Append one episode to ``path`` (opened and closed per call: for occasional writes)."""
    with JsonlEpisodeWriter(path, append=True) as writer:
        writer.write(episode)


def write_jsonl(episodes: Iterable[Episode], path: str | Path, append: bool = False) -> int:
    """Write ``episodes`` to ``path`` (truncating unless ``append``); returns how many."""
    with JsonlEpisodeWriter(path, append=append) as writer:
        for episode in episodes:
            writer.write(episode)
        return writer.written


def iter_jsonl(path: str | Path) -> Iterator[Episode]:
    """Episodes from a JSONL file, one by one; a bad line raises an error naming its number."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"trajectory file '{path}' not found")
    for where, data in json_lines(path):
        yield episode_from_dict(data, where)


def json_lines(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` per non-blank line of a JSONL file; a line that is not JSON raises an
    error naming its number (``where`` is "line N of 'path'", for the caller's own errors)."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"line {number} of '{path}'"
            try:
                yield where, json.loads(line)
            except ValueError as exc:
                raise UsageError(f"{where} is not valid JSON ({exc}); was the file truncated?") from None


def read_jsonl(path: str | Path) -> list[Episode]:
    return list(iter_jsonl(path))


# ---------------------------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------------------------


def _arrow_type(annotation: Any, pa: Any) -> Any:
    """The arrow type of a TrainingView field's annotation (``X | None`` is nullable ``X``)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(inner) == 1:
            return _arrow_type(inner[0], pa)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return pa.list_(_arrow_type(item, pa))
    scalars = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
    if annotation in scalars:
        return scalars[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a nested model (a training segment)
        return pa.struct([pa.field(name, _arrow_type(info.annotation, pa)) for name, info in annotation.model_fields.items()])
    raise TypeError(f"no parquet column type for TrainingView annotation {annotation!r}; extend export._arrow_type")


def parquet_schema() -> Any:
    """The arrow schema of an episode table (``TrainingView`` becomes a typed struct column)."""
    import pyarrow as pa

    training = pa.struct(
        [pa.field(name, _arrow_type(info.annotation, pa)) for name, info in TrainingView.model_fields.items()]
    )
    fields = [
        pa.field("schema_version", pa.int64()),
        pa.field("id", pa.string()),
        pa.field("task_id", pa.string()),
        pa.field("agent_id", pa.string()),
        pa.field("status", pa.string()),
        pa.field("error", pa.string()),
        pa.field("final_answer", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("rewards", pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())]))),
        pa.field("reward_errors", pa.list_(pa.struct([("name", pa.string()), ("error", pa.string())]))),
        pa.field("started_at", pa.float64()),
        pa.field("ended_at", pa.float64()),
        pa.field("num_steps", pa.int64()),
        pa.field("training", training),
        *(pa.field(name, pa.string()) for name in _JSON_COLUMNS),
    ]
    covered = {field.name for field in fields} - set(_COUNT_COLUMNS)
    missing = set(Episode.model_fields) - covered
    if missing:  # a field added to Episode must get a column, or export would drop it
        raise TypeError(f"export.parquet_schema has no column for Episode field(s) {sorted(missing)}")
    return pa.schema(fields, metadata={PARQUET_SCHEMA_KEY: str(SCHEMA_VERSION).encode()})


def _parquet_row(episode: Episode) -> dict[str, Any]:
    data = episode_to_dict(episode)
    row = {key: value for key, value in data.items() if key not in _JSON_COLUMNS}
    row["num_steps"] = len(episode.steps)
    row["rewards"] = [{"name": k, "value": v} for k, v in episode.rewards.items()]
    row["reward_errors"] = [{"name": k, "error": v} for k, v in episode.reward_errors.items()]
    for name in _JSON_COLUMNS:
        row[name] = _dumps(data[name])
    return row


def _episode_from_row(row: dict[str, Any], where: str) -> Episode:
    data = {key: value for key, value in row.items() if key not in _COUNT_COLUMNS}
    for name, field in (("rewards", "value"), ("reward_errors", "error")):
        items = data.get(name)
        if isinstance(items, list):  # {name, value} structs; files from before: a map's (key, value) pairs
            data[name] = {item["name"]: item[field] for item in items} if items and isinstance(items[0], dict) \
                else dict(items)
    for name in _JSON_COLUMNS:
        if data.get(name) is not None:
            data[name] = json.loads(data[name])
    return episode_from_dict(data, where)


class ParquetEpisodeWriter:
    """Write episodes to a parquet file in row groups of ``batch_size`` (streaming, bounded memory)."""

    def __init__(self, path: str | Path, batch_size: int = 256):
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.schema = parquet_schema()
        self.batch_size = max(1, batch_size)
        self._rows: list[dict[str, Any]] = []
        self._writer: Any = pq.ParquetWriter(str(self.path), self.schema)
        self.written = 0

    def write(self, episode: Episode) -> None:
        if self._writer is None:
            raise UsageError(f"the parquet writer for '{self.path}' is closed")
        self._rows.append(_parquet_row(episode))
        self.written += 1
        if len(self._rows) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self.schema))
            self._rows = []

    def close(self) -> None:
        if self._writer is not None:
            self._flush()
            self._writer.close()
            self._writer = None

    def __enter__(self) -> ParquetEpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_parquet(episodes: Iterable[Episode], path: str | Path, batch_size: int = 256) -> int:
    """Write ``episodes`` to a parquet file (replacing it); returns how many."""
    with ParquetEpisodeWriter(path, batch_size=batch_size) as writer:
        for episode in episodes:
            writer.write(episode)
        return writer.written


def iter_parquet(path: str | Path) -> Iterator[Episode]:
    """Episodes from a parquet file written by :func:`write_parquet`, row group by row group."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"trajectory file '{path}' not found")
    try:
        handle = pq.ParquetFile(str(path))
    except Exception as exc:  # pyarrow raises its own ArrowInvalid
        raise UsageError(f"'{path}' is not a readable parquet file: {exc}") from None
    metadata = handle.schema_arrow.metadata or {}
    if PARQUET_SCHEMA_KEY not in metadata:
        raise UsageError(
            f"'{path}' was not written by aworld_core.export (no {PARQUET_SCHEMA_KEY.decode()} "
            f"metadata); write it with write_parquet"
        )
    _check_version({"schema_version": int(metadata[PARQUET_SCHEMA_KEY])}, f"'{path}'")
    index = 0
    for group in range(handle.num_row_groups):
        for row in handle.read_row_group(group).to_pylist():
            yield _episode_from_row(row, f"row {index} of '{path}'")
            index += 1


def read_parquet(path: str | Path) -> list[Episode]:
    return list(iter_parquet(path))


# ---------------------------------------------------------------------------------------------
# By file suffix
# ---------------------------------------------------------------------------------------------


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise UsageError(f"cannot tell the trajectory format of '{path}': use a .jsonl or .parquet file name")


def write_episodes(episodes: Iterable[Episode], path: str | Path) -> int:
    """Write to ``.jsonl`` or ``.parquet`` by the file's suffix."""
    path = Path(path)
    if _format_of(path) == "jsonl":
        return write_jsonl(episodes, path)
    return write_parquet(episodes, path)


def read_episodes(path: str | Path) -> list[Episode]:
    """Read a ``.jsonl`` or ``.parquet`` trajectory file."""
    path = Path(path)
    return read_jsonl(path) if _format_of(path) == "jsonl" else read_parquet(path)
