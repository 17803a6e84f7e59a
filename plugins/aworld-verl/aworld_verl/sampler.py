"""verl V1's replay buffer with AWorld's per-step episode counts and the all-failed stop.

verl 0.9.1 gives agent loops no channel into the trainer's metrics, and its V1 worker swallows an
agent loop's exception into a "failure" group status, so nothing in a worker can stop training.
V1 does let a run plug in its own replay buffer (``trainer.v1.sampler.custom_sampler.{path,name}``):
it runs in the trainer, its ``sample()`` picks each training step's batch, and the metrics it
returns are logged with the step's own. The launch sets ``aworld_replay_buffer`` there; it is
verl's own buffer (``ReplayBuffer`` for the sync trainer, ``ReplayBufferAsync`` otherwise) that,
after each training sample, reads the ``extra_fields["aworld"]`` record the loop stored with every
output (the kit's ``outcome_record``) and

* adds ``aworld/*`` metrics: the kit's ``merge_step_metrics``, its ``step_metrics`` over the step's episodes
  (``aworld/episodes``, ``aworld/trained_rate``, ``aworld/failed_rate``, ``aworld/untrained/<reason>``,
  ...), plus ``aworld/groups``, ``aworld/groups_dropped`` and ``aworld/placeholders``;
* feeds the kit's ``FailedSteps``: after ``rollout.max_failed_steps`` consecutive samples in which
  no episode trained, it raises with the first error, which stops verl's trainer.

``sampler_kwargs``: ``aworld_max_failed_steps`` (the launch sets it from the job);
``aworld_token_log`` (a path, off by default): append, per training sample, every output's
response ids, loss mask and rollout logprobs exactly as verl stored them for training (an audit
of what trained, e.g. against the rollout server's own record); any key that
is a parameter of verl's buffer (``filter_groups_metric``, ``train_batch_size``,
``gen_batch_size``, ``max_inflight_gen_batches``, ``sync_refill_failed_groups``) goes to it, since
verl passes those only to its own buffer (the launch forwards the job's DAPO settings there).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from aworld_core.worker import (
    FailedSteps,
    GroupPolicy,
    first_record_error,
    merge_step_metrics,
    trained_records,
)

logger = logging.getLogger(__name__)

MAX_FAILED_STEPS = "aworld_max_failed_steps"
TOKEN_LOG = "aworld_token_log"
SETTING = "rollout.max_failed_steps (the job) or trainer.v1.sampler.sampler_kwargs.aworld_max_failed_steps"


class StepWatch:
    """Counts what the loops stored for each training sample; stops after the all-failed steps."""

    def __init__(self, max_failed_steps: int, token_log: str | None = None):
        self.failed_steps = FailedSteps(max_failed_steps, setting=SETTING)
        self.token_log = token_log

    def facts_of(self, batch: Any) -> list[dict[str, Any]]:
        """One ``aworld`` record per episode of ``batch`` (a ``KVBatchMeta``), read from verl's
        TransferQueue; outputs of other agent loops have none."""
        import transfer_queue as tq

        if not batch.keys:
            return []
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        seen: dict[str, dict[str, Any]] = {}
        for extra in data.pop("extra_fields").tolist():  # as verl's own trainer reads it
            fact = extra.get("aworld") if isinstance(extra, Mapping) else None
            if isinstance(fact, Mapping):
                seen.setdefault(str(fact.get("episode")), dict(fact))  # several outputs of one episode
        return list(seen.values())

    def log_tokens(self, batch: Any, global_steps: int) -> None:
        """Append what verl will train on for ``batch`` to ``token_log`` (one JSON line per output)."""
        import json

        import transfer_queue as tq

        if not self.token_log or not batch.keys:
            return
        fields = ["responses", "response_mask", "rollout_log_probs"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        rows = {name: _rows(data[name]) for name in fields}
        with open(self.token_log, "a", encoding="utf-8") as handle:
            for i, key in enumerate(batch.keys):
                handle.write(json.dumps({
                    "step": int(global_steps), "key": str(key),
                    "ids": [int(t) for t in rows["responses"][i]],
                    "mask": [int(m) for m in rows["response_mask"][i]],
                    "logprobs": [float(x) for x in rows["rollout_log_probs"][i]],
                }) + "\n")

    def observe(self, batch: Any) -> dict[str, float]:
        facts = self.facts_of(batch)
        if not facts:
            return {}
        metrics = merge_step_metrics(facts)
        trained = trained_records(facts)
        if not trained:
            logger.error("aworld: no episode of this training step trained; first error: %s", first_record_error(facts))
        self.failed_steps.record(trained, lambda: first_record_error(facts))
        return metrics


class _Watched:
    """``sample()`` of verl's buffer, then the step's counts (training partition only)."""

    watch: StepWatch

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        batch, metrics = super().sample(global_steps, partition_id, batch_size)  # type: ignore[misc]
        if partition_id == "train":
            self.watch.log_tokens(batch, global_steps)
            metrics = {**metrics, **self.watch.observe(batch)}
        return batch, metrics


class AworldReplayBuffer(_Watched, ReplayBuffer):
    """verl's sync replay buffer, watched."""


class AworldReplayBufferAsync(_Watched, ReplayBufferAsync):
    """verl's async replay buffer, watched."""


def aworld_replay_buffer(**kwargs: Any) -> ReplayBuffer:
    """What ``trainer.v1.sampler.custom_sampler.name`` names: verl calls it with its buffer's
    keyword arguments (``trainer_mode``, ``sampler_kwargs``, ``refill_fn``, ...)."""
    sampler_kwargs = dict(kwargs.get("sampler_kwargs") or {})
    limit = int(sampler_kwargs.pop(MAX_FAILED_STEPS, GroupPolicy().max_failed_steps))
    token_log = sampler_kwargs.pop(TOKEN_LOG, None)
    cls: type[ReplayBuffer] = AworldReplayBuffer if kwargs.get("trainer_mode") == "sync" else AworldReplayBufferAsync
    accepted = set(inspect.signature(ReplayBuffer.__init__).parameters) - {"self"}
    for key in list(sampler_kwargs):
        if key in accepted:
            kwargs[key] = sampler_kwargs.pop(key)
    kwargs["sampler_kwargs"] = sampler_kwargs
    buffer = cls(**kwargs)
    buffer.watch = StepWatch(limit, str(token_log) if token_log else None)
    return buffer


def _rows(value: Any) -> list[Any]:
    """Per-row lists of a TransferQueue field (a jagged nested tensor, or a padded one)."""
    if getattr(value, "is_nested", False):
        return [row.tolist() for row in value.unbind()]
    return [row.tolist() for row in value]
