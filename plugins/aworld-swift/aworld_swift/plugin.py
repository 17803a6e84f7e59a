"""aworld-swift's registration: the ``swift`` backend (ms-swift multi-turn GRPO), one object.

Planning imports nothing heavy (``--list`` and ``--dry-run`` work without ms-swift installed);
launching converts the data and runs ``swift rlhf`` (see :mod:`aworld_swift.launch`).
"""

from __future__ import annotations

from aworld_core.hookspecs import hookimpl
from aworld_core.specs import SAMPLING_FIELDS, Backend, Capabilities

NAME = "swift"


@hookimpl
def register_backends() -> list[Backend]:
    return [
        Backend(
            NAME,
            "ms-swift multi-turn GRPO (on a CPU: transformers generation, or vLLM's CPU build colocated or "
            "as a `swift rollout` server, vllm_mode server; vLLM on GPUs)",
            planner="aworld_swift.launch:build_plan",
            launcher="aworld_swift.launch:launch",
            sft_planner="aworld_swift.sft:build_sft_plan",
            sft_launcher="aworld_swift.sft:launch_sft",
            framework="swift",
            install_hint="pip install 'aworld-swift[swift]' (in its own environment: ms-swift pins trl<1.0)",
            # segments: one batch row per training segment (aworld_swift.segments)
            capabilities=Capabilities(sampling=SAMPLING_FIELDS, segments=True),
            formats={"swift": "aworld_swift.sft_rows:sft_rows"},  # ms-swift agent JSONL
        )
    ]
