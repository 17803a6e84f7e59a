"""ms-swift reward functions (``orms['aworld']``, ``orms['aworld_<name>']``) under the kit's group policy.

* ``aworld``: the job's reward, as the core computed it on the whole episode when the episode
  ended (``episode.reward``; every reward of ``reward`` summed).
* ``aworld_<name>``: one registered core reward (``aworld_gsm8k``, ``aworld_format``, ...), to
  weigh several with ms-swift's ``--reward_weights``. Taken from the episode's own scores when
  the job's reward includes it, else computed on the finished episode, in this process.

Reward functions are where the trainer first sees a whole batch, so they apply the worker kit's
group policy (``job.rollout.failed_episodes``). Each row's episode is rebuilt as a record from its
``rollout_infos`` entry (:func:`episode_record`: in server mode the episodes stay on the rollout
server); the episodes of one sample are one GRPO group (``apply_group_policy``), and each row gets
``EpisodeGroup.rewards("mean")`` (an episode of several training segments has a row per segment: it
counts once, and each of its rows gets its value). A reward function sees only its own process's rows, and ms-swift
only needs the whole generation batch to divide by ``num_generations``, so one group may span
several training processes: :func:`judge` gathers every process's records (``torch.distributed``'s
``all_gather_object``, in process order, as ms-swift gathers the rewards; nothing with one
process), decides on whole groups, identically on every process, and each function returns its own
process's slice:

* ``keep_group_neutral``: a member that does not train (its episode failed or timed out, its
  reward failed) gets the mean reward of the members that train, so its advantage is 0 and the
  group's baseline is theirs; the group keeps its size.
* ``drop_group``: a group with any such member gives every member the same reward (0.0), so no
  member has an advantage (ms-swift has already encoded their labels: they get no policy gradient).
* A group in which every member failed is dropped under both.

Once per training batch the kit's ``FailedSteps`` counts it, over every process's rows
(``job.rollout.max_failed_steps`` consecutive batches with nothing trainable stop the run with the
first error, on every process at once) and the kit's ``step_metrics`` of the whole batch are added
to ms-swift's logged metrics (``aworld/*``).

Rows that did not come from the ``aworld`` scheduler (another scheduler, single-turn GRPO) have no
episode: they are scored from the completion text as the final answer, with the row's
``aworld_sample``; a value that fails gets the mean of its ms-swift prompt group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from swift.rewards import ORM

from aworld_core.errors import UsageError
from aworld_core.rewards import validate_reward_value
from aworld_core.schemas import Episode, EpisodeStatus, Sample, TrainingView
from aworld_core.worker import (
    EpisodeGroup,
    GroupPolicy,
    apply_group_policy,
    is_trainable,
    mask_of_runs,
    step_metrics,
)
from aworld_swift.rows import parse_sample
from aworld_swift.trajectory import INFO_KEY

logger = logging.getLogger(__name__)

JOB_REWARD = "aworld"
T = TypeVar("T")


@dataclass
class Judgement:
    """A generation batch under the group policy, over every training process's rows in process
    order (the order ms-swift gathers rewards in): each row's ``rollout_infos`` entry and record
    (``None``: not from the aworld scheduler), the groups, the rows of each group, and where this
    process's rows are (``offset``, ``count``)."""

    entries: list[dict[str, Any] | None]
    records: list[Episode | None]
    groups: list[EpisodeGroup]
    rows: list[list[int]]
    offset: int = 0
    count: int = 0
    copies: dict[int, list[int]] | None = None  # a member's row -> every row of its episode (one per segment)

    def local(self, values: list[T]) -> list[T]:
        """This process's slice of a list over the whole batch."""
        return values[self.offset:self.offset + self.count]

    def values(self, own: list[float | None] | None = None) -> list[float]:
        """Every row's value for ms-swift's group statistics (``EpisodeGroup.rewards("mean")``):
        the job's reward, or with ``own`` (per row) a reward function's own values; 0.0 for rows
        not from the aworld scheduler."""
        batch = [0.0] * len(self.records)
        for group, rows in zip(self.groups, self.rows, strict=True):
            members = [self.records[i] for i in rows]
            if own is not None:
                members = [_with_reward(m, own[i]) for m, i in zip(members, rows, strict=True)]
            column = EpisodeGroup(group.group_id, group.sample, members, group.dropped, group.policy)  # type: ignore[arg-type]
            for i, value in zip(rows, column.rewards("mean"), strict=True):
                for row in (self.copies or {}).get(i, [i]):
                    batch[row] = float(value)  # type: ignore[arg-type]
        return batch

    def episodes(self) -> list[Episode]:
        """The batch's episodes, once each (an episode of several segments has a row per segment)."""
        return [self.records[i] for rows in self.rows for i in rows]  # type: ignore[misc]


