"""One AReaL training run in the trainer process, and what the job promises around AReaL's trainer.

``aworld_areal.train`` hands this the prepared config, datasets and workflow kwargs. It

1. starts the plain vLLM server the plan names (AReaL's SPMD mode; a server given by ``url`` is
   left alone, and in single-controller mode AReaL's rollout worker starts it through
   ``PlainVllmBackend.launch_server``) and stops it when the run ends, however it ends (an error,
   ``SIGTERM``);
2. puts :class:`~aworld_areal.vllm_engine.ArealVllmEngine` in place of AReaL's vLLM engine;
3. in SPMD mode clears this trial's ``name_resolve`` entries first, as AReaL's own launcher does:
   a disk weight update waits for its version's key, and a key left by an earlier run of the same
   trial would make the server reload before the new checkpoint is written;
4. runs ``PPOTrainer`` and around it: held-out accuracy before and after training (the job's
   test set, greedy, the full tool loop, through AReaL's own eval engine on the served policy:
   ``eval_before.jsonl`` / ``eval_after.jsonl``), every step's stats as AReaL commits them
   (``metrics.jsonl``, ``metrics.png``), the trained policy with its tokenizer (``checkpoint/``) and
   ``summary.json``. ``backends.areal.aworld`` turns these off (:data:`RUN_OPTIONS`).

Held-out evaluation needs an engine in this process, i.e. SPMD mode; in single-controller mode the
engines live in AReaL's rollout workers and it is skipped (said in the log and the summary).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from aworld_areal.config import RUN_OPTIONS_KEY, run_options
from aworld_areal.train import WORKFLOW


class ArealRun:
    """``PPOTrainer`` on the prepared job, with the vLLM server and the outputs the job promises."""

    def __init__(self, prepared: Any, output_dir: str | Path | None = None):
        self.prepared = prepared
        self.job = prepared.job
        self.options = run_options(self.job.backend_section("areal").get(RUN_OPTIONS_KEY))
        self.output_dir = Path(output_dir or os.getcwd()).resolve()
        self.started = time.perf_counter()
        self.metrics: dict[str, Any] = {}
        self.artifacts: dict[str, str] = {}
        self.history: list[dict[str, Any]] = []

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from areal.utils.environ import is_single_controller

        from aworld_areal import packed_attention, without_triton
        from aworld_areal.vllm_engine import install, load_server_spec

        spmd = not is_single_controller()
        spec = load_server_spec()
        without_triton.install()  # AReaL's Saver imports triton on every save (CPU builds of torch lack it)
        if self.prepared.config.actor.attn_impl == "sdpa":
            packed_attention.install()  # AReaL packs sequences; HF's sdpa would let them attend to each other
        with contextlib.ExitStack() as stack:
            _exit_on_sigterm()
            server = None
            if spec is not None:
                install()
                if spmd and spec.url is None:
                    server = stack.enter_context(self._server(spec))
            if spmd:
                clear_trial_names(self.prepared.config)
            trainer = stack.enter_context(self._trainer(server))
            before = self._evaluate(trainer, "before", spmd) if self.options["eval_before"] else None
            self._train(trainer)
            if spmd:
                trainer.rollout.pause()  # no new episodes beyond the last step while evaluating
            after = self._evaluate(trainer, "after", spmd) if self.options["eval_after"] else None
            if self.options["save_checkpoint"]:
                self._save_checkpoint(trainer)
        self._finish(before, after)
        return self.metrics

    @contextlib.contextmanager
    def _server(self, spec: Any) -> Any:
        """The vLLM server process, spawned now; ``_trainer`` waits for it once AReaL's trainer has
        built its models (the two start-ups overlap). Stopped when the run ends."""
        from aworld_areal.config import SERVER_LOG_NAME
        from aworld_core.vllm_server import VllmServer

        server = VllmServer(spec, log_path=self.output_dir / SERVER_LOG_NAME)
        print(f"starting the vLLM server ({spec.python or spec.command}) on {server.base_url} "
              f"(log {server.log_path})...", flush=True)
        server.spawn()
        os.environ.setdefault("AREAL_LLM_SERVER_ADDRS", f"{spec.host}:{server.port}")
        try:
            yield server
        finally:
            server.stop()

    def _trainer(self, server: Any = None) -> Any:
        """AReaL's ``PPOTrainer``. It builds the actor, then connects its rollout engines: the
        server this run spawned is waited for there (``ArealVllmEngine.initialize``), so vLLM's
        start-up overlaps the actor's, and a server that dies fails with vLLM's log tail."""
        from areal.trainer import PPOTrainer

        from aworld_areal.stopping import watch_rollouts
        from aworld_areal.vllm_engine import wait_for_server

        p = self.prepared
        started = time.perf_counter()
        wait_for_server(server)
        trainer = PPOTrainer(p.config, train_dataset=p.train_dataset, valid_dataset=p.valid_dataset)
        self.metrics["trainer_start_seconds"] = round(time.perf_counter() - started, 1)
        if server is not None:
            self.metrics["vllm_start_seconds"] = round(server.startup_s, 1)
        watch_rollouts(trainer)  # single-controller mode: rollout.max_failed_steps reaches the controller
        self._record_stats(trainer)
        trajectories = p.workflow_kwargs.get("trajectories")
        if trajectories:
            self.artifacts["trajectories"] = trajectories
            if trainer.recover_info is None:  # a fresh run starts the file; a recovered one continues it
                Path(trajectories).write_text("", encoding="utf-8")
        return trainer

    def _train(self, trainer: Any) -> None:
        p = self.prepared
        trainer.train(
            workflow=WORKFLOW,
            workflow_kwargs=p.workflow_kwargs,
            eval_workflow=WORKFLOW if p.valid_dataset is not None else None,
            eval_workflow_kwargs=p.eval_workflow_kwargs,
        )

    # -- metrics ------------------------------------------------------------------------------

    def _record_stats(self, trainer: Any) -> None:
        """Append every step AReaL commits (``StatsLogger.commit``, public) to ``metrics.jsonl``."""
        path = self.output_dir / "metrics.jsonl"
        self.artifacts["metrics"] = str(path)
        logger = trainer.stats_logger
        commit = logger.commit
        resumed = path.exists() and trainer.recover_info is not None  # AReaL's recover continues the file
        if not resumed:
            path.write_text("", encoding="utf-8")
        else:
            self.history.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)

        def recording_commit(epoch: int, step: int, global_step: int, data: Any) -> None:
            commit(epoch, step, global_step, data)
            rows = data if isinstance(data, list) else [data]
            with path.open("a", encoding="utf-8") as handle:
                for row in rows:
                    record = {"step": global_step + 1, "epoch": epoch + 1, "time_s": round(time.perf_counter()
                                                                                          - self.started, 1)}
                    record.update({k: _number(v) for k, v in row.items() if not k.endswith("__count")})
                    handle.write(json.dumps(record) + "\n")
                    self.history.append(record)

        logger.commit = recording_commit

    # -- held-out evaluation ------------------------------------------------------------------

    def _evaluate(self, trainer: Any, when: str, spmd: bool) -> Any:
        samples = self.prepared.test_samples
        if not samples:
            return None
        if not spmd:
            print(f"held-out evaluation {when} training skipped: in single-controller mode the rollout "
                  "engines live in AReaL's workers", flush=True)
            self.metrics[f"eval_{when}/skipped"] = "single_controller"
            return None
        from aworld_areal.engine import ArealTokenEngine
        from aworld_core.evaluate import evaluate
        from aworld_core.run_summary import print_eval
        from aworld_core.worker import (
            LoopThread,
            build_agent,
            build_token_llm,
            close_shared_sessions,
            shared_tokenizer,
        )

        job = self.job
        tokenizer = shared_tokenizer(self.prepared.config.tokenizer_path)
        gconfig = self.prepared.config.gconfig.new(greedy=True, n_samples=1)
        gconfig = gconfig.new_with_stop_and_pad_token_ids(tokenizer)
        gconfig.stop_token_ids = [i for i in gconfig.stop_token_ids if i is not None]
        options = self.prepared.workflow_kwargs
        llm = build_token_llm(
            ArealTokenEngine(trainer.eval_rollout, gconfig, tokenizer), tokenizer, job,
            chat_template=options.get("chat_template"), tool_parser=options.get("tool_parser"),
            max_response_tokens=options.get("max_response_tokens"),
        )
        agent = build_agent(job)
        path = self.output_dir / f"eval_{when}.jsonl"
        concurrency = self.options["eval_concurrency"] or job.rollout.concurrency
        print(f"evaluating {len(samples)} held-out tasks {when} training (greedy, full tool loop, "
              f"on the vLLM server through AReaL's eval engine)...", flush=True)
        loop = LoopThread(f"aworld-areal-eval-{when}")
        try:
            report = loop.run(evaluate(
                agent, samples, job.reward, llm=llm, concurrency=concurrency, output=path, progress=False,
                timeout=options.get("episode_timeout_s") or job.rollout.timeout_for(agent),
                max_steps=options.get("max_steps"), base_dir=job.base_dir,
            ))
        finally:
            # this loop's shared MCP sessions only: the agent is the process's (the kit caches it),
            # training episodes use it on AReaL's loop
            loop.run(close_shared_sessions())
            loop.close()
        print_eval(report, when)  # its metrics and artifact: the summary's
        return report

    # -- the end ------------------------------------------------------------------------------

    def _save_checkpoint(self, trainer: Any) -> None:
        """The trained policy in HF format with its tokenizer: ``<output>/checkpoint``."""
        from areal.api.io_struct import SaveLoadMeta

        checkpoint = self.output_dir / "checkpoint"
        trainer.actor.save(SaveLoadMeta(path=str(checkpoint), weight_format="hf", with_optim=False,
                                        tokenizer=trainer.tokenizer, processor=trainer.processor))
        self.artifacts["checkpoint"] = str(checkpoint)

    def _finish(self, before: Any, after: Any) -> None:
        """The summary line, ``metrics.png`` and ``summary.json`` (the core's ``aworld_core.run_summary``)
        over AReaL's stat names."""
        from aworld_core.run_summary import reward_headline, training_metrics, write_summary

        window = self.options["summary_window"]
        self.metrics.update(training_metrics(self.history, window, reward_key=REWARD, tool_key=TOOL_RATE))
        write_summary(self.output_dir, reward_headline(self.metrics, window), history=self.history,
                      metrics=self.metrics, artifacts=self.artifacts, started=self.started, before=before,
                      after=after, title=self.job.name, plot=self.options["plot"], **PLOT)


# AReaL's stat names for the summary and metrics.png (they differ from TRL's and verl's): the reward of
# the rows each step trained (a failed member's masked row carries its group's mean, so it does not
# move it; rollout/aworld/reward is per group as it completes, which in asynchronous training need not
# be the step that trains it), the per-step tool-call rate (the workflow records it per group)
REWARD = "ppo_actor/task_reward/avg"
TOOL_RATE = "rollout/aworld/tool_call_rate"
#: metrics.png's panels (the reward's with held-out accuracy before and after); a panel no step logged
#: is left out (AReaL's stats depend on its configuration)
PANELS = (
    (REWARD, "mean reward of the trained batch"),
    (TOOL_RATE, "tool-call rate"),
    ("rollout/aworld/sampled_tokens", "sampled tokens per episode"),
    ("ppo_actor/update/version_stats/sample_staleness_theta_avg", "sample staleness (versions)"),
)
PLOT = {"panels": PANELS, "reward_key": REWARD, "only_logged": True}  # aworld_core.plots.plot_metrics's


def clear_trial_names(config: Any) -> None:
    """Forget this trial's ``name_resolve`` entries (what ``areal.infra.launcher.local`` does before
    it starts a trial), so a rerun's weight updates wait for their own checkpoints."""
    from areal.utils import name_resolve, names

    name_resolve.reconfigure(config.cluster.name_resolve)
    name_resolve.clear_subtree(names.trial_root(experiment_name=config.experiment_name,
                                                trial_name=config.trial_name))


def _exit_on_sigterm() -> None:
    """``SIGTERM`` unwinds like an error, so the vLLM server and AReaL's engines are stopped."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _number(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value
