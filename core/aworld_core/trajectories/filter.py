"""Which collected episodes become training data, and why the others do not.

``filter_episodes(episodes, FilterSpec(...))`` applies the checks in a fixed order (each dropped
episode is counted under the first reason it fails), then removes duplicates and keeps the best
``n`` per task; ``split_by_task`` puts every episode of a task on the same side of a train /
validation split. The ``FilterReport`` says what was kept and dropped, in episodes and tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aworld_core.schemas import Episode, EpisodeStatus
from aworld_core.trajectories.read import task_key
from aworld_core.worker.credit import episode_segments

STOPS_TRUNCATED = ("length", "max_steps")  # the runtime's metadata["stop"] values for a cut-off episode


class FilterSpec(BaseModel):
    """What an episode must satisfy to be kept. ``None`` switches a check off."""

    model_config = ConfigDict(extra="forbid")

    statuses: list[EpisodeStatus] = Field(default_factory=lambda: [EpisodeStatus.SUCCESS],
                                          description="Episode statuses kept (only success is trainable).")
    min_reward: float | None = Field(default=None, description="Keep episodes whose reward is at least this.")
    min_turns: int | None = Field(default=None, ge=0, description="LLM calls per episode, at least.")
    max_turns: int | None = Field(default=None, ge=0, description="LLM calls per episode, at most.")
    tool_use: bool | None = Field(default=None, description="True: only episodes that called a tool; "
                                                            "False: only those that did not.")
    drop_truncated: bool = Field(default=True, description="Drop episodes cut off by a length limit or "
                                                           "max_steps (they teach stopping mid-way).")
    min_tokens: int | None = Field(default=None, ge=0, description="Prompt + response tokens, at least.")
    max_tokens: int | None = Field(default=None, ge=1, description="Prompt + response tokens, at most.")
    require_tokens: bool = Field(default=False, description="Drop episodes without token data (for the "
                                                            "token-exact format).")
    dedupe: bool = Field(default=True, description="Drop repeated identical trajectories of one task.")
    best_of_n: int | None = Field(default=None, ge=1, description="Keep the n best episodes of each task "
                                                                  "(reward, then fewer turns, then fewer tokens).")


def num_turns(episode: Episode) -> int:
    """LLM calls in the episode (every agent's)."""
    return len(episode.steps)


def num_tool_calls(episode: Episode) -> int:
    return sum(len(step.exp_data.actions) for step in episode.steps)


def is_truncated(episode: Episode) -> bool:
    view = episode.training
    return bool(view is not None and view.any_truncated) or episode.metadata.get("stop") in STOPS_TRUNCATED


def num_tokens(episode: Episode) -> int | None:
    """Prompt + response tokens of the episode's training segments; ``None`` without token data."""
    views = training_views(episode)
    if not views:
        return None
    return sum(len(v["prompt_ids"]) + len(v["response_ids"]) for v in views)


def num_sampled_tokens(episode: Episode) -> int | None:
    views = training_views(episode)
    if not views:
        return None
    return sum(sum(v["response_mask"]) for v in views)


def training_views(episode: Episode) -> list[dict[str, Any]]:
    """The episode's training segments as dicts (``prompt_ids``, ``response_ids``, ``response_mask``,
    ...), each token-exact on its own, in order: the primary session's segments (one, or more when
    its history was rewritten or compacted), then a Swarm's other trained agents' sessions
    (``metadata.extra_training``)."""
    return [segment.model_dump() for segment in episode_segments(episode)]


def stale_rewrite(episode: Episode) -> bool:
    """Whether a view was recorded before segments existed and its client rewrote its history: its
    turns after the rewrite were never recorded, so its tokens are only part of the episode."""
    views = [episode.training.model_dump()] if episode.training is not None else []
    views += [v for v in episode.metadata.get("extra_training") or [] if isinstance(v, dict)]
    return any(v.get("history_rewritten") and not v.get("later_segments") for v in views)


def _signature(episode: Episode) -> str:
    """Identical trajectories of one task have equal signatures (messages and sampled ids)."""
    views = training_views(episode)
    payload = json.dumps([task_key(episode), episode.messages, [v.get("response_ids") for v in views]],
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class Tally:
    episodes: int = 0
    tokens: int = 0
    unknown_tokens: int = 0  # episodes without token data

    def add(self, episode: Episode) -> None:
        self.episodes += 1
        tokens = num_tokens(episode)
        if tokens is None:
            self.unknown_tokens += 1
        else:
            self.tokens += tokens

    def as_dict(self) -> dict[str, int]:
        return {"episodes": self.episodes, "tokens": self.tokens, "episodes_without_tokens": self.unknown_tokens}


@dataclass
class FilterReport:
    """Kept and dropped episodes, counted per reason (first failed check) in episodes and tokens."""

    total: Tally = field(default_factory=Tally)
    kept: Tally = field(default_factory=Tally)
    dropped: dict[str, Tally] = field(default_factory=dict)
    sampled_tokens: int = 0  # kept episodes' tokens with mask 1 (what token-exact SFT trains on)
    tasks_total: int = 0
    tasks_kept: int = 0

    def drop(self, reason: str, episode: Episode) -> None:
        self.dropped.setdefault(reason, Tally()).add(episode)

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total.as_dict(),
            "kept": {**self.kept.as_dict(), "sampled_tokens": self.sampled_tokens, "tasks": self.tasks_kept},
            "tasks": self.tasks_total,
            "dropped": {reason: tally.as_dict() for reason, tally in self.dropped.items()},
        }

    def lines(self) -> list[str]:
        def tokens(t: Tally) -> str:
            text = f"{t.tokens:,} tokens"
            return text + (f" (+{t.unknown_tokens} without token data)" if t.unknown_tokens else "")

        out = [
            f"read {self.total.episodes} episodes of {self.tasks_total} tasks, {tokens(self.total)}",
            f"kept {self.kept.episodes} episodes of {self.tasks_kept} tasks, {tokens(self.kept)}; "
            f"{self.sampled_tokens:,} sampled (trained) tokens",
        ]
        for reason, tally in sorted(self.dropped.items(), key=lambda kv: -kv[1].episodes):
            out.append(f"  dropped {tally.episodes:>6} ({tokens(tally)}): {reason}")
        return out


def _first_failure(episode: Episode, spec: FilterSpec) -> str | None:
    if episode.status not in spec.statuses:
        allowed = ", ".join(s.value for s in spec.statuses)
        return f"status {episode.status.value} (kept: {allowed})"
    if not episode.messages and episode.training is None:
        return "no trajectory (no messages, no token data)"
    if spec.min_reward is not None:
        if episode.reward is None:
            return "no reward (unscored or the reward failed)"
        if episode.reward < spec.min_reward:
            return f"reward below {spec.min_reward:g}"
    turns = num_turns(episode)
    if spec.min_turns is not None and turns < spec.min_turns:
        return f"fewer than {spec.min_turns} turns"
    if spec.max_turns is not None and turns > spec.max_turns:
        return f"more than {spec.max_turns} turns"
    if spec.tool_use is not None and (num_tool_calls(episode) > 0) != spec.tool_use:
        return "no tool call" if spec.tool_use else "called a tool"
    if spec.drop_truncated and is_truncated(episode):
        return "truncated (length limit or max_steps)"
    views = training_views(episode)
    if spec.require_tokens and not views:
        return "no token data (required for the token-exact format)"
    if views and spec.require_tokens and stale_rewrite(episode):
        return "history rewritten, recorded before segments (its later turns have no token data)"
    tokens = num_tokens(episode)
    if spec.min_tokens is not None or spec.max_tokens is not None:
        if tokens is None:
            return "no token data (a token length limit is set)"
        if spec.min_tokens is not None and tokens < spec.min_tokens:
            return f"fewer than {spec.min_tokens} tokens"
        if spec.max_tokens is not None and tokens > spec.max_tokens:
            return f"more than {spec.max_tokens} tokens"
    return None


def _rank(episode: Episode) -> tuple[float, int, int, str]:
    """Smaller is better: higher reward, fewer turns, fewer tokens, then the id (deterministic)."""
    reward = episode.reward if episode.reward is not None else float("-inf")
    return (-reward, num_turns(episode), num_tokens(episode) or 0, episode.id)


def filter_episodes(episodes: Sequence[Episode], spec: FilterSpec | None = None) -> tuple[list[Episode], FilterReport]:
    """The kept episodes (input order) and the report of what was dropped and why."""
    spec = spec or FilterSpec()
    report = FilterReport()
    passing: list[Episode] = []
    for episode in episodes:
        report.total.add(episode)
        reason = _first_failure(episode, spec)
        if reason is None:
            passing.append(episode)
        else:
            report.drop(reason, episode)
    report.tasks_total = len({task_key(e) for e in episodes})
    if spec.dedupe:
        seen: set[str] = set()
        unique = []
        for episode in passing:
            signature = _signature(episode)
            if signature in seen:
                report.drop("duplicate of a kept trajectory of the same task", episode)
            else:
                seen.add(signature)
                unique.append(episode)
        passing = unique
    if spec.best_of_n is not None:
        by_task: dict[str, list[Episode]] = defaultdict(list)
        for episode in passing:
            by_task[task_key(episode)].append(episode)
        chosen = {id(e) for group in by_task.values() for e in sorted(group, key=_rank)[: spec.best_of_n]}
        for episode in passing:
            if id(episode) not in chosen:
                report.drop(f"not among the best {spec.best_of_n} of its task", episode)
        passing = [e for e in passing if id(e) in chosen]
    for episode in passing:
        report.kept.add(episode)
        report.sampled_tokens += num_sampled_tokens(episode) or 0
    report.tasks_kept = len({task_key(e) for e in passing})
    return passing, report


def split_by_task(episodes: Sequence[Episode], val_fraction: float, seed: int = 0) -> tuple[list[Episode], list[Episode]]:
    """(train, val): a task's episodes all go to one side, chosen by a hash of its key and
    ``seed``, so the split is stable as more episodes are collected."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    train, val = [], []
    for episode in episodes:
        digest = hashlib.sha256(f"{seed}:{task_key(episode)}".encode()).digest()
        share = int.from_bytes(digest[:8], "big") / 2**64
        (val if share < val_fraction else train).append(episode)
    return train, val
