"""verl's ``main_ppo`` with a vLLM server of its own: the CPU plan (and a separate inference fleet).

:func:`external_plan` adds to the verl command what the ``external_vllm`` rollout needs (the
server's URL, verl's naive weight sync), on a CPU what a machine without a GPU needs
(``aworld_verl.cpu_plan``), and what the job promises on every backend: metrics into the job's
``metrics.jsonl`` (verl's ``file`` logger, converted after the run), the HF weights saved with each
checkpoint (for the evaluation after training), the telemetry opt-outs in every Ray process.

:func:`launch_external` runs it: writes the files, starts the vLLM server (or checks the given
URL) and evaluates ``model.path`` while it loads, runs ``main_ppo``, stops the server at the end
or on failure, exports the last checkpoint's HF weights to ``<output>/checkpoint``, evaluates
them, and writes ``metrics.jsonl``, ``metrics.png`` and ``summary.json``.

Resume: verl's own ``trainer.resume_mode=auto`` (its default): a run whose
``trainer.default_local_dir`` (``<output>/checkpoints``) holds a ``global_step_N`` continues from
the newest one, with the optimizer state and the data loader's position, up to
``trainer.total_training_steps``.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aworld_core.errors import AworldError
from aworld_core.offline import offline_env
from aworld_core.schemas import LaunchPlan, SamplingParams, TrainResult
from aworld_core.secrets import mask_value
from aworld_core.vllm_server import VllmServer, VllmServerSpec
from aworld_verl.cpu_plan import (
    VerlOptions,
    cpu_env,
    cpu_overrides,
    external_overrides,
    server_spec,
    server_url,
)
from aworld_verl.launch import AWORLD_KEY, BACKEND, _lookup

RAW_METRICS = "verl/metrics_raw.jsonl"  # verl's file logger (rewritten by each run)
METRICS = "metrics.jsonl"
SERVER_LOG = "verl/vllm_server.log"
CHECKPOINTS = "checkpoints"
RUNTIME_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars"
GREEDY = SamplingParams(temperature=0.0)
# the job's metrics.jsonl names (the TRL backend's, which the plot reads) -> verl's
METRIC_NAMES = {
    "reward": ("critic/score/mean", "critic/rewards/mean"),
    "completions/mean_length": ("response_length/mean",),
    "loss": ("actor/pg_loss",),
}


# -- the plan ----------------------------------------------------------------------------------


def external_plan(job: Any, output_dir: Path, options: VerlOptions, overrides: dict[str, Any],
                  env: dict[str, str]) -> VllmServerSpec:
    """Add the external rollout (and on a CPU the CPU settings) to ``overrides`` / ``env``;
    returns the server spec (its port fixed, so the plan names the URL)."""
    out = output_dir.resolve()
    spec = server_spec(options, job)
    if options.resolved_device() == "cpu":
        overrides.update(cpu_overrides(out))
        env.update(cpu_env())
    overrides.update(external_overrides(spec))
    report_to = [r for r in job.logging.report_to if r not in ("console", "file")]
    overrides["trainer.logger"] = ["console", "file", *report_to]
    overrides["actor_rollout_ref.actor.checkpoint.save_contents"] = ["model", "optimizer", "extra", "hf_model"]
    quiet = offline_env({})
    env.update(quiet)
    for key, value in {**quiet, "VERL_FILE_LOGGER_PATH": str(out / RAW_METRICS)}.items():
        overrides[f"{RUNTIME_ENV}.{key}"] = value
    return spec


def planned_server(spec: VllmServerSpec, options: VerlOptions) -> dict[str, Any]:
    """What ``plan.config["aworld"]`` records (``--dry-run`` prints it): the options and the
    server's non-secret settings; the launch takes the rest (its ``env``) from the job again, so
    a secret there never reaches a plan file or a print."""
    server = spec.model_dump(mode="json")
    server["env"] = {key: mask_value(key, value) for key, value in spec.env.items()}
    return {"external": True, "device": options.resolved_device(), "server_url": server_url(spec),
            "rollout_server": server, **options.model_dump(mode="json", exclude={"rollout_server", "device"})}


def resolved_server(job: Any, plan: LaunchPlan) -> tuple[VerlOptions, VllmServerSpec]:
    """The options and the server the plan named, from the job (secrets included) and the plan's
    choices (port, model, dtype)."""
    from aworld_verl.cpu_plan import split_options

    _, options = split_options(job.backend_section(BACKEND), job)
    planned = plan.config[AWORLD_KEY]["rollout_server"]
    spec = (options.rollout_server or VllmServerSpec()).model_copy(
        update={key: planned[key] for key in ("url", "python", "command", "model", "port", "dtype")})
    return options, spec


def describe_server(spec: VllmServerSpec, options: VerlOptions) -> list[str]:
    """The plan's notes: the server command and environment (what ``--dry-run`` shows)."""
    where = f"rollout: rollout.name=external_vllm on the vLLM server at {server_url(spec)}"
    if options.resolved_device() == "cpu":
        where += " (device cpu: verl platform 'cpu', one trainer process on one logical Ray GPU)"
    if spec.url:
        return [where + "; nothing is started (it must have VLLM_SERVER_DEV_MODE=1 for the weight sync)"]
    port = spec.port
    return [
        where,
        f"launch starts the rollout server first: {shlex.join(spec.argv(port))}",
        "rollout server environment (added): "
        + " ".join(f"{k}={mask_value(k, v)}" for k, v in sorted(spec.child_env({}).items())),
        "launch stops the server when main_ppo ends or fails; held-out evaluation runs before (model.path, while the "
        "server loads) and after (the exported checkpoint) on the HF engine, greedy",
    ]


