"""Test instrumentation for AReaL's trainer process (tests/areal/test_trainer_cpu.py), loaded only
where a test puts this folder on ``PYTHONPATH`` and sets ``AWORLD_TEST_RECORD_BATCHES``.

It records what AReaL's own PPO actor computes advantages on, per row of every step's batch (the
group layout, rewards, loss-mask sizes, the rows' prompt tokens), so a test can check the real
trainer's batch from outside its process. Nothing is changed: the actor's method runs as it is.
It hooks in when ``areal.trainer.ppo.actor`` is first imported (other processes never import it).
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys

TARGET = "areal.trainer.ppo.actor"
_PATH = os.environ.get("AWORLD_TEST_RECORD_BATCHES")


def _record(module) -> None:
    import functools

    original = module.PPOActor._compute_advantages

    @functools.wraps(original)
    def recording(self, data):
        rewards = data["rewards"].tolist()
        mask_sizes = data["loss_mask"].sum(-1).tolist()
        lengths = data["attention_mask"].sum(-1).tolist()
        ids = data["input_ids"].tolist()
        prompts = [row[:8] for row in ids]  # a group's rows share their prompt
        result = original(self, data)
        with open(_PATH, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"rewards": rewards, "loss_mask_sizes": mask_sizes, "prompts": prompts,
                                     "lengths": lengths}) + "\n")
        return result

    module.PPOActor._compute_advantages = recording


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_record(module):
            exec_module(module)
            _record(module)

        loader.exec_module = exec_and_record
        return spec


if _PATH:
    import importlib.util

    sys.meta_path.insert(0, _Finder())
