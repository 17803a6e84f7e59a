"""The ``trl`` backend's entry point: GRPO with TRL in this process, episodes from the core.

``train(job, output_dir)`` is what the plan's entry point names; the core's launcher calls it
in-process (after building the model directory and starting the job's tool environment). It

1. loads the model and tokenizer at ``model.path``, the agent (the worker kit's
   ``build_agent``), the datasets (core loaders) and the reward (core registry);
2. wraps the model being trained in a ``HFTokenEngine`` and the kit's ``build_token_llm``, so
   rollouts sample from the live policy (on-policy) and keep their exact tokens;
3. evaluates greedily on the test set, trains with ``GRPOTrainer`` + our ``rollout_func`` (the
   kit's ``EpisodeRunner``, group policy and ``FailedSteps``), evaluates again;
4. writes the checkpoint, ``metrics.jsonl``, ``metrics.png``, trajectories (JSONL) and
   ``summary.json``, and prints a summary line (and the targets, when the job sets them).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import TrainResult


def train(job: Any, output_dir: str) -> TrainResult:
    """Run the job's GRPO training on TRL; returns what it measured and wrote. (A job with
    ``sft:`` is ``aworld_trl.sft:train``'s, the SFT plan's entry point.)

    ``job``: a ``JobConfig`` (what the backend's launcher passes: the job the core parsed), a
    dict, JSON text or a config file (the kit's ``load_job``)."""
    from aworld_core.worker import load_job

    job = load_job(job)
    if job.sft is not None:
        raise UsageError("this job sets sft: (supervised fine-tuning); its entry point is aworld_trl.sft:train, "
                         "which the trl backend's SFT plan names (aworld_trl.trainer:train runs GRPO)")
    return TrlRun(job, Path(output_dir)).run()


class TrlRun:
    """One training run, from loading the model to the summary."""

    def __init__(self, job: Any, output_dir: Path):
        self.job = job
        self.output_dir = output_dir
        self.started = time.perf_counter()
        self.metrics: dict[str, Any] = {}
        self.artifacts: dict[str, str] = {}

    # -- setup ----------------------------------------------------------------------------------

    def _check_job(self) -> None:
        missing = []
        if self.job.model is None:
            missing.append("model (model.path: the local model directory the trl backend trains)")
        if self.job.train_dataset is None:
            missing.append("train_dataset")
        if self.job.reward is None:
            missing.append("reward")
        if missing:
            raise UsageError("the trl backend needs " + ", ".join(missing) + " in the job config")

    def _load_model(self) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM

        from aworld_core.tokens import load_tokenizer

        model_path = Path(self.job.resolve_path(self.job.model.path))
        if not model_path.exists():
            raise UsageError(
                f"model.path '{model_path}' does not exist; point it at a local model directory "
                f"(or set model.build to create it)"
            )
        tokenizer_path = self.job.resolve_path(self.job.model.tokenizer) if self.job.model.tokenizer else model_path
        tokenizer = load_tokenizer(tokenizer_path)
        self.tokenizer_dir = Path(tokenizer_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(str(model_path))
        return model, tokenizer

    def _quiet(self) -> None:
        """Keep the terminal to our progress bar and lines (a GRPO and an SFT run alike)."""
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        # TRL 1.16 calls transformers 5's deprecated gradient_checkpointing names on every step;
        # the user can do nothing about it, so it must not bury the progress bar
        warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # weight loading/saving bars would interleave with ours

    def _use_options(self, options: Any) -> None:
        """The run's ``backends.trl.aworld`` options; torch's threads set from them."""
        from aworld_trl.options import apply_torch_threads

        self.options = options
        threads = apply_torch_threads(options.torch_threads)
        if threads is not None:
            self.metrics["torch_threads"] = threads

    def _hf_engine(self, model: Any, tokenizer: Any, max_new_tokens: int | None, concurrency: int) -> Any:
        from aworld_core.tokens import HFTokenEngine

        return HFTokenEngine(model, tokenizer, max_new_tokens=max_new_tokens,
                             batch_window_s=self.options.engine_batch_window_s,
                             max_batch_size=self.options.engine_max_batch_size or concurrency)

    def _samples(self) -> tuple[list[Any], list[Any] | None]:
        from aworld_core.datasets import load_dataset_section

        train = load_dataset_section(self.job.train_dataset, self.job.base_dir)
        if not train:
            raise UsageError("train_dataset has no rows")
        test = load_dataset_section(self.job.test_dataset, self.job.base_dir) if self.job.test_dataset else None
        return train, test

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> TrainResult:
        _quiet_trl_unscored_warning()
        self._quiet()
        from aworld_core.export import JsonlEpisodeWriter
        from aworld_core.rewards import RewardStats
        from aworld_core.worker import EpisodeRunner, FailedSteps, LoopThread, build_agent, build_token_llm
        from aworld_trl.options import grpo_config
        from aworld_trl.rollout import AworldRollout, trl_sampling

        self._check_job()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        args, options = grpo_config(self.job, self.output_dir)
        self.policies: list[str] | None = None  # several policies: the trained adapters (aworld_trl.multi_policy)
        if self.job.policies:
            from aworld_core.policies import trained_policies
            from aworld_trl.multi_policy import check_multi_policy

            check_multi_policy(self.job, options, args)
            self.policies = trained_policies(self.job)
        self._use_options(options)
        train_samples, test_samples = self._samples()
        agent = build_agent(self.job)
        model, tokenizer = self._load_model()
        model.to(args.device)  # where TRL will train it, so evaluation before training runs there too
        if self.policies is not None:  # one adapter per policy on the job's model
            from aworld_trl.multi_policy import build_policy_model

            model = build_policy_model(self.job, model).to(args.device)
        concurrency = self.job.rollout.concurrency
        if options.vllm is not None:  # backends.trl.use_vllm: vLLM samples, weights synced every step
            engine = self._vllm_engine(args, options.vllm)
        else:
            engine = self._hf_engine(model, tokenizer, args.max_completion_length, concurrency)
        if self.policies is not None:  # one token client per policy, each agent routed to its own
            from aworld_trl.multi_policy import build_router

            llm = build_router(self.job, engine, tokenizer, args.max_completion_length)
        else:
            llm = build_token_llm(engine, tokenizer, self.job, max_response_tokens=args.max_completion_length)
        # reward, timeout, max_turns (when set), concurrency and the group policy: from the job
        runner = EpisodeRunner.from_job(self.job, llm, agent=agent)
        evaluator = EpisodeRunner.from_job(self.job, llm, agent=agent, stats=RewardStats(),
                                           concurrency=options.eval_concurrency or concurrency)
        placeholder = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
        writer = None
        if options.trajectory_every:
            writer = JsonlEpisodeWriter(self.output_dir / "trajectories.jsonl", append=False)
            self.artifacts["trajectories"] = str(writer.path)
        loop = LoopThread("aworld-trl-rollout")
        try:
            if options.vllm is not None:
                started = time.perf_counter()
                loop.run(engine.start())
                self.metrics["vllm_start_seconds"] = round(time.perf_counter() - started, 1)
            before = self._evaluate(evaluator, loop, test_samples, "before", model) if options.eval_before else None
            rollout_cls, extra = AworldRollout, {}
            if options.async_rollout is not None:  # asynchronous GRPO (aworld_trl.async_grpo)
                from aworld_trl.async_grpo import AsyncRollout

                rollout_cls, extra = AsyncRollout, options.async_rollout.model_dump()
            rollout = rollout_cls(
                runner, train_samples, loop=loop, engine=engine, placeholder_id=placeholder,
                sampling=trl_sampling(args), writer=writer, trajectory_every=options.trajectory_every,
                failed_steps=FailedSteps(self.job.rollout.max_failed_steps, setting="rollout.max_failed_steps"),
                torch_threads=options.rollout_torch_threads, **extra,
                policies=None if self.policies is None else (self.policies, dict(self.job.agent_policies)),
            )
            trainer, progress = self._trainer(model, tokenizer, args, rollout)
            # TrainingArguments only carries resume_from_checkpoint: Trainer.train must be given it
            # (weights, optimizer, scheduler, RNG and the step count continue from the checkpoint)
            trainer.train(resume_from_checkpoint=options.resume)
            rollout.sync_weights(model, trainer.state.global_step)  # evaluate the trained weights
            if options.async_rollout is not None:
                self.metrics["async/staleness_tokens"] = {str(k): v for k, v in sorted(rollout.staleness.items())}
                self.metrics["async/prefetch_misses"] = rollout.misses
            after = self._evaluate(evaluator, loop, test_samples, "after", model) if options.eval_after else None
        finally:
            if options.vllm is not None:
                loop.run(engine.aclose())
            loop.close()
            if writer is not None:
                writer.close()
        if options.save_checkpoint:
            self._save_checkpoint(trainer)
        self._finish(progress.history, before, after)
        return TrainResult(backend="trl", output_dir=str(self.output_dir), metrics=self.metrics,
                           artifacts=self.artifacts)

    def _save_checkpoint(self, trainer: Any) -> None:
        """The trained model (or LoRA adapter) and the tokenizer files in ``<output>/checkpoint``."""
        from aworld_core.tokens import copy_tokenizer_files

        checkpoint = self.output_dir / "checkpoint"
        trainer.save_model(str(checkpoint))
        copy_tokenizer_files(self.tokenizer_dir, checkpoint)
        self.artifacts["checkpoint"] = str(checkpoint)

    def _vllm_engine(self, args: Any, settings: Any) -> Any:
        """vLLM's async engine on the model directory, colocated with the trainer: on a CPU in
        float32, eager, with 5% of system memory for its KV cache unless the job says otherwise."""
        from aworld_core.tokens import VLLMTokenEngine
        from aworld_trl.options import CPU_VLLM_MEMORY, _has_gpu

        gpu = _has_gpu()
        memory = settings.gpu_memory_utilization
        if memory is None:
            memory = 0.3 if gpu else CPU_VLLM_MEMORY  # 0.3: TRL's own default for a colocated vLLM
        extra = {"model_impl": settings.model_impl} if settings.model_impl else {}
        return VLLMTokenEngine(
            self.job.resolve_path(self.job.model.path),
            dtype="auto" if gpu else "float32",
            max_model_len=settings.max_model_len,
            gpu_memory_utilization=memory,
            enforce_eager=not gpu,
            seed=self.job.seed,
            max_new_tokens=args.max_completion_length,
            engine_kwargs=extra,
        )

    def _trainer(self, model: Any, tokenizer: Any, args: Any, rollout: Any) -> tuple[Any, Any]:
        from datasets import Dataset

        from aworld_trl.async_grpo import async_trainer_class
        from aworld_trl.grpo import trainer_class
        from aworld_trl.progress import callback_class
        from aworld_trl.rollout import make_reward_func

        progress = self._progress(callback_class())
        reward_name = self.job.reward.name.rsplit(":", 1)[-1].rsplit("/", 1)[-1] or "reward"
        lora = self.options.lora
        cls = async_trainer_class() if self.options.async_rollout is not None else trainer_class()
        trainer = cls(
            model=model,
            reward_funcs=[make_reward_func(reward_name)],
            args=args,
            train_dataset=Dataset.from_list(rollout.dataset_rows()),
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=[progress],
            # LoRA: TRL wraps the model; peft puts the adapter layers into the model object itself,
            # so the engine that samples from ``model`` samples from the adapted policy
            peft_config=lora.peft_config() if lora is not None else None,
        )
        trainer.aworld_policies = self.policies
        return self._wired(trainer), progress

    def _progress(self, cls: type) -> Any:
        """Our progress callback (``cls``), writing ``metrics.jsonl``."""
        self.artifacts["metrics"] = str(self.output_dir / "metrics.jsonl")
        return cls(self.output_dir / "metrics.jsonl", enabled=self.options.progress, print_every=self.options.print_every)

    def _wired(self, trainer: Any) -> Any:
        """``trainer`` checked for parameter sharding (whatever set accelerate up: an accelerate config,
        env) and with transformers' own progress bar and printing replaced by ours."""
        from transformers import PrinterCallback, ProgressCallback

        from aworld_trl.options import refuse_sharded_trainer

        refuse_sharded_trainer(trainer)
        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
        return trainer

    def _evaluate(self, runner: Any, loop: Any, samples: list[Any] | None, when: str, model: Any) -> Any:
        from aworld_core.run_summary import print_eval
        from aworld_trl.evaluation import evaluate_greedy

        if not samples:
            return None
        path = self.output_dir / f"eval_{when}.jsonl"
        print(f"evaluating {len(samples)} held-out tasks {when} training (greedy, full tool loop)...", flush=True)
        report = evaluate_greedy(runner, loop, samples, tag=f"eval-{when}", output=path, model=model)
        print_eval(report, when)  # its metrics and artifact: the summary's (aworld_core.run_summary)
        return report

    # -- the end --------------------------------------------------------------------------------

    def _finish(self, history: list[dict[str, Any]], before: Any, after: Any) -> None:
        from aworld_core.run_summary import reward_headline, training_metrics

        self.metrics.update(training_metrics(history, self.options.summary_window))
        self._summarize(history, before, after, reward_headline(self.metrics, self.options.summary_window))

    def _summarize(self, history: list[dict[str, Any]], before: Any, after: Any, headline: str,
                   **plot: Any) -> None:
        """The end of a run (GRPO or SFT): the core's summary (``aworld_core.run_summary``)."""
        from aworld_core.run_summary import write_summary

        write_summary(self.output_dir, headline, history=history, metrics=self.metrics, artifacts=self.artifacts,
                      started=self.started, before=before, after=after, title=self.job.name,
                      plot=self.options.plot, targets=self.options.targets, **plot)


class _UnscoredFilter(logging.Filter):
    """TRL warns once per batch holding an unscored row; ours are failed episodes, which the
    rollout already counts (``aworld/failed_rate``), so the warning would only repeat that."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("All reward functions returned None")


def _quiet_trl_unscored_warning() -> None:
    target = logging.getLogger("trl.trainer.grpo_trainer")
    if not any(isinstance(f, _UnscoredFilter) for f in target.filters):
        target.addFilter(_UnscoredFilter())