# -- the launch --------------------------------------------------------------------------------


def launch_external(job: Any, plan: LaunchPlan, output_dir: Path, datasets: dict[str, str]) -> TrainResult:
    """Server, evaluation before, ``main_ppo``, server stopped, export, evaluation after, report."""
    from aworld_core.launch import plan_cwd, write_plan_files

    started = time.perf_counter()
    options, spec = resolved_server(job, plan)
    artifacts = {**write_plan_files(plan, output_dir), **datasets}
    metrics: dict[str, Any] = {}
    merge_metrics(output_dir)  # what an interrupted earlier run left in verl's file
    test = _test_samples(job)
    server = VllmServer(spec, log_path=output_dir / SERVER_LOG)
    before = after = None
    previous = _terminate_on_sigterm()
    try:
        # vLLM loads while the evaluation before training runs and while main_ppo starts Ray and its
        # workers (the first weight sync waits for /health); a server that dies stops the run
        server.spawn()
        ready = _ReadyWatch(server).start()
        if test and options.eval_before:
            before = evaluate_model(job, plan, options, job.resolve_path(job.model.path), test, output_dir, "before")
        trained = time.perf_counter()
        returncode = run_command(plan.command, cwd=plan_cwd(plan, output_dir), env={**os.environ, **plan.env},
                                 watch=ready.failure)
        metrics["main_ppo_seconds"] = round(time.perf_counter() - trained, 1)
        if server.managed and ready.seconds is not None:
            metrics["vllm_start_seconds"] = round(ready.seconds, 1)
        if returncode != 0:
            raise AworldError(f"backend 'verl' command failed with exit code {returncode}: "
                              f"{shlex.join(plan.command[:3])} ... (the rollout server's log: {server.log_path})")
    finally:
        try:
            server.stop()
        finally:
            _restore_sigterm(previous)
        rows = merge_metrics(output_dir)
    checkpoint = export_checkpoint(job, output_dir)
    if checkpoint is not None:
        artifacts["checkpoint"] = str(checkpoint)
        if test and options.eval_after:
            after = evaluate_model(job, plan, options, str(checkpoint), test, output_dir, "after")
    artifacts["metrics"] = str(output_dir / METRICS)
    _report(job, options, output_dir, rows, before, after, metrics, artifacts, started)
    return TrainResult(backend="verl", output_dir=str(output_dir), metrics=metrics, artifacts=artifacts)