class AworldReward(ORM):
    """The job's reward (``reward_name`` None) or one named core reward, per trajectory."""

    reward_name: ClassVar[str | None] = None

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        infos = kwargs.get("rollout_infos") or [None] * n
        entries = [info.get(INFO_KEY) if isinstance(info, dict) else None for info in infos]
        values: list[float] = [0.0] * n
        judged = judge(entries, kwargs)  # on every process: it gathers the batch's rows
        if judged is not None:
            own = self._own_rewards(judged) if self.reward_name is not None else None
            for i, value in enumerate(judged.local(judged.values(own))):
                if entries[i] is not None:
                    values[i] = value
        foreign = [i for i, entry in enumerate(entries) if entry is None]
        if foreign:
            samples = kwargs.get("aworld_sample") or [None] * n
            prompts = kwargs.get("prompt_id") or [None] * n
            scored = {i: self._from_completion(completions[i], samples[i]) for i in foreign}
            for i in foreign:
                values[i] = _prompt_mean(i, scored, prompts)
        return values

    # -- rows from the aworld scheduler -------------------------------------------------------------

    def _own_rewards(self, judged: Judgement) -> list[float | None]:
        """This function's reward of every row of the batch: each process computes its own rows
        (their episodes are in that process in colocate mode) and the values are gathered. Only a
        member that trains needs one; a value that fails is ``None`` (the group's mean, like any
        member that does not train)."""
        mine: list[float | None] = []
        for record, entry in zip(judged.local(judged.records), judged.local(judged.entries), strict=True):
            value = None
            if record is not None and entry is not None and is_trainable(record):
                value = self._from_episode(entry)
                if value is None:
                    logger.warning("reward %s failed on trajectory %s: it gets its group's mean (no advantage)",
                                   type(self).__name__, entry["episode_id"])
            mine.append(value)
        parts, _ = gather_parts(mine)
        return [value for part in parts for value in part]

    def _from_episode(self, entry: dict[str, Any]) -> float | None:
        name = self.reward_name
        assert name is not None
        if name in (entry.get("rewards") or {}):
            return float(entry["rewards"][name])
        if name in (entry.get("reward_errors") or {}):
            return None
        from aworld_swift.runtime import get_runtime

        found = get_runtime().episode(entry["episode_id"])
        if found is None:
            raise UsageError(
                f"reward '{JOB_REWARD}_{name}' is not among the job's rewards and episode {entry['episode_id']} "
                f"ran in another process (a 'swift rollout' server): add '{name}' to the job's reward instead"
            )
        episode, sample = found
        return self._compute(name, episode, sample)

    # -- other rows -------------------------------------------------------------------------------

    def _from_completion(self, completion: Any, raw_sample: Any) -> float | None:
        if raw_sample is None:
            raise UsageError(
                f"reward '{type(self).__name__}' needs the 'aworld_sample' column of the dataset aworld-swift "
                f"converts (it holds each row's ground truth)"
            )
        sample = parse_sample(raw_sample)
        episode = Episode(task_id=sample.id, agent_id="swift", final_answer=_text(completion))
        episode.finish(EpisodeStatus.SUCCESS)
        if self.reward_name is not None:
            return self._compute(self.reward_name, episode, sample)
        from aworld_swift.runtime import get_runtime

        runtime = get_runtime()
        names = runtime.job.reward if isinstance(runtime.job.reward, list) else [runtime.job.reward]
        values = [self._compute(getattr(n, "name", n), episode, sample, getattr(n, "trajectory_aware", None))
                  for n in names]
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    def _compute(self, name: str, episode: Episode, sample: Sample, trajectory_aware: bool | None = None) -> float | None:
        """One core reward on one episode; ``None`` (and a warning) when the reward fails.

        With the job's runtime (``AWORLD_SWIFT_JOB``) it runs on the episode loop with the job's
        directory for relative reward files; without one (a named reward used in some other GRPO
        run), on a private loop with the installed plugins."""
        import asyncio

        from aworld_core import maybe_await
        from aworld_core.rewards import compute_named_reward
        from aworld_swift.runtime import current_runtime, get_runtime

        runtime = get_runtime() if self.reward_name is None else current_runtime()

        async def compute() -> Any:
            return await maybe_await(compute_named_reward(
                name, episode, sample, base_dir=runtime.job.base_dir if runtime else None,
                trajectory_aware=trajectory_aware,
            ))

        try:
            value = runtime.loop.run(compute()) if runtime else asyncio.run(compute())
            return validate_reward_value(name, value)
        except UsageError:
            raise
        except Exception as exc:
            logger.warning("reward %s failed on episode %s: %s: %s", name, episode.id, type(exc).__name__, exc)
            return None


