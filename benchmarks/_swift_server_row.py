"""ms-swift server mode's row of ``benchmarks/backends_e2e.py`` (``--backends swift``): what differs from
the other rows, kept here so that script stays one short function per backend.

The demo job (``examples/cpu_grpo_demo/job.yaml``) through ``python -m aworld_core.run --backend
swift`` in ``.venvs/swift-vllm``, as a user launches it: the launch starts ``swift rollout``
(vLLM's CPU build; the episodes run there against the demo's calculator MCP server), runs ``swift
rlhf --vllm_mode server`` (weights synced to the server over TCP before every step) and stops the
server. The demo's GRPO settings (8 prompts x 8 generations, lr 2e-4 linear, no KL, temperature 1,
64 new tokens); its own chat format (``template: chatml`` with the agent template ``aworld_demo``,
``_swift_demo_agent_template.py``: hermes without its tool listing, renders exactly what the demo
model was warm-started on; ms-swift's ``qwen2_5`` adds its default system prompt and lists the tools
in a system block longer than the model's 256 positions, and ``template_backend: jinja``, used here
before, rendered every later turn's id-backed assistant message as the text of its id list). Held-out
accuracy is ms-swift's evaluation of the job's test set (``eval_on_start`` and after the last
step: the mean ``exact_answer`` reward, i.e. the accuracy), read from its ``logging.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venvs" / "swift-vllm" / "bin" / "python"
METRICS_FILE = "swift/logging.jsonl"  # ms-swift's, under the run's output directory, written live
# the demo's chat format under ms-swift's own template backend (the trainer and the rollout server load it)
PLUGIN = Path(__file__).resolve().parent / "_swift_demo_agent_template.py"
AGENT_TEMPLATE = "aworld_demo"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def overrides(steps: int) -> dict[str, Any]:
    """``key=value`` overrides of the demo job for ms-swift server mode (ports picked free now)."""
    swift: dict[str, Any] = {
        "model_type": "qwen2", "template": "chatml", "agent_template": AGENT_TEMPLATE, "tuner_type": "full",
        "external_plugins": f"[{PLUGIN}]", "rollout.external_plugins": f"[{PLUGIN}]",
        "torch_dtype": "float32", "use_vllm": "true", "vllm_mode": "server", "vllm_server_group_port": free_port(),
        "num_generations": 8, "per_device_train_batch_size": 64, "max_completion_length": 64,
        "max_steps": steps, "learning_rate": 2.0e-4, "lr_scheduler_type": "linear", "beta": 0.0,
        "temperature": 1.0, "top_p": 1.0, "top_k": 0, "logging_steps": 1, "save_strategy": "no",
        "dataloader_num_workers": 0, "eval_strategy": "steps", "eval_steps": steps, "eval_on_start": "true",
        "per_device_eval_batch_size": 64,
        "rollout.port": free_port(), "rollout.vllm_max_model_len": 256, "rollout.vllm_enforce_eager": "true",
    }
    return {"rollout.max_turns": 3, **{f"backends.swift.{k}": v for k, v in swift.items()}}


def parse(record: dict[str, Any]) -> tuple[int, float] | None:
    """A training step of ms-swift's ``logging.jsonl`` (evaluations log ``eval_reward`` instead)."""
    if "reward" not in record or "global_step/max_steps" not in record:
        return None
    return int(str(record["global_step/max_steps"]).split("/")[0]), float(record["reward"])


def heldout(log: Path) -> tuple[float | None, float | None]:
    """Held-out accuracy before and after training: ms-swift's first and last ``eval_reward``."""
    evals = []
    if log.is_file():
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "eval_reward" in record:
                evals.append(float(record["eval_reward"]))
    return (evals[0] if evals else None), (evals[-1] if len(evals) > 1 else None)