class _ReadyWatch:
    """Waits for the rollout server's ``/health`` in a thread: ``seconds`` once it answers,
    ``failure()`` the error once it died or never answered (``main_ppo`` is then stopped)."""

    def __init__(self, server: VllmServer):
        self.server = server
        self.seconds: float | None = None
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._wait, name="vllm-ready", daemon=True)

    def start(self) -> _ReadyWatch:
        self.thread.start()
        return self

    def _wait(self) -> None:
        try:
            self.seconds = self.server.wait_ready().startup_s
        except Exception as exc:  # reported through failure() to the thread running main_ppo
            self.error = exc

    def failure(self) -> Exception | None:
        if self.error is None and self.seconds is not None and self.server.proc is not None \
                and self.server.proc.poll() is not None:
            self.error = AworldError(f"the vLLM server exited with code {self.server.proc.returncode} while main_ppo "
                                     f"ran (log {self.server.log_path}):\n{self.server.log_tail()}")
        return self.error


def run_command(command: list[str], *, cwd: Path, env: dict[str, str], grace_s: float = 30.0,
                watch: Callable[[], Exception | None] | None = None) -> int:
    """Run ``main_ppo`` in its own process group; if this process is stopped (Ctrl-C, or SIGTERM
    while ``launch_external`` runs), or ``watch()`` returns an error (the rollout server died),
    the group (the driver and the Ray processes it started) gets SIGTERM, then SIGKILL after
    ``grace_s``, and the interruption (or the error) goes on up."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
    try:
        while True:
            try:
                return proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                error = watch() if watch is not None else None
                if error is not None:
                    raise error from None
    except BaseException:
        _stop_group(proc, grace_s)
        raise


def _stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _terminate_on_sigterm() -> Any:
    """SIGTERM becomes ``SystemExit`` here (Python's default ends the process without ``finally``,
    which would leave the rollout server and Ray running); only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _test_samples(job: Any) -> list[Any]:
    if job.test_dataset is None or job.reward is None:
        return []
    from aworld_core.datasets import load_dataset_section

    return load_dataset_section(job.test_dataset, job.base_dir)


