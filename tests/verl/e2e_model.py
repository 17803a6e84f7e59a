"""The verl end-to-end test's model: the CPU demo's tokenizer, 0.83 M Qwen2 and warm start, with the recipe
pinned in ``cpu_e2e_reference.json`` (``warm_start``), built once per recipe and demo code.

The warm start is the longest single step of the verl suite (800 steps of batch 64: about 3 min on
an idle 2-core machine, far longer under load), so the result is kept under
``build/test-models/verl-e2e-<key>``: ``<key>`` hashes the recipe and the demo package's
sources, so a change to either builds a new one, and nothing stale is reused. ``make test`` builds it
in the background while the core suite runs (``python tests/verl/e2e_model.py`` in ``.venvs/verl``);
the test builds it itself when it is missing. Written to ``<dir>.building`` and renamed into place,
so an interrupted build is never reused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REFERENCE_FILE = HERE / "cpu_e2e_reference.json"
CACHE_ROOT = REPO / "build" / "test-models"


def recipe() -> dict:
    return json.loads(REFERENCE_FILE.read_text())["warm_start"]


def cache_key() -> str:
    """A hash of the recipe and the demo package's sources (a change in either: a new key)."""
    import aworld_cpu_grpo_demo

    digest = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode())
    package = Path(aworld_cpu_grpo_demo.__file__).resolve().parent
    for source in sorted(package.iterdir()):
        if source.suffix in (".py", ".jinja"):
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def build(path: Path) -> Path:
    """Build the model at ``path`` (staged in ``<path>.building``, then renamed)."""
    import torch

    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer
    from aworld_cpu_grpo_demo.warm_start import warm_start

    spec = recipe()
    staging = path.with_name(path.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(spec["torch_threads"])
    try:
        tokenizer = train_tokenizer(seed=spec["seed"])
        model = new_model(tokenizer, seed=spec["seed"])
        warm_start(model, tokenizer, steps=spec["steps"], batch_size=spec["batch_size"], lr=spec["lr"],
                   seed=spec["seed"], progress=False, tool_first_share=spec["tool_first_share"],
                   copy_rate=spec["copy_rate"])
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(staging)
    save_tokenizer(tokenizer, staging)
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    print(f"verl e2e demo model built in {time.perf_counter() - started:.0f}s: {path}", flush=True)
    return path


def cached_model(root: Path = CACHE_ROOT) -> Path:
    """The model for the current recipe and demo code: reused when built before, else built now."""
    path = root / f"verl-e2e-{cache_key()}"
    if (path / "config.json").exists():
        return path
    return build(path)


if __name__ == "__main__":
    print(cached_model(Path(sys.argv[1]) if len(sys.argv) > 1 else CACHE_ROOT))
