"""Asynchronous GRPO for the ``trl`` backend: the next steps' episodes run while a step trains.

Opt in with ``backends.trl.aworld.async_rollout: {max_staleness: S, weight_cap: C}``.

**What overlaps.** TRL asks for a batch's episodes (``rollout_func``) at the start of each step
and trains on them. Here, when step ``g`` asks for its batch, the batches of steps ``g+1 .. g+S``
are started too, on the episode loop thread, and they run while the trainer does step ``g``'s
forward, backward and optimizer step in the main thread. The order of batches is TRL's own: the
trainer's sampler is wrapped (:class:`ScheduleSampler`) so that the index order it hands the
data loader is recorded, and a batch is started early only for the rows that TRL will really
ask for; when TRL asks, its rows are checked against what was started (a mismatch is run afresh,
never trained in place of the rows asked for).

**Versions and the staleness bound.** Version ``v`` is the weights after ``v`` optimizer steps
(``trainer.state.global_step``). After every step the trained weights are published to the
rollout engine (:class:`WeightSync`): the trainer thread takes a snapshot (a copy of the
parameters) and goes on; the loop thread loads it into the engine when the engine is between two
decode batches (HF engine: a private copy of the model that only the rollouts use, whose running
decode stops at the next token for the update; vLLM: its ``update_weights``; both hand back the
aborted generations' tokens, which ``TokenLLM`` resumes on the new weights).
The batch of step ``t`` starts its episodes only once the engine holds version ``>= t - S``, and
versions only grow, so every token trained at step ``t`` was sampled by weights at most ``S``
updates old. An episode that spans an update continues on the new weights (a partial rollout):
every token keeps the version that sampled it, and the loss checks the bound on every trained
token (a violation is an error, never trained).

**The loss** (:func:`behaviour_weights`): TRL's GRPO loss, unchanged, with the proximal policy
``pi_prox`` = the weights being trained (TRL's ``old_per_token_logps`` when it computes them,
else the loss's own log-probabilities, detached: one update per batch) and each stale token's
term multiplied by the truncated importance weight ``min(exp(logp_prox - logp_behav), C)``, where
``logp_behav`` is the log-probability the engine reported when it sampled the token. This is the
decoupled PPO objective of AReaL (clip around the proximal policy, correct for the behaviour
policy separately) with verl's truncation (cap the weight rather than drop the token). Tokens
sampled by the weights being trained get weight 1: their behaviour and proximal policies are the
same weights. The weight is folded into the per-token advantage (``A * w``, ``w >= 0``), which
every TRL loss type here is linear in (``vespo`` is refused).

``max_staleness: 0`` runs all of this without overlap (each batch waits for the previous update)
and trains exactly what the synchronous run trains; ``tests/trl/test_async_grpo.py`` compares
them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from aworld_core.errors import AworldError, ConfigError
from aworld_core.schemas import Sample
from aworld_trl.rollout import VERSIONS_FIELD, AworldRollout, _log_metrics, _trained_model, trl_batch

# -- plan-time checks ---------------------------------------------------------------------------


def check_async(options: Any, config: Any) -> None:
    """``ConfigError`` for settings asynchronous GRPO cannot honour (called when planning)."""
    settings = options.async_rollout
    if settings is None:
        return
    if getattr(config, "num_iterations", 1) != 1:
        raise ConfigError(
            f"backends.trl.aworld.async_rollout with num_iterations={config.num_iterations}: asynchronous GRPO trains "
            f"each batch once (its staleness bound counts one update per batch); set num_iterations: 1 or remove "
            f"async_rollout", [("backends.trl.num_iterations", config.num_iterations, "1 with async_rollout")])
    if getattr(config, "loss_type", None) == "vespo":
        raise ConfigError(
            "backends.trl.aworld.async_rollout with loss_type: vespo: the behaviour weight is folded into the "
            "advantage, and vespo's loss is not linear in it; use grpo, dapo, bnpo, dr_grpo, luspo, cispo or sapo",
            [("backends.trl.loss_type", "vespo", "another loss type with async_rollout")])
    if options.rollout_torch_threads is not None:
        raise ConfigError(
            "backends.trl.aworld.rollout_torch_threads with async_rollout: torch's thread count is process-wide, "
            "and with async_rollout the rollouts decode while the trainer trains; set torch_threads only",
            [("backends.trl.aworld.rollout_torch_threads", options.rollout_torch_threads, "unset with async_rollout")])


# -- the loss -----------------------------------------------------------------------------------


def behaviour_weights(prox_logps: Any, behav_logps: Any, versions: Any, prox_version: int, mask: Any,
                      cap: float) -> tuple[Any, dict[str, float]]:
    """Per-token weights of the decoupled loss and their statistics.

    ``w = min(exp(prox - behav), cap)`` where the token is trained (``mask``) and was sampled by
    older weights than ``prox_version``; 1 elsewhere (fresh tokens, padding, tool tokens).
    ``versions`` (-1: not sampled) and the staleness bound are the caller's to check."""
    import torch

    trained = mask.bool() & (versions >= 0)
    stale = trained & (versions < prox_version)
    ratio = torch.exp((prox_logps.detach() - behav_logps).clamp(max=math.log(cap) + 1.0))
    weights = torch.where(stale, ratio.clamp(max=cap), torch.ones_like(ratio))
    staleness = (prox_version - versions).clamp(min=0)
    n = int(trained.sum())
    stats: dict[str, float] = {}
    if n:
        stats["aworld/staleness_mean"] = float(staleness[trained].float().mean())
        stats["aworld/staleness_max"] = float(staleness[trained].max())
        stats["aworld/stale_token_rate"] = float(stale.sum()) / n
    if int(stale.sum()):
        stats["aworld/behaviour_weight_mean"] = float(weights[stale].mean())
        stats["aworld/behaviour_weight_capped_rate"] = float((ratio[stale] >= cap).float().mean())
    return weights, stats