def episode_record(entry: dict[str, Any], response_ids: list[int] | None) -> Episode:
    """The episode of a ``rollout_infos`` entry as the trainer sees it: its outcome (status,
    error, rewards), and when it has a training view, a view of the response ms-swift trains
    (its ids, as ms-swift holds them, and the view's mask; the prompt, logprobs and versions
    travel in ms-swift's own fields and are left out). Its steps stay where the episode ran."""
    record = Episode(
        id=entry["episode_id"], task_id=entry["task_id"], agent_id=entry.get("agent_id") or "agent",
        status=EpisodeStatus(entry["status"]), error=entry.get("error"), reward=entry.get("reward"),
        rewards=dict(entry.get("rewards") or {}), reward_errors=dict(entry.get("reward_errors") or {}),
    )
    runs = entry.get("mask_runs")
    if runs is not None:
        mask = mask_of_runs(runs)
        if response_ids is None or len(response_ids) < len(mask):
            raise UsageError(
                f"trajectory {entry['episode_id']} has {len(response_ids or [])} response ids in ms-swift's row "
                f"but its episode's view has {len(mask)}; the aworld reward functions need ms-swift's "
                f"'response_token_ids' column (ms-swift 4.6 passes it to reward functions)"
            )
        ids = response_ids[len(response_ids) - len(mask):]  # after a response prefix ms-swift may add
        record.training = TrainingView(prompt_ids=[], response_ids=ids, response_mask=mask,
                                       response_logprobs=[], response_versions=[])
    return record


def judge(entries: list[dict[str, Any] | None], kwargs: dict[str, Any]) -> Judgement | None:
    """The generation batch's records under the group policy, decided on whole groups over every
    training process's rows, once per batch (every aworld reward function of the batch gets the
    same judgement); ``None`` when no row of the batch came from the aworld scheduler. A training
    batch also counts toward the all-failed stop and logs its metrics.

    Every training process must call it for every batch (it gathers); with one process nothing is
    gathered. The decision is deterministic and the same on every process."""
    keys, _ = gather_parts(tuple(entry["episode_id"] if entry else "" for entry in entries))
    if not any(any(key) for key in keys):
        return None
    from aworld_swift.runtime import get_runtime

    runtime = get_runtime()
    key = tuple(keys)  # the same on every process, so every process gathers below, or none does
    if runtime.judged is not None and runtime.judged[0] == key:
        return runtime.judged[1]
    n = len(entries)
    ids = kwargs.get("response_token_ids") or [None] * n
    raw = kwargs.get("aworld_sample") or [None] * n
    records = [None if entry is None else episode_record(entry, _flat(ids[i])) for i, entry in enumerate(entries)]
    first: set[str] = set()  # a group's sample travels once per process
    raw_samples: list[Any] = []
    for entry, value in zip(entries, raw, strict=True):
        raw_samples.append(value if entry is not None and entry["task_id"] not in first else None)
        if entry is not None:
            first.add(entry["task_id"])
    parts, rank = gather_parts((list(entries), records, raw_samples))
    judged = judge_parts(parts, rank, runtime.policy)
    runtime.judged = (key, judged)
    ran = judged.episodes()
    training = runtime.training()
    if training:
        runtime.failed_steps.step(ran)  # raises after max_failed_steps batches with nothing trainable
    ran_entries = [judged.entries[i] for rows in judged.rows for i in rows]
    _log(runtime, batch_metrics(ran, ran_entries), "train" if training else "eval")
    return judged


def judge_parts(parts: list[tuple[list[dict[str, Any] | None], list[Episode | None], list[Any]]], rank: int,
                policy: GroupPolicy) -> Judgement:
    """The group policy over every process's rows (``parts``: per process in process order, its
    ``rollout_infos`` entries, records and raw samples), for process ``rank``. No gathering: the
    same parts give the same groups on every process; only ``offset`` and ``count`` differ."""
    entries = [entry for part in parts for entry in part[0]]
    records = [record for part in parts for record in part[1]]
    raw_samples = [raw for part in parts for raw in part[2]]
    if not len(entries) == len(records) == len(raw_samples):
        raise UsageError("aworld reward functions: a process gave entries, records and samples of different lengths")
    members: dict[str, list[int]] = {}
    copies: dict[int, list[int]] = {}  # an episode's first row -> all its rows (one per training segment)
    first_row: dict[str, int] = {}
    for i, record in enumerate(records):
        if record is None:
            continue
        if record.id in first_row:  # a later segment of an episode already in its group
            copies[first_row[record.id]].append(i)
            continue
        first_row[record.id] = i
        copies[i] = [i]
        members.setdefault(record.task_id, []).append(i)  # a GRPO group: the generations of one dataset row
    groups = []
    for task_id, rows in members.items():
        raw = next((raw_samples[i] for i in rows if raw_samples[i] is not None), None)
        sample = parse_sample(raw) if isinstance(raw, (str, dict)) else Sample(id=task_id, prompt=[])
        groups.append(apply_group_policy(task_id, sample, [records[i] for i in rows], policy))  # type: ignore[misc]
    offset = sum(len(part[0]) for part in parts[:rank])
    return Judgement(entries, records, groups, list(members.values()), offset, len(parts[rank][0]), copies)


