"""TRL's ``rollout_func`` on the worker kit: each row of TRL's batch is one AWorld episode.

TRL hands over its batch with every prompt already repeated ``num_generations`` times in a row,
so the kit's ``EpisodeRunner.run_batch(samples, group_size=num_generations)`` runs one episode per
row and returns one finished, scored :class:`~aworld_core.worker.EpisodeGroup` per prompt, with
the job's group policy (``rollout.failed_episodes``) applied. A trained member goes to TRL
exactly: ``prompt_ids``, ``completion_ids`` = the response ids as sampled (tool and environment
tokens included), ``logprobs`` as sampled, ``env_mask`` = 1 on sampled tokens and 0 on
tool/environment tokens.

**A member that does not train** (failed, timed out, tool server down, reward failed, or in a
group that ``drop_group`` drops) becomes a one-token placeholder with ``env_mask = [0]`` and
reward ``None`` (the kit's ``group.rewards("none")``): TRL turns ``None`` into NaN, leaves it out
of its group's mean and standard deviation (``nanmean``/``nanstd``) and sets its advantage to 0,
so the group keeps its size and its baseline comes from the members that train. Per-step
metrics are the kit's ``step_metrics``; after ``rollout.max_failed_steps`` consecutive steps with
nothing trainable, the kit's ``FailedSteps`` stops training with the first error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from aworld_core.errors import AworldError, UsageError
from aworld_core.schemas import Sample, SamplingParams
from aworld_core.worker import step_metrics
from aworld_trl.segments import REWARD_FIELD, SEGMENTS_FIELD, group_size, segment_plans

SAMPLE_ID = "aworld_sample_id"  # the dataset column that names each row's Sample
EPISODE_FIELD = "aworld_episode_id"
VERSIONS_FIELD = "aworld_versions"  # per response token: the policy version that sampled it (-1: not sampled)


def trl_batch(groups: Sequence[Any], placeholder_id: int) -> dict[str, list[Any]]:
    """What ``rollout_func`` returns for ``groups`` (kit ``EpisodeGroup``s): one row per member,
    in order; members that do not train are placeholders with reward ``None``."""
    out: dict[str, list[Any]] = {
        "prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], REWARD_FIELD: [], EPISODE_FIELD: [],
        VERSIONS_FIELD: [],
    }
    for group in groups:
        rows = zip(group.episodes, group.trained(), group.rewards("none"), strict=True)
        for episode, trained, reward in rows:
            view = episode.training
            if trained:
                out["prompt_ids"].append(list(view.prompt_ids))
                out["completion_ids"].append(list(view.response_ids))
                out["logprobs"].append([float(x) for x in view.response_logprobs])
                out["env_mask"].append([int(m) for m in view.response_mask])
                out[VERSIONS_FIELD].append([int(v) for v in view.response_versions])
                out[REWARD_FIELD].append(reward)
            else:
                prompt = list(view.prompt_ids) if view is not None and view.prompt_ids else [placeholder_id]
                out["prompt_ids"].append(prompt)
                out["completion_ids"].append([placeholder_id])  # TRL reads ids[-1]: never empty
                out["logprobs"].append([0.0])
                out["env_mask"].append([0])
                out[VERSIONS_FIELD].append([-1])
                out[REWARD_FIELD].append(None)
            out[EPISODE_FIELD].append(episode.id)
    # each row is its episode's first segment; the later ones (and segment rewards) ride along for
    # the trainer to add as rows of their own (aworld_trl.segments)
    out[SEGMENTS_FIELD] = segment_plans(groups)
    return out


def trl_sampling(args: Any) -> SamplingParams:
    """The rollout's sampling settings, from ``GRPOConfig`` (what TRL's own generation would use)."""
    top_k = getattr(args, "top_k", 0) or None
    return SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=top_k)


class AworldRollout:
    """The ``rollout_func`` given to ``GRPOTrainer``: ``rollout(prompts, trainer) -> dict``.

    ``runner`` is the kit's ``EpisodeRunner``; ``failed_steps`` the kit's ``FailedSteps``
    (``None``: never stop).
    """

    def __init__(
        self,
        runner: Any,
        samples: Sequence[Sample],
        *,
        loop: Any,
        placeholder_id: int,
        engine: Any = None,
        sampling: SamplingParams | None = None,
        writer: Any = None,
        trajectory_every: int = 1,
        failed_steps: Any = None,
        torch_threads: int | None = None,
        policies: tuple[list[str], dict[str, str]] | None = None,
    ):
        self.runner = runner
        self.policies = policies  # several policies: (the trained ones, agent -> policy)
        self.samples: dict[str, Sample] = {}
        for sample in samples:
            if sample.id in self.samples:
                raise UsageError(
                    f"the training data has two rows with id '{sample.id}'; ids must be unique "
                    f"(they pair TRL's rows with their samples)"
                )
            self.samples[sample.id] = sample
        self.loop = loop
        self.engine = engine
        self.placeholder_id = placeholder_id
        self.sampling = sampling
        self.writer = writer
        self.trajectory_every = trajectory_every
        self.failed_steps = failed_steps
        self.torch_threads = torch_threads
        self.calls = 0
        self.synced_step: int | None = None  # the step whose weights an engine of its own holds

    def dataset_rows(self) -> list[dict[str, Any]]:
        """TRL's training rows: the prompt (for TRL's logs) and the sample id (what we run)."""
        rows = []
        for sample in self.samples.values():
            prompt = [{"role": m.get("role", "user"), "content": _text(m.get("content"))} for m in sample.prompt]
            rows.append({"prompt": prompt, SAMPLE_ID: sample.id})
        return rows

    def batch_samples(self, rows: list[dict[str, Any]], group_size: int) -> list[Sample]:
        """The samples of TRL's rows; refuses a batch that is not whole groups of one sample each
        (a group cut in two, or shifted, would normalize advantages over the wrong episodes)."""
        try:
            samples = [self.samples[row[SAMPLE_ID]] for row in rows]
        except KeyError as exc:
            raise AworldError(f"TRL passed a row whose sample id {exc} is not in the training data") from None
        if group_size < 1 or len(samples) % group_size:
            raise AworldError(
                f"TRL handed the rollout {len(samples)} rows, not whole groups of num_generations={group_size}; "
                f"the trl backend runs each GRPO group in one process: make per_device_train_batch_size x "
                f"steps_per_generation a multiple of num_generations"
            )
        for start in range(0, len(samples), group_size):
            ids = {s.id for s in samples[start:start + group_size]}
            if len(ids) != 1:
                raise AworldError(
                    f"rows {start}..{start + group_size - 1} of TRL's batch are not one prompt repeated "
                    f"num_generations={group_size} times (sample ids {sorted(ids)}); this TRL version orders "
                    f"its batch differently from the one aworld-trl supports"
                )
        return samples

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        rows = getattr(trainer, "aworld_inputs", None)
        if rows is None or len(rows) != len(prompts):
            raise AworldError(
                "the aworld rollout needs the batch's rows to find each prompt's sample; use "
                "aworld_trl.grpo.AworldGRPOTrainer (it records them) instead of trl.GRPOTrainer"
            )
        model = getattr(self.engine, "model", None)
        was_training = bool(getattr(model, "training", False))
        train_mode = bool(getattr(getattr(trainer, "model", None), "training", True))  # TRL's own test
        size = group_size(trainer, train_mode)
        samples = self.batch_samples(rows, size)
        state = getattr(trainer, "state", None)
        step = int(getattr(state, "global_step", self.calls) or 0)
        tag = f"s{step}c{self.calls}"  # unique even when TRL generates twice within one step
        self.calls += 1
        synced = self.sync_weights(_trained_model(trainer), step)
        if synced is None and self.engine is not None and hasattr(self.engine, "set_version"):
            self.engine.set_version(step)
        started = time.perf_counter()
        if model is not None:
            model.eval()  # sample from the policy as it is, without dropout
        threads = _set_torch_threads(self.torch_threads)
        try:
            groups = self.loop.run(
                self.runner.run_batch(samples, group_size=size, sampling=self.sampling, tag=tag)
            )
        finally:
            _set_torch_threads(threads)
            if model is not None and was_training:
                model.train()
        elapsed = time.perf_counter() - started
        episodes = [e for g in groups for e in g.episodes]
        timings = {"aworld/rollout_s": elapsed} if synced is None else {
            "aworld/rollout_s": elapsed, "aworld/weight_sync_s": synced}
        _log_metrics(trainer, {**step_metrics(episodes), **timings})
        if self.writer is not None and self.trajectory_every and step % self.trajectory_every == 0:
            for episode in episodes:
                self.writer.write(episode)
        if self.failed_steps is not None and train_mode:
            self.failed_steps.step(episodes)  # training steps only: an evaluation is not a step
        return self.batch(groups)

    def batch(self, groups: Sequence[Any]) -> dict[str, list[Any]]:
        """What TRL gets for ``groups``; a multi-policy job's episodes are placeholder rows that carry
        every trained policy's segments (``aworld_trl.multi_policy``)."""
        out = trl_batch(groups, self.placeholder_id)
        if self.policies is None:
            return out
        from aworld_trl.multi_policy import POLICY_FIELD, policy_plans

        trained, agent_policies = self.policies
        out[POLICY_FIELD] = policy_plans(groups, trained, agent_policies)
        for i in range(len(out["prompt_ids"])):  # the segments train as rows of their own
            out["prompt_ids"][i] = [self.placeholder_id]
            out["completion_ids"][i] = [self.placeholder_id]
            out["logprobs"][i] = [0.0]
            out["env_mask"][i] = [0]
            out[VERSIONS_FIELD][i] = [-1]
        out.pop(SEGMENTS_FIELD, None)
        return out


    def sync_weights(self, model: Any, step: int) -> float | None:
        """Copy ``model``'s weights into an engine that holds its own copy (vLLM), once per step,
        stamping what it samples next with ``step``; seconds it took, ``None`` when the engine
        samples from the trained model itself (the HF engine) or already has this step's weights."""
        if self.engine is None or not hasattr(self.engine, "update_weights") or self.synced_step == step:
            return None
        started = time.perf_counter()
        self.loop.run(self.engine.update_weights(model.state_dict(), version=step))
        self.synced_step = step
        return time.perf_counter() - started


def _trained_model(trainer: Any) -> Any:
    model = trainer.model
    accelerator = getattr(trainer, "accelerator", None)
    return accelerator.unwrap_model(model) if accelerator is not None else model


def make_reward_func(name: str) -> Any:
    """TRL's reward function: hands over the reward the core computed for each episode."""

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        values = kwargs.get(REWARD_FIELD)
        if values is None:
            raise AworldError(
                f"TRL called the reward without '{REWARD_FIELD}'; the aworld reward only works with the "
                f"aworld rollout_func"
            )
        return [None if v is None else float(v) for v in values]

    reward.__name__ = name
    reward.__qualname__ = name
    return reward


def _set_torch_threads(threads: int | None) -> int | None:
    """Set torch's intra-op threads (None: leave them); returns the previous count to restore."""
    if threads is None:
        return None
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    return previous


def _log_metrics(trainer: Any, metrics: dict[str, float]) -> None:
    """Append to TRL's per-step metrics, which it averages and logs with its own."""
    store = getattr(trainer, "_metrics", None)
    if store is None:
        return
    mode = "train" if getattr(getattr(trainer, "model", None), "training", True) else "eval"
    for key, value in metrics.items():
        store[mode][key].append(float(value))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