def staleness_counts(versions: Any, prox_version: int, mask: Any) -> dict[int, int]:
    """How many trained tokens have each staleness (``prox_version - version``)."""
    trained = mask.bool() & (versions >= 0)
    return dict(Counter(int(value) for value in (prox_version - versions[trained]).tolist()))


# -- the order of batches -----------------------------------------------------------------------


class Schedule:
    """The generation batches TRL will ask for, in order, as the trainer's sampler yields them.

    ``rows_per_call`` rows (prompts x generations) make one rollout call; the sampler repeats each
    call's rows ``repeat`` times (TRL's ``steps_per_generation x num_iterations`` reuse), and only
    the first repetition is generated."""

    def __init__(self, rows_per_call: int, repeat: int):
        self.rows_per_call = rows_per_call
        self.repeat = max(1, repeat)
        self.batches: list[tuple[int, ...]] = []
        self._ahead: list[list[int]] = []  # epochs drawn before the data loader asked for them
        self._inner: Any = None
        self.lock = threading.Lock()

    def record(self, order: list[int]) -> None:
        stride = self.rows_per_call * self.repeat
        with self.lock:
            for start in range(0, len(order) - self.rows_per_call + 1, stride):
                self.batches.append(tuple(order[start:start + self.rows_per_call]))

    def next_epoch(self) -> list[int]:
        """The order for the data loader's next pass: drawn ahead already, or drawn now."""
        with self.lock:
            if self._ahead:
                return self._ahead.pop(0)
        order = list(iter(self._inner))
        self.record(order)
        return order

    def draw_ahead(self) -> bool:
        """Draw the next epoch's order now (the inner sampler's own state advances exactly as when the
        data loader draws it), so batches across the epoch boundary can start early."""
        if self._inner is None:
            return False
        order = list(iter(self._inner))
        self.record(order)
        with self.lock:
            self._ahead.append(order)
        return True

    def wrap(self, sampler: Any) -> ScheduleSampler:
        self._inner = sampler
        return ScheduleSampler(sampler, self)


class ScheduleSampler:
    """TRL's train sampler, unchanged in what it yields, recording the order into a :class:`Schedule`."""

    def __init__(self, inner: Any, schedule: Schedule):
        self.inner = inner
        self.schedule = schedule

    def __iter__(self) -> Iterator[int]:
        return iter(self.schedule.next_epoch())

    def __len__(self) -> int:
        return len(self.inner)


# -- weights to the rollout engine --------------------------------------------------------------


