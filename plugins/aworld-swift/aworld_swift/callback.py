"""``callbacks_map['aworld']``: the trainer-side settings of an aworld-swift run.

* Hands the trainer to the process's runtime: the reward functions then know whether a batch is
  trained or evaluated (only training batches count toward ``rollout.max_failed_steps``) and add
  the batch's ``aworld/*`` metrics to ms-swift's logged metrics of that mode.
* Sets ``min_new_tokens`` on the policy's generation config (``backends.swift.aworld.min_new_tokens``,
  default 1): an empty completion (the model's first sampled token is the pad-equal ``eos``, which
  ms-swift's transformers engine strips) makes ms-swift 4.6's GRPO fail with "Size does not match".
"""

from __future__ import annotations

from typing import Any

from swift.callbacks import TrainerCallback

from aworld_swift.runtime import get_runtime


class AworldCallback(TrainerCallback):
    def __init__(self, args: Any, trainer: Any):
        super().__init__(args, trainer)
        self.runtime = get_runtime()
        self.runtime.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        tokens = self.runtime.options.min_new_tokens
        if tokens:
            for config in generation_configs(self.trainer):
                config.min_new_tokens = max(int(getattr(config, "min_new_tokens", None) or 0), tokens)


def generation_configs(trainer: Any) -> list[Any]:
    """The generation configs the trainer's rollout engine reads (the engine's and the model's)."""
    model = getattr(trainer, "model", None)
    found: list[Any] = []
    for owner in (getattr(trainer, "engine", None), model, getattr(model, "module", None)):
        config = getattr(owner, "generation_config", None)
        if config is not None and all(config is not other for other in found):
            found.append(config)
    return found
