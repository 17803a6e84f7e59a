"""SFT on collected trajectories with TRL's ``SFTTrainer`` (a job with an ``sft:`` section).

The job's ``sft.train`` / ``sft.val`` are episode files (``python -m aworld_core.trajectories
filter`` writes them). Two dataset forms, both trained with the loss on the model's own tokens only:

* ``tokens``: each episode's exact token view (``aworld_core.trajectories.token_rows``), given to
  TRL pre-tokenized as ``input_ids`` + ``completion_mask`` with ``completion_only_loss``: the loss
  is on exactly the sampled assistant ids, never on tool output or template text, and nothing is
  re-tokenized. The tokenizer is checked against the token data; a sequence longer than
  ``max_length`` is refused (TRL would cut it).
* ``messages``: ``messages`` + ``tools`` rendered by TRL with the model's chat template and
  ``assistant_only_loss``, which needs a template that marks assistant text with
  ``{% generation %}``; another template is refused with that hint.

Every key of ``backends.trl`` except ``aworld`` is a ``trl.SFTConfig`` argument. Held-out
accuracy before and after (greedy, the full tool loop, the job's ``test_dataset`` and
``reward``), ``metrics.jsonl`` (training and validation loss), ``metrics.png``, the checkpoint
and ``summary.json`` are written beside the run, as for GRPO.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aworld_core.errors import ConfigError, UsageError
from aworld_core.schemas import TrainResult
from aworld_trl.trainer import TrlRun

GRPO_ONLY_OPTIONS = frozenset({"trajectory_every", "rollout_torch_threads"})  # our options SFT has no use for
GENERATION_MARK = re.compile(r"{%-?\s*generation\s*-?%}")
SFT_KEYS = "In an SFT job (sft: set) every key of backends.trl except 'aworld' is passed to trl.SFTConfig"
DEFAULT_EVAL_MAX_TOKENS = 128  # per reply in the held-out evaluation when agent.max_tokens is unset


def train(job: Any, output_dir: str) -> TrainResult:
    """Run the job's SFT (``sft:``) with TRL's ``SFTTrainer``: the trl backend's SFT entry point.

    ``job``: a ``JobConfig`` (what the backend's launcher passes), a dict, JSON text or a config
    file (the kit's ``load_job``)."""
    from aworld_core.worker import load_job

    job = load_job(job)
    if job.sft is None:
        raise UsageError("this job has no sft: section; GRPO's entry point is aworld_trl.trainer:train")
    return SftRun(job, Path(output_dir)).run()


def check_sft_section(job: Any) -> Any:
    """Plan-time checks (no TRL import): our options, no parameter sharding, the files exist."""
    from aworld_trl.options import refuse_sharded_training, split_section

    arguments, options = split_section(job.backend_section("trl"))
    refuse_sharded_training(arguments, job)
    ignored = sorted(GRPO_ONLY_OPTIONS & options.model_fields_set)
    if options.targets is not None and options.targets.min_final_reward is not None:
        ignored.append("targets.min_final_reward")
    if ignored:
        raise ConfigError(
            f"backends.trl.aworld.{', '.join(ignored)} only apply to GRPO (episodes sampled while training); an SFT "
            f"job trains on recorded episodes: remove them",
            [(f"backends.trl.aworld.{key}", None, "unset in an SFT job") for key in ignored],
        )
    for name in ("train", "val", "tools"):
        value = getattr(job.sft, name)
        if value is not None and not Path(job.resolve_path(value)).exists():
            raise UsageError(f"sft.{name} '{job.resolve_path(value)}' does not exist")
    if job.model is None:
        raise UsageError("an SFT job needs model (model.path: the local model directory to fine-tune)")
    import importlib.util

    if importlib.util.find_spec("trl") is not None:  # a dry-run refuses the keys the run would
        from trl import SFTConfig

        from aworld_trl.options import check_config_keys

        check_config_keys(arguments, SFTConfig, SFT_KEYS)
    return options


def sft_config(job: Any, output_dir: Path, form: str, has_val: bool) -> tuple[Any, Any]:
    """The ``SFTConfig`` for ``job`` (``form``: tokens or messages) and our options."""
    from trl import SFTConfig

    from aworld_trl.options import check_config_keys, refuse_sharded_training, split_section, trl_defaults

    arguments, options = split_section(job.backend_section("trl"))
    refuse_sharded_training(arguments, job)
    check_config_keys(arguments, SFTConfig, SFT_KEYS)
    loss_keys = {"tokens": ("completion_only_loss", True), "messages": ("assistant_only_loss", True)}
    key, value = loss_keys[form]
    if key in arguments and arguments[key] is not value:
        raise ConfigError(
            f"backends.trl.{key}={arguments[key]!r}: the {form} form trains on the model's own tokens only "
            f"({key}: true); remove the setting",
            [(f"backends.trl.{key}", arguments[key], "true (or unset)")],
        )
    if arguments.get("packing"):
        raise ConfigError("backends.trl.packing: packing is not supported for SFT on trajectories (it would mix "
                          "episodes in one sequence); remove it", [("backends.trl.packing", True, "false")])
    defaults = {**trl_defaults(job, output_dir, arguments), key: True}
    if has_val:
        defaults.update(eval_strategy="steps", eval_steps=0.1)
    try:
        config = SFTConfig(**{**defaults, **arguments})
    except (ValueError, TypeError) as exc:
        raise UsageError(f"backends.trl is not a valid TRL SFTConfig: {exc}") from None
    return config, options


def _episodes(job: Any, name: str) -> list[Any]:
    from aworld_core.trajectories import read_trajectories

    value = getattr(job.sft, name)
    if value is None:
        return []
    collection = read_trajectories(job.resolve_path(value))
    if not collection.episodes:
        raise UsageError(f"sft.{name} '{job.resolve_path(value)}' holds no episodes")
    return collection.episodes


def choose_form(requested: str, episodes: list[Any]) -> str:
    """``auto``: tokens when every episode carries token data, else messages."""
    if requested != "auto":
        return requested
    return "tokens" if all(e.training is not None for e in episodes) else "messages"


def token_dataset_rows(episodes: list[Any], tokenizer: Any, max_length: int | None, where: str) -> list[dict[str, Any]]:
    """``input_ids`` + ``completion_mask`` rows for TRL (prompt ids masked 0); refuses over-long ones."""
    from aworld_core.trajectories import token_rows

    rows = []
    for row in token_rows(episodes, tokenizer):
        ids = row["prompt_ids"] + row["completion_ids"]
        if max_length is not None and len(ids) > max_length:
            raise UsageError(
                f"{where}: episode {row['episode_id']} is {len(ids)} tokens, over backends.trl.max_length="
                f"{max_length}; TRL would cut it (training a sequence that was never sampled). Raise max_length or "
                f"drop long episodes (python -m aworld_core.trajectories filter --max-tokens {max_length})"
            )
        rows.append({"input_ids": ids, "completion_mask": [0] * len(row["prompt_ids"]) + row["completion_mask"]})
    return rows


def messages_dataset_rows(episodes: list[Any], tokenizer: Any, tools_path: str | None) -> list[dict[str, Any]]:
    from aworld_core.trajectories import messages_rows, read_tools

    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    if not GENERATION_MARK.search(template):
        raise UsageError(
            "the messages form trains with TRL's assistant_only_loss, which needs a chat template that marks "
            "assistant text with {% generation %} ... {% endgeneration %}; this model's template has none. Set "
            "model.chat_template to a template with the marks, or use sft.format: tokens (episodes with token data)"
        )
    tools = read_tools(tools_path)
    rows = messages_rows(episodes, tools)
    if tools is not None:  # one JSON text column: tool schemas differ in shape between tools
        for row in rows:
            row["tools"] = json.dumps(row["tools"])
    return rows


class SftRun(TrlRun):
    """One SFT run: load, evaluate before, ``SFTTrainer.train``, evaluate after, write, summarize."""

    def run(self) -> TrainResult:
        self._quiet()
        import datasets

        datasets.disable_progress_bars()  # TRL's dataset preparation bars would bury ours
        from aworld_core.datasets import load_dataset_section
        from aworld_core.worker import LoopThread

        self.output_dir.mkdir(parents=True, exist_ok=True)
        check_sft_section(self.job)
        train_episodes, val_episodes = _episodes(self.job, "train"), _episodes(self.job, "val")
        form = choose_form(self.job.sft.format, train_episodes + val_episodes)
        args, options = sft_config(self.job, self.output_dir, form, bool(val_episodes))
        self._use_options(options)
        model, tokenizer = self._load_model()
        if self.job.model.chat_template:
            tokenizer.chat_template = Path(self.job.resolve_path(self.job.model.chat_template)).read_text(encoding="utf-8")
        train_rows, val_rows = self._rows(form, train_episodes, val_episodes, tokenizer, args.max_length)
        self.metrics.update({"sft/format": form, "sft/train_episodes": len(train_episodes),
                             "sft/val_episodes": len(val_episodes), "sft/train_rows": len(train_rows)})
        if form == "tokens":
            self.metrics["sft/train_tokens"] = sum(len(r["input_ids"]) for r in train_rows)
            self.metrics["sft/trained_tokens_per_epoch"] = sum(sum(r["completion_mask"]) for r in train_rows)
        test = None
        if self.job.test_dataset is not None and (options.eval_before or options.eval_after):
            if self.job.reward is None:
                raise UsageError("held-out accuracy (test_dataset) needs a reward in the job config; or set "
                                 "backends.trl.aworld.eval_before/eval_after: false")
            test = load_dataset_section(self.job.test_dataset, self.job.base_dir)
        model.to(args.device)
        loop = LoopThread("aworld-trl-sft-eval") if test else None
        try:
            evaluator = self._evaluator(model, tokenizer) if test else None
            before = self._evaluate(evaluator, loop, test, "before", model) if test and options.eval_before else None
            trainer, progress = self._sft_trainer(model, tokenizer, args, train_rows, val_rows)
            trainer.train()
            after = self._evaluate(evaluator, loop, test, "after", model) if test and options.eval_after else None
        finally:
            if loop is not None:
                loop.close()
        if options.save_checkpoint:
            self._save_checkpoint(trainer)
        self._finish_sft(progress.history, before, after)
        return TrainResult(backend="trl", output_dir=str(self.output_dir), metrics=self.metrics,
                           artifacts=self.artifacts)

    def _rows(self, form: str, train: list[Any], val: list[Any], tokenizer: Any,
              max_length: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if form == "tokens":
            return (token_dataset_rows(train, tokenizer, max_length, "sft.train"),
                    token_dataset_rows(val, tokenizer, max_length, "sft.val") if val else [])
        tools = self.job.resolve_path(self.job.sft.tools) if self.job.sft.tools else None
        return (messages_dataset_rows(train, tokenizer, tools),
                messages_dataset_rows(val, tokenizer, tools) if val else [])

    def _evaluator(self, model: Any, tokenizer: Any) -> Any:
        from aworld_core.rewards import RewardStats
        from aworld_core.worker import EpisodeRunner, build_agent, build_token_llm

        concurrency = self.options.eval_concurrency or self.job.rollout.concurrency
        engine = self._hf_engine(model, tokenizer, self.job.agent.max_tokens or DEFAULT_EVAL_MAX_TOKENS, concurrency)
        # max_tokens bounds each reply, not the episode: its replies and tool results together are longer
        llm = build_token_llm(engine, tokenizer, self.job)
        return EpisodeRunner.from_job(self.job, llm, agent=build_agent(self.job), stats=RewardStats(),
                                      concurrency=concurrency)

    def _sft_trainer(self, model: Any, tokenizer: Any, args: Any, train_rows: list[dict[str, Any]],
                     val_rows: list[dict[str, Any]]) -> tuple[Any, Any]:
        from datasets import Dataset
        from trl import SFTTrainer

        progress = self._progress(sft_progress_class())
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(train_rows),
            eval_dataset=Dataset.from_list(val_rows) if val_rows else None,
            processing_class=tokenizer,
            callbacks=[progress],
        )
        return self._wired(trainer), progress

    def _finish_sft(self, history: list[dict[str, Any]], before: Any, after: Any) -> None:
        from aworld_core.plots import SFT_PANELS
        from aworld_core.run_summary import format_value, window_means

        val = [r["eval_loss"] for r in history if isinstance(r.get("eval_loss"), (int, float))]
        window = self.options.summary_window
        start, end = window_means(history, "loss", window)
        self.metrics.update({
            "steps": max((r.get("step", 0) for r in history), default=0),
            "loss/start": start,
            "loss/end": end,
            "eval_loss/first": val[0] if val else None,
            "eval_loss/last": val[-1] if val else None,
        })
        line = f"summary: SFT loss {format_value(start)} -> {format_value(end)} (mean of first/last {window} logged steps)"
        if val:
            line += f"; validation loss {val[0]:.3f} -> {val[-1]:.3f}"
        self._summarize(history, before, after, line, panels=SFT_PANELS)


def sft_progress_class() -> type:
    """The GRPO progress callback, titled SFT, also printing each validation loss."""
    from aworld_trl.progress import callback_class

    base = callback_class()

    class SftProgress(base):  # type: ignore[misc, valid-type]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.enabled and self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=state.max_steps, desc="SFT", unit="step", dynamic_ncols=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            evaluation = bool(logs) and "eval_loss" in logs
            every, self.print_every = self.print_every, (0 if evaluation else self.print_every)
            try:  # an evaluation record has none of the training metrics: only our own line for it
                super().on_log(args, state, control, logs=logs, **kwargs)
            finally:
                self.print_every = every
            if evaluation:
                line = f"step {state.global_step}/{state.max_steps}: validation loss {float(logs['eval_loss']):.4f}"
                (self.bar.write if self.bar is not None else print)(line)

    return SftProgress