class WeightSync:
    """Publishes the trained weights to the rollout engine, version by version, off the trainer's
    thread; the rollouts wait here for the version their staleness bound needs.

    HF engine: it samples from a private copy of the trained model (made on the first publish), into
    which each snapshot is copied under the engine's weights lock; the running decode is asked to
    stop (``abort_requested``: its rows end after the current token with ``stop_reason="abort"``,
    which ``TokenLLM`` resumes on the new weights), so an update waits one token, not a generation.
    An engine with ``update_weights`` (vLLM): the snapshot as a state dict. Any other engine (a
    scripted one in tests): only its version is set."""

    def __init__(self, engine: Any, loop: Any):
        self.engine = engine
        self.loop = loop  # LoopThread
        self.version = -1  # what the engine holds
        self.trained_model: Any = None
        self.copy: Any = None
        self._cond: asyncio.Condition | None = None
        self._pending: list[concurrent.futures.Future[Any]] = []
        self.error: BaseException | None = None
        self.updates = 0
        self.update_s = 0.0  # the trainer thread's time in publish (the snapshot)

    @property
    def mode(self) -> str:
        if hasattr(self.engine, "update_weights"):
            return "update_weights"
        if hasattr(self.engine, "weights_lock") and hasattr(self.engine, "model"):
            return "copy"
        return "version"

    def publish(self, model: Any, version: int) -> None:
        """Snapshot ``model`` (the trainer's, unwrapped) as ``version``; the engine loads it soon."""
        started = time.perf_counter()
        self.trained_model = model
        mode = self.mode
        snapshot: Any = None
        if mode == "copy":
            if self.copy is None:
                self._make_copy(model)
            # only what training changes (LoRA: the adapters); frozen weights are in the copy already
            snapshot = [(i, p.detach().clone()) for i, p in enumerate(model.parameters()) if p.requires_grad]
        elif mode == "update_weights":
            snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.update_s += time.perf_counter() - started
        future = asyncio.run_coroutine_threadsafe(self._apply(snapshot, version, mode), self.loop.loop)
        self._pending = [f for f in self._pending if not f.done()] + [future]

    def _make_copy(self, model: Any) -> None:
        try:
            replica = copy.deepcopy(model)
        except Exception as exc:
            raise AworldError(
                f"async_rollout: cannot copy the trained model for the rollout engine ({type(exc).__name__}: {exc}); "
                f"the HF engine samples from a private copy while the trainer trains. Remove async_rollout"
            ) from exc
        replica.eval()
        for param in replica.parameters():
            param.requires_grad_(False)
        with self.engine.weights_lock:
            self.engine.model = replica
        self.copy = replica

    async def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def _apply(self, snapshot: Any, version: int, mode: str) -> None:
        cond = await self._condition()
        async with cond:  # one update at a time, in order
            if version <= self.version:
                return
            try:
                if mode == "copy":
                    await asyncio.to_thread(self._copy_in, snapshot, version)
                elif mode == "update_weights":
                    await self.engine.update_weights(snapshot, version=version)
                elif hasattr(self.engine, "set_version"):
                    self.engine.set_version(version)
                else:
                    self.engine.version = version
            except BaseException as exc:
                self.error = exc
                cond.notify_all()
                raise
            self.version = version
            self.updates += 1
            cond.notify_all()

    def _copy_in(self, snapshot: list[tuple[int, Any]], version: int) -> None:
        import torch

        engine = self.engine
        aborts = hasattr(engine, "abort_requested")
        if aborts:  # the running decode hands back its rows after the current token (TokenLLM resumes them)
            engine.abort_requested = True
        with engine.weights_lock, torch.no_grad():
            targets = list(self.copy.parameters())
            for index, source in snapshot:
                targets[index].copy_(source)
            engine.set_version(version)
            if aborts:
                engine.abort_requested = False

    async def wait_version(self, version: int) -> None:
        cond = await self._condition()
        async with cond:
            await cond.wait_for(lambda: self.version >= version or self.error is not None)
        if self.error is not None:
            raise AworldError(f"async_rollout: loading weights into the rollout engine failed: {self.error}")

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every published version to be in the engine (raises what loading raised)."""
        for future in self._pending:
            future.result(timeout=timeout)
        self._pending = []

    def release(self) -> None:
        """Sample from the trained model again (HF engine), dropping the copy."""
        if self.copy is not None and self.trained_model is not None:
            with self.engine.weights_lock:
                self.engine.model = self.trained_model
            self.copy = None


# -- the rollout --------------------------------------------------------------------------------


class _Batch:
    """One generation batch on its way: its rows' samples, the step that trains it, its future."""

    def __init__(self, position: int, samples: list[Sample], step: int, min_version: int, tag: str):
        self.position = position
        self.samples = samples
        self.step = step
        self.min_version = min_version
        self.tag = tag
        self.future: concurrent.futures.Future[Any] | None = None
        self.started = 0.0
        self.finished = 0.0


