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
            # several policies (aworld_trl.multi_policy): the trained adapters, in the job's order
            aworld_policies: list[str] | None = None

            def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
                from aworld_trl.segments import add_segment_rows

                self.aworld_inputs = inputs
                try:
                    output = super()._generate_and_score_completions(inputs)
                finally:
                    self.aworld_inputs = None
                if self.aworld_policies:  # a row per segment of each policy, per-policy GRPO groups
                    from aworld_trl.multi_policy import add_policy_rows

                    return add_policy_rows(self, output, inputs)
                # an episode's later segments (rewritten or compacted history) become rows of their own
                return add_segment_rows(self, output, inputs)

            def create_optimizer(self, *args: Any, **kwargs: Any) -> Any:
                if self.aworld_policies:  # every trained adapter in the optimizer (a resume loads them
                    # back as not trainable but the active one, which would leave the others out)
                    self.accelerator.unwrap_model(self.model).set_requires_grad(self.aworld_policies, True)
                return super().create_optimizer(*args, **kwargs)

            def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                             num_items_in_batch: Any = None) -> Any:
                if not self.aworld_policies:
                    return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
                from aworld_trl.multi_policy import policy_loss

                parent = super().compute_loss
                return policy_loss(self, model, inputs, lambda m, sub: parent(m, sub, return_outputs, num_items_in_batch))

        _cls = AworldGRPOTrainer
    return _cls


_cls: type | None = None


def __getattr__(name: str) -> Any:
    if name == "AworldGRPOTrainer":
        return trainer_class()
    raise AttributeError(name)
