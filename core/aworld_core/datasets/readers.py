"""Reading raw rows (plain dicts) from local files and HuggingFace datasets.

Rows are normalized into ``Sample``\\ s elsewhere (``normalize.py``); this module only gets
them out of their container. pyarrow and ``datasets`` are imported inside the functions that
need them.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
from pathlib import Path
from typing import Any

from aworld_core.errors import DatasetError

FORMATS = ("jsonl", "json", "parquet", "csv")
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
}


def detect_format(path: Path, format: str = "auto") -> str:
    """The file format: ``format`` when given, else from the suffix."""
    if format != "auto":
        if format not in FORMATS:
            raise DatasetError(f"unknown dataset format '{format}'; use one of: auto, {', '.join(FORMATS)}")
        return format
    found = _SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise DatasetError(
            f"cannot tell the format of '{path}' from its suffix '{path.suffix}'; name it "
            f"{', '.join(sorted(_SUFFIXES))} or set format: one of {', '.join(FORMATS)}"
        )
    return found


def read_rows(path: str | Path, format: str = "auto", limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of a JSONL, JSON, parquet or CSV file, as dicts (at most ``limit`` of them)."""
    path = Path(path)
    if not path.is_file():
        where = "a directory, not a file" if path.is_dir() else "not found"
        raise DatasetError(f"dataset file '{path}' is {where}; give a JSONL, JSON, parquet or CSV file")
    kind = detect_format(path, format)
    if kind == "jsonl":
        rows = _read_jsonl(path, limit)
    elif kind == "json":
        rows = _read_json(path)
    elif kind == "parquet":
        rows = _read_parquet(path, limit)
    else:
        rows = _read_csv(path, limit)
    if rows:
        _refuse_trajectories(path, rows[0])
    return rows[:limit] if limit is not None else rows


def _refuse_trajectories(path: Path, row: dict[str, Any]) -> None:
    """A trajectory file is not a dataset: its ``messages`` hold the answers, so reading its rows
    as prompts would hand the model what it should find (episodes, task service results)."""
    from aworld_core.export import is_task_result

    if is_task_result(row):
        what = "task service results (download_trajectories)"
    elif {"steps", "task_id", "agent_id", "status"} <= row.keys():
        what = "episodes (an export, a training run's trajectories or an evaluation output)"
    else:
        return
    raise DatasetError(
        f"dataset file '{path}' holds {what}, not dataset rows: their messages include the answers. Train on "
        f"trajectories with SFT (the job's sft: section; python -m aworld_core.trajectories filter), see "
        f"docs/trajectories-sft.md; for a dataset give the original rows"
    )


def _read_jsonl(path: Path, limit: int | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                bad.append(f"  line {number}: not valid JSON ({exc})")
                continue
            if not isinstance(value, dict):
                bad.append(f"  line {number}: a {type(value).__name__}, not an object")
                continue
            rows.append(value)
    if bad:
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise DatasetError(
            f"dataset file '{path}' has {len(bad)} unreadable line(s); each line must be one JSON "
            f"object:\n" + "\n".join(bad[:20]) + more
        )
    return rows


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DatasetError(f"dataset file '{path}' is not valid JSON: {exc}") from None
    if isinstance(value, dict):  # {"data": [...]}: one key holding the rows
        lists = [item for item in value.values() if isinstance(item, list)]
        if len(lists) == 1:
            value = lists[0]
    if not isinstance(value, list):
        raise DatasetError(
            f"dataset file '{path}' must hold a JSON list of row objects (or an object with one "
            f"list of them), not a {type(value).__name__}"
        )
    bad = [index for index, row in enumerate(value) if not isinstance(row, dict)]
    if bad:
        shown = ", ".join(str(index) for index in bad[:20]) + (" ..." if len(bad) > 20 else "")
        raise DatasetError(f"dataset file '{path}': entries {shown} are not JSON objects (rows must be objects)")
    return value


def _read_parquet(path: Path, limit: int | None) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError("reading parquet needs pyarrow: pip install 'aworld-core[data]'") from None
    try:
        handle = pq.ParquetFile(str(path))
        if limit is None:
            return handle.read().to_pylist()
        rows: list[dict[str, Any]] = []
        for batch in handle.iter_batches(batch_size=min(limit, 1024)):
            rows.extend(batch.to_pylist())
            if len(rows) >= limit:
                break
        return rows
    except Exception as exc:  # pyarrow's ArrowInvalid and friends
        raise DatasetError(f"dataset file '{path}' is not a readable parquet file: {exc}") from None


def _read_csv(path: Path, limit: int | None) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise DatasetError(f"dataset file '{path}' has no header row; the first CSV line must name the columns")
        rows: list[dict[str, Any]] = []
        for row in itertools.islice(reader, limit):
            if None in row:  # more cells than header names
                raise DatasetError(
                    f"dataset file '{path}', row {len(rows)}: {len(row[None]) + len(reader.fieldnames)} "
                    f"cells for {len(reader.fieldnames)} columns; quote cells that hold commas"
                )
            # an empty cell is a missing value, not an empty string
            rows.append({key: (value if value != "" else None) for key, value in row.items()})
        return rows


# ---------------------------------------------------------------------------------------------
# HuggingFace datasets
# ---------------------------------------------------------------------------------------------


def is_hf_dataset(obj: Any) -> bool:
    """A ``datasets`` Dataset, IterableDataset or DatasetDict (checked without importing datasets)."""
    module = type(obj).__module__ or ""
    return module.startswith("datasets.")


def rows_from_hf(obj: Any, split: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a HuggingFace dataset object; a ``DatasetDict`` needs ``split``."""
    if isinstance(obj, dict):  # DatasetDict / IterableDatasetDict
        splits = list(obj.keys())
        if split is None:
            if len(splits) != 1:
                raise DatasetError(f"the dataset has splits {splits}; choose one with split:")
            split = splits[0]
        if split not in obj:
            raise DatasetError(f"the dataset has no split '{split}'; it has {splits}")
        obj = obj[split]
    if hasattr(obj, "select") and hasattr(obj, "__len__"):  # map-style Dataset
        if limit is not None:
            obj = obj.select(range(min(limit, len(obj))))
        return list(obj.to_list())
    return [dict(row) for row in itertools.islice(iter(obj), limit)]  # IterableDataset


def hub_offline() -> bool:
    """Whether the user told HuggingFace libraries to stay offline."""
    return any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def rows_from_hub(
    name: str, split: str | None = None, config: str | None = None, limit: int | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """Rows of a dataset on the HuggingFace hub (downloads it; refused when the hub is offline)."""
    if hub_offline():
        raise DatasetError(
            f"dataset '{name}' would be downloaded from the HuggingFace hub, but the hub is offline "
            f"(HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set); give a local file with path: instead"
        )
    try:
        import datasets
    except ImportError:
        raise DatasetError("loading a hub dataset needs the datasets library: pip install 'aworld-core[data]'") from None
    try:
        loaded = datasets.load_dataset(name, config, split=split or "train", **kwargs)
    except Exception as exc:  # network, auth, unknown name: all say why in their text
        raise DatasetError(
            f"could not load dataset '{name}' (config {config!r}, split {split or 'train'!r}) from the "
            f"HuggingFace hub: {type(exc).__name__}: {exc}"
        ) from exc
    return rows_from_hf(loaded, split=None, limit=limit)
