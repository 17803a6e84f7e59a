"""``AworldGRPOTrainer``: TRL's ``GRPOTrainer``, recording each batch's rows for the rollout.

TRL hands ``rollout_func`` only the prompts. The aworld rollout needs the whole row (the sample
id names the task, its ground truth and extra info, which the prompt text cannot carry without
ambiguity), so the trainer keeps the rows of the batch it is generating for. Once TRL has built
the batch, an episode's later training segments are added as rows of their own
(:mod:`aworld_trl.segments`). Nothing else of TRL's behaviour changes.
"""

from __future__ import annotations

from typing import Any


def trainer_class() -> type:
    """The subclass, built on first use so that importing this module does not import TRL."""
    global _cls
    if _cls is None:
        from trl import GRPOTrainer

        class AworldGRPOTrainer(GRPOTrainer):  # type: ignore[misc, valid-type]
            aworld_inputs: list[dict[str, Any]] | None = None

            def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
                from aworld_trl.segments import add_segment_rows

                self.aworld_inputs = inputs
                try:
                    output = super()._generate_and_score_completions(inputs)
                finally:
                    self.aworld_inputs = None
                # an episode's later segments (rewritten or compacted history) become rows of their own
                return add_segment_rows(self, output, inputs)

        _cls = AworldGRPOTrainer
    return _cls


_cls: type | None = None


def __getattr__(name: str) -> Any:
    if name == "AworldGRPOTrainer":
        return trainer_class()
    raise AttributeError(name)