def evaluate_model(job: Any, plan: LaunchPlan, options: VerlOptions, model_dir: str, samples: list[Any],
                   output_dir: Path, when: str) -> Any:
    """Greedy held-out evaluation of ``model_dir`` with the core's ``evaluate`` on the HF engine
    (the job's agent, reward, limits; the response budget verl trains with)."""
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM

    from aworld_core.evaluate import evaluate
    from aworld_core.run_summary import print_eval
    from aworld_core.tokens import HFTokenEngine, load_tokenizer
    from aworld_core.worker import build_agent, build_token_llm, closing_shared_sessions

    print(f"evaluating {len(samples)} held-out tasks {when} training (greedy, full tool loop, {model_dir})...",
          flush=True)
    tokenizer_dir = job.resolve_path(job.model.tokenizer) if job.model.tokenizer else model_dir
    tokenizer = load_tokenizer(tokenizer_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # beside a loading vLLM server and the MCP tools on a small machine
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.eval()
        budget = int(_lookup(plan.config, "data.max_response_length", 512))
        concurrency = options.eval_concurrency or job.rollout.concurrency
        engine = HFTokenEngine(model, tokenizer, max_new_tokens=budget, batch_window_s=0.02,
                               max_batch_size=concurrency)
        llm = build_token_llm(engine, tokenizer, job, max_response_tokens=budget)
        agent = build_agent(job, cache=False)
        path = output_dir / f"eval_{when}.jsonl"
        report = asyncio.run(closing_shared_sessions(evaluate(
            agent, samples, job.reward, llm=llm, concurrency=concurrency, output=path, progress=False,
            timeout=job.rollout.timeout_for(agent), max_steps=job.rollout.max_turns, base_dir=job.base_dir,
            sampling=GREEDY), agent))
    finally:
        torch.set_num_threads(threads)
    print_eval(report, when)
    return report


def latest_checkpoint(output_dir: Path) -> Path | None:
    """verl's newest ``global_step_N`` under ``<output>/checkpoints`` (its own tracker file first)."""
    root = output_dir / CHECKPOINTS
    tracker = root / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        step = tracker.read_text().strip()
        if (root / f"global_step_{step}").is_dir():
            return root / f"global_step_{step}"
    steps = sorted((p for p in root.glob("global_step_*") if p.name.rsplit("_", 1)[-1].isdigit()),
                   key=lambda p: int(p.name.rsplit("_", 1)[-1]))
    return steps[-1] if steps else None


def export_checkpoint(job: Any, output_dir: Path) -> Path | None:
    """The newest checkpoint's HF weights (verl saves them with ``save_contents: hf_model``) in
    ``<output>/checkpoint``, with the tokenizer's own files; ``None`` when nothing was saved."""
    from aworld_core.tokens import copy_tokenizer_files

    step = latest_checkpoint(output_dir)
    source = step / "actor" / "huggingface" if step is not None else None
    if source is None or not any(source.glob("*.safetensors")):
        return None
    target = output_dir / "checkpoint"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    copy_tokenizer_files(job.resolve_path(job.model.tokenizer or job.model.path), target)
    (target / "aworld_checkpoint.json").write_text(json.dumps({"global_step": step.name}) + "\n", encoding="utf-8")
    return target


def metric_row(step: int, data: dict[str, Any]) -> dict[str, Any]:
    """One ``metrics.jsonl`` row from a verl log line: the job's names (``reward``, ...) beside verl's."""
    row: dict[str, Any] = {"step": int(step)}
    for name, sources in METRIC_NAMES.items():
        for source in sources:
            value = data.get(source)
            if isinstance(value, (int, float)) and math.isfinite(value):
                row[name] = value
                break
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        row.setdefault(key, value)
    return row


def merge_metrics(output_dir: Path) -> list[dict[str, Any]]:
    """Fold verl's file log (rewritten by each run) into ``metrics.jsonl``: rows of earlier runs
    before the new run's first step stay, the new run's rows follow; returns every row."""
    raw = output_dir / RAW_METRICS
    target = output_dir / METRICS
    rows = _read_jsonl(target)
    new: list[dict[str, Any]] = []
    for record in _read_jsonl(raw):
        data = record.get("data") if isinstance(record, dict) else None
        if isinstance(data, dict) and record.get("step") is not None:
            new.append(metric_row(record["step"], data))
    if new:
        first = min(r["step"] for r in new)
        rows = [r for r in rows if r.get("step", 0) < first] + sorted(new, key=lambda r: r["step"])
        target.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        raw.rename(raw.with_suffix(".merged.jsonl"))
    return rows


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return out


def _report(job: Any, options: VerlOptions, output_dir: Path, rows: list[dict[str, Any]], before: Any, after: Any,
            metrics: dict[str, Any], artifacts: dict[str, str], started: float) -> None:
    """The summary line, ``metrics.png`` and ``summary.json`` (the core's ``aworld_core.run_summary``),
    over the rows that logged a training reward. No peak memory: training ran in verl's Ray workers."""
    from aworld_core.run_summary import reward_headline, training_metrics, write_summary

    training = [r for r in rows if isinstance(r.get("reward"), (int, float))]
    metrics.update(training_metrics(training, options.summary_window))
    write_summary(output_dir, reward_headline(metrics, options.summary_window), history=training, metrics=metrics,
                  artifacts=artifacts, started=started, before=before, after=after, title=job.name,
                  plot=options.plot, memory=False)