def gather_parts(obj: T) -> tuple[list[T], int]:
    """``obj`` of every training process, in process order (``torch.distributed``'s
    ``all_gather_object`` over the default group, the processes ms-swift gathers rewards from),
    and this process's index; with one process (or no process group), ``([obj], 0)``."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - ms-swift needs torch
        return [obj], 0
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj], 0
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, obj)
    return parts, dist.get_rank()


def batch_metrics(records: list[Episode], entries: list[dict[str, Any]]) -> dict[str, float]:
    """The kit's ``step_metrics`` of the batch; records carry no steps, so the tool and turn
    figures come from the counts the scheduler recorded."""
    metrics = step_metrics(records)
    n = len(entries) or 1
    # a record holds one row's segment: an episode's segment count travels in its rows' entries
    counts = [int(e.get("segment_count") or 1) for r, e in zip(records, entries, strict=True) if is_trainable(r)]
    if counts:
        metrics["aworld/segmented_rate"] = sum(1 for c in counts if c > 1) / (len(records) or 1)
        metrics["aworld/segments"] = sum(counts) / len(counts)
    results = sum(int(e.get("tool_results") or 0) for e in entries)
    metrics["aworld/tool_call_rate"] = sum(1 for e in entries if e.get("tool_calls")) / n
    metrics["aworld/tool_error_rate"] = sum(int(e.get("tool_errors") or 0) for e in entries) / results if results else 0.0
    metrics["aworld/turns"] = sum(int(e.get("llm_calls") or 0) for e in entries) / n
    return metrics


def _log(runtime: Any, metrics: dict[str, float], mode: str) -> None:
    """Into ms-swift's metrics of the running mode (logged with its next entry), and on the runtime."""
    runtime.last_metrics = metrics
    store = getattr(runtime.trainer, "_metrics", None)
    if isinstance(store, dict) and mode in store:
        for key, value in metrics.items():
            store[mode][key].append(value)


def _with_reward(record: Episode | None, value: float | None) -> Episode | None:
    """``record`` with a reward function's own value: a member that trains needs it; one whose
    value failed (``None``) gets none (the group's mean, like any member that does not train)."""
    if record is None or not is_trainable(record):
        return record
    return record.model_copy(update={"reward": value})


def _flat(ids: Any) -> list[int] | None:
    """ms-swift's ``response_token_ids`` of one row (a list per segment) as one list."""
    if not ids:
        return None
    if isinstance(ids[0], list):
        return [int(i) for segment in ids for i in segment]
    return [int(i) for i in ids]


def _prompt_mean(index: int, scored: dict[int, float | None], prompts: list[Any]) -> float:
    """A row without an episode: its value, or when that failed, the mean of its prompt group's."""
    value = scored[index]
    if value is not None:
        return float(value)
    logger.warning("a reward failed on a completion: it gets its prompt group's mean (no advantage)")
    peers = [v for i, v in scored.items() if v is not None and prompts[i] is not None and prompts[i] == prompts[index]]
    return sum(peers) / len(peers) if peers else 0.0


def _text(completion: Any) -> str:
    """A completion as text: ms-swift hands over token-backed assistant turns as id lists."""
    if isinstance(completion, str):
        return completion
    ids = completion.get("token_ids") if isinstance(completion, dict) else completion
    if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        from aworld_swift.runtime import JOB_ENV, current_runtime

        runtime = current_runtime()
        if runtime is None or runtime.tokenizer is None:
            raise UsageError(
                f"a completion arrived as token ids and there is no tokenizer to read it: run with the aworld "
                f"scheduler and {JOB_ENV} set to the job file (the tokenizer is the scheduler's)"
            )
        return runtime.tokenizer.decode(ids, skip_special_tokens=True)
    return "" if completion is None else str(completion)


def reward_classes(names: list[str]) -> dict[str, type[AworldReward]]:
    """``{'aworld': ..., 'aworld_<name>': ...}`` for the job's reward and each registered name."""
    classes: dict[str, type[AworldReward]] = {JOB_REWARD: type(JOB_REWARD, (AworldReward,), {"reward_name": None})}
    for name in names:
        key = f"{JOB_REWARD}_{name}"
        classes[key] = type(key, (AworldReward,), {"reward_name": name})
    return classes
