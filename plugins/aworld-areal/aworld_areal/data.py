"""Dataset rows between the job's ``Sample``\\ s and AReaL's dataloader.

AReaL ships each row to a rollout worker as ``data``. A ``Sample`` travels as one JSON column:
its ``ground_truth`` and ``extra_info`` are free-form, which an Arrow table (a HuggingFace
``Dataset``) cannot hold as typed columns when rows differ. Rows in AReaL's own shape (e.g. its
GSM8K loader's ``messages`` + ``answer``) are normalized by the core's dataset rules instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aworld_core.errors import DatasetError
from aworld_core.schemas import Sample

SAMPLE_COLUMN = "aworld_sample"


def sample_rows(samples: Iterable[Sample]) -> list[dict[str, str]]:
    return [{"id": s.id, SAMPLE_COLUMN: s.model_dump_json()} for s in samples]


def hf_dataset(samples: Iterable[Sample]) -> Any:
    """A HuggingFace ``Dataset`` (what ``PPOTrainer`` takes) of the samples."""
    from datasets import Dataset

    rows = sample_rows(samples)
    if not rows:
        raise DatasetError("the dataset is empty; AReaL needs at least one batch of rows")
    return Dataset.from_list(rows)


def sample_from_row(data: Mapping[str, Any] | Sample, *, source: str = "areal") -> Sample:
    """The ``Sample`` of one row AReaL hands to ``arun_episode``."""
    if isinstance(data, Sample):
        return data
    if not isinstance(data, Mapping):
        raise DatasetError(f"AReaL passed a {type(data).__name__} as an episode's data; expected a dict row")
    packed = data.get(SAMPLE_COLUMN)
    if packed is not None:
        return Sample.model_validate_json(packed) if isinstance(packed, (str, bytes)) else Sample.model_validate(packed)
    from aworld_core.datasets import rows_to_samples

    return rows_to_samples([dict(data)], source=source, require_ground_truth=False)[0]
