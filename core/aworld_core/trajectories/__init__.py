"""From collected trajectories to SFT data: read, filter, split and convert episodes.

``read_trajectories`` (exported episodes, evaluation outputs, task service downloads),
``filter_episodes`` + ``FilterSpec`` (status, reward, turns, tool use, truncation, length, dedupe,
best-of-n; a report of what was dropped and why), ``split_by_task``, and the converters
(``token_rows``: token-exact; ``messages_rows``; a backend's own rows by name: ``convert``). The CLI is
``python -m aworld_core.trajectories``. Nothing here imports torch or transformers.
"""

from __future__ import annotations

from aworld_core.lazy import lazy_exports

_EXPORTS = {
    "Collection": "aworld_core.trajectories.read",
    "read_trajectories": "aworld_core.trajectories.read",
    "task_key": "aworld_core.trajectories.read",
    "FilterReport": "aworld_core.trajectories.filter",
    "FilterSpec": "aworld_core.trajectories.filter",
    "filter_episodes": "aworld_core.trajectories.filter",
    "split_by_task": "aworld_core.trajectories.filter",
    "FORMATS": "aworld_core.trajectories.convert",
    "TokenizerMismatchError": "aworld_core.trajectories.convert",
    "check_tokenizer": "aworld_core.trajectories.convert",
    "convert": "aworld_core.trajectories.convert",
    "format_names": "aworld_core.trajectories.convert",
    "messages_rows": "aworld_core.trajectories.convert",
    "read_tools": "aworld_core.trajectories.convert",
    "token_rows": "aworld_core.trajectories.convert",
    "write_job_sft_data": "aworld_core.trajectories.convert",
    "write_rows": "aworld_core.trajectories.convert",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__
