"""aworld-verl: train AWorld agents and swarms with verl 0.9.1.

verl is imported lazily: this package imports (and ``--list`` works) without verl installed.
``AworldAgentLoop`` (which subclasses verl's ``AgentLoopBase``) is loaded on first access.
"""

from __future__ import annotations

from aworld_core import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "AworldAgentLoop": "aworld_verl.agent_loop",
    "VerlTokenEngine": "aworld_verl.engine",
    "compute_score": "aworld_verl.reward",
    "episode_counts": "aworld_verl.worker_state",
    "aworld_replay_buffer": "aworld_verl.sampler",
    "sampling_from_verl": "aworld_verl.sampling",
    "verl_sampling_params": "aworld_verl.sampling",
    "to_verl_rows": "aworld_verl.rows",
    "write_parquet": "aworld_verl.rows",
    "sample_from_row": "aworld_verl.rows",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