class AsyncRollout(AworldRollout):
    """The ``rollout_func`` of asynchronous GRPO (see the module's docstring).

    ``max_staleness``: how many updates a trained token's weights may lag. ``attach(trainer)`` is
    called by the trainer (``async_trainer_class``) once it exists."""

    def __init__(self, *args: Any, max_staleness: int = 1, weight_cap: float = 2.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_staleness = max_staleness
        self.weight_cap = weight_cap
        self.sample_list = list(self.samples.values())  # TRL's dataset rows, in order
        self.schedule: Schedule | None = None
        self.weights = WeightSync(self.engine, self.loop)
        self.inflight: dict[int, _Batch] = {}
        self.cursor = 0  # the schedule position TRL asks for next
        self.trainer: Any = None
        self.misses = 0
        self.staleness: dict[int, int] = {}  # trained tokens per staleness, the whole run
        self.wait_s = 0.0
        self.published = False

    # -- wiring ---------------------------------------------------------------------------------

    def attach(self, trainer: Any) -> None:
        accelerator = getattr(trainer, "accelerator", None)
        if accelerator is not None and accelerator.num_processes > 1:
            raise ConfigError(
                f"backends.trl.aworld.async_rollout runs in one process; this run has {accelerator.num_processes}. "
                f"Launch one process or remove async_rollout", [("backends.trl.aworld.async_rollout", "set", "1 process")])
        args = trainer.args
        self.trainer = trainer
        self.schedule = Schedule(rows_per_call=args.generation_batch_size,
                                 repeat=args.steps_per_generation * trainer.num_iterations)
        trainer.add_callback(_publish_callback(self))

    def on_update(self, trainer: Any) -> None:
        """After an optimizer step: publish the new weights (the trainer goes on at once)."""
        self.weights.publish(_trained_model(trainer), int(trainer.state.global_step))

    # -- TRL's call -----------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        train_mode = bool(getattr(getattr(trainer, "model", None), "training", True))
        if not train_mode or self.schedule is None:
            raise AworldError("async_rollout generates training batches only, on the trainer it was attached to")
        rows = getattr(trainer, "aworld_inputs", None)
        if rows is None or len(rows) != len(prompts):
            raise AworldError("the aworld rollout needs the batch's rows; use the aworld GRPO trainer")
        group_size = int(trainer.num_generations)
        samples = self.batch_samples(rows, group_size)
        step = int(trainer.state.global_step)
        if not self.published:  # the first call: the engine gets the weights being trained
            self.weights.publish(_trained_model(trainer), step)
            self.published = True
        self.calls += 1
        ids = tuple(s.id for s in samples)
        position = self._locate(ids)
        waited_from = time.perf_counter()
        if position is None:  # not the batch the schedule said: run it now (correct, not early)
            self.misses += 1
            batch = self._start(None, samples, step)
        else:
            for old in [p for p in self.inflight if p < position]:  # skipped (a resumed run)
                self._cancel(self.inflight.pop(old))
            batch = self.inflight.pop(position, None) or self._start(position, samples, step)
            self.cursor = position + 1
        for ahead in range(1, self.max_staleness + 1):  # the next steps' batches start now
            if position is not None:
                self._prefetch(position + ahead, step + ahead)
        assert batch.future is not None
        try:
            groups = batch.future.result()
        except BaseException:
            batch.future.cancel()
            raise
        waited = time.perf_counter() - waited_from
        self.wait_s += waited
        episodes = [e for g in groups for e in g.episodes]
        from aworld_core.worker import step_metrics

        _log_metrics(trainer, {
            **step_metrics(episodes),
            "aworld/rollout_s": waited,  # what the step waited for its episodes
            "aworld/episode_batch_s": batch.finished - batch.started,  # the batch's own wall time
            "aworld/prefetch_miss": float(position is None),
        })
        if self.writer is not None and self.trajectory_every and step % self.trajectory_every == 0:
            for episode in episodes:
                self.writer.write(episode)
        if self.failed_steps is not None:
            self.failed_steps.step(episodes)
        return trl_batch(groups, self.placeholder_id)

    def _locate(self, ids: tuple[str, ...]) -> int | None:
        assert self.schedule is not None
        with self.schedule.lock:
            batches = list(self.schedule.batches)
        for position in range(self.cursor, len(batches)):
            if tuple(self.sample_list[i].id for i in batches[position]) == ids:
                return position
        return None

    def _batch_at(self, position: int) -> list[Sample] | None:
        assert self.schedule is not None
        with self.schedule.lock:
            known = len(self.schedule.batches)
        if position >= known and not self.schedule.draw_ahead():
            return None
        with self.schedule.lock:
            if position >= len(self.schedule.batches):
                return None
            indices = self.schedule.batches[position]
        return [self.sample_list[i] for i in indices]

    def _prefetch(self, position: int, step: int) -> None:
        if position in self.inflight:
            return
        trainer = self.trainer
        if trainer is not None and step >= int(trainer.state.max_steps or 0) > 0:
            return  # past the last step: nothing will train it
        samples = self._batch_at(position)
        if samples is None:
            return
        self.inflight[position] = self._start(position, samples, step)

    def _start(self, position: int | None, samples: list[Sample], step: int) -> _Batch:
        min_version = max(0, step - self.max_staleness)
        batch = _Batch(-1 if position is None else position, samples, step, min_version,
                       tag=f"s{step}p{position if position is not None else 'x'}")
        group_size = int(self.trainer.num_generations) if self.trainer is not None else len(samples)
        batch.future = asyncio.run_coroutine_threadsafe(self._produce(batch, group_size), self.loop.loop)
        return batch

    async def _produce(self, batch: _Batch, group_size: int) -> Any:
        await self.weights.wait_version(batch.min_version)
        batch.started = time.perf_counter()
        try:
            return await self.runner.run_batch(batch.samples, group_size=group_size, sampling=self.sampling,
                                               tag=batch.tag)
        finally:
            batch.finished = time.perf_counter()

    def _cancel(self, batch: _Batch) -> None:
        if batch.future is not None:
            batch.future.cancel()

    # -- the end --------------------------------------------------------------------------------

    def sync_weights(self, model: Any, step: int) -> float | None:
        """End of training: drop the batches started for steps that will not run, load the final
        weights, and sample from the trained model again (the evaluation after training)."""
        started = time.perf_counter()
        for batch in self.inflight.values():
            self._cancel(batch)
        for batch in self.inflight.values():
            try:
                batch.future.result(timeout=60) if batch.future is not None else None
            except BaseException:
                pass  # cancelled: nothing of it trains
        self.inflight.clear()
        if self.published and self.weights.version != step:
            self.weights.publish(model, step)
        self.weights.flush(timeout=600)
        self.weights.release()
        return time.perf_counter() - started


def _publish_callback(rollout: AsyncRollout) -> Any:
    from transformers import TrainerCallback

    class PublishWeights(TrainerCallback):  # type: ignore[misc]
        """After each optimizer step, the new weights go to the rollout engine."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            rollout.on_update(rollout.trainer)

    return PublishWeights()


# -- the trainer --------------------------------------------------------------------------------


def async_trainer_class() -> type:
    """``AworldGRPOTrainer`` with the seams asynchronous GRPO needs (built on first use):

    * ``_get_train_sampler``: TRL's sampler wrapped to record the batch order (:class:`Schedule`);
    * ``_generate_and_score_completions``: the rows' per-token versions and the proximal version
      go into the batch;
    * ``_compute_loss`` / ``_get_per_token_logps_and_entropies``: the behaviour weights are folded
      into the advantages once the loss's forward has the proximal log-probabilities.

    Each seam is checked by ``tests/trl/test_async_grpo.py`` (canaries for TRL's private API)."""
    global _async_cls
    if _async_cls is None:
        import torch

        from aworld_trl.grpo import trainer_class

        class AworldAsyncGRPOTrainer(trainer_class()):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any):
                super().__init__(*args, **kwargs)
                rollout = self.rollout_func
                if not isinstance(rollout, AsyncRollout):
                    raise AworldError("the async GRPO trainer needs an AsyncRollout as its rollout_func")
                self.aworld_async = rollout
                self._aworld_loss_inputs: dict[str, Any] | None = None
                rollout.attach(self)

            def _get_train_sampler(self, dataset: Any = None) -> Any:
                sampler = super()._get_train_sampler(dataset)
                return self.aworld_async.schedule.wrap(sampler)

            def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
                prox_version = int(self.state.global_step)
                output = super()._generate_and_score_completions(inputs)
                width = output["completion_ids"].shape[1]
                # per output row: TRL's input row, or a later segment's row (aworld_trl.segments)
                sources = getattr(self, "aworld_rows", None) or inputs
                rows = []
                for row in sources:
                    versions = list(row.get(VERSIONS_FIELD) or [])
                    rows.append(versions[:width] + [-1] * (width - len(versions)))
                rows += [[-1] * width] * (output["completion_ids"].shape[0] - len(rows))  # rows that train nothing
                device = output["completion_ids"].device
                output[VERSIONS_FIELD] = torch.tensor(rows, dtype=torch.long, device=device)
                output["aworld_prox_version"] = torch.full((len(rows),), prox_version, dtype=torch.long, device=device)
                return output

            def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
                self._aworld_loss_inputs = inputs
                try:
                    loss = super()._compute_loss(model, inputs)
                except BaseException:
                    self._aworld_loss_inputs = None
                    raise
                if self._aworld_loss_inputs is not None:  # the hook below never ran: TRL changed
                    self._aworld_loss_inputs = None
                    raise AworldError(
                        "async_rollout: TRL's _compute_loss no longer computes the per-token log-probabilities "
                        "through _get_per_token_logps_and_entropies(compute_entropy=True) before it reads the "
                        "advantages; this TRL version is not supported with async_rollout")
                return loss

            def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
                result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
                inputs = self._aworld_loss_inputs
                if inputs is not None and kwargs.get("compute_entropy"):
                    self._aworld_loss_inputs = None
                    self._aworld_correct(inputs, result[0])
                return result

            def _aworld_correct(self, inputs: dict[str, Any], logps: Any) -> None:
                rollout = self.aworld_async
                versions = inputs.get(VERSIONS_FIELD)
                behav = inputs.get("sampling_per_token_logps")
                if versions is None or behav is None:
                    raise AworldError("async_rollout: the batch lost its per-token versions or sampled logprobs")
                mask = inputs["completion_mask"]
                if "tool_mask" in inputs:
                    mask = mask * inputs["tool_mask"]
                prox_version = int(inputs["aworld_prox_version"][0])
                trained = mask.bool() & (versions >= 0)
                if bool(trained.any()):
                    oldest = int(versions[trained].min())
                    if prox_version - oldest > rollout.max_staleness:
                        raise AworldError(
                            f"async_rollout: a token sampled by version {oldest} would train at version {prox_version}, "
                            f"beyond max_staleness={rollout.max_staleness} (a bug: please report it)")
                prox = inputs.get("old_per_token_logps")
                prox = logps.detach() if prox is None else prox
                weights, stats = behaviour_weights(prox, behav, versions, prox_version, mask, rollout.weight_cap)
                for value, count in staleness_counts(versions, prox_version, mask).items():
                    rollout.staleness[value] = rollout.staleness.get(value, 0) + count
                advantages = inputs["advantages"]
                if advantages.dim() == 1:
                    advantages = advantages.unsqueeze(1)
                inputs["advantages"] = advantages * weights
                mode = "train" if self.model.training else "eval"
                for key, value in stats.items():
                    self._metrics[mode][key].append(value)

        _async_cls = AworldAsyncGRPOTrainer
    return _async_cls


_async_cls: type | None = None
