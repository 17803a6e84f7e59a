"""``python -m aworld_core.run`` (also the ``aworld`` console script): list, plan, or launch a job.

    python -m aworld_core.run --list
    python -m aworld_core.run --backend trl --config job.yaml [key.path=value ...]
    python -m aworld_core.run --backend verl --config job.yaml --dry-run
    python -m aworld_core.run COMMAND [args ...]     (a plugin's subcommand, e.g. aworld-service's serve)

Exit codes: 0 success, 1 failure at run time, 2 bad input (arguments, config, unknown names).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from aworld_core.errors import AworldError, UsageError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aworld_core.run",
        description="Train (or plan) an AWorld agent job on an RL backend.",
        epilog=(
            "paths: relative paths written in the config file are relative to the file's directory; "
            "relative paths given as key.path=value overrides are relative to the current directory. "
            "Without output_dir a job writes to $AWORLD_OUTPUT_ROOT/<name> (default runs/<name>) under "
            "the current directory. A model.path / model.tokenizer that does not start with / ~ ./ ../ "
            "and does not exist (beside the config; for an override, here) is a hub id, left as "
            "written. Rules: docs/architecture.md, 'Paths'. "
            "Installed plugins may add commands: aworld COMMAND [args ...] (--list shows them; "
            "aworld COMMAND --help describes one)."
        ),
    )
    parser.add_argument("--backend", help="backend name (see --list); default: the job's, else 'trl'")
    parser.add_argument("--config", help="job config file (YAML or JSON)")
    parser.add_argument("--list", action="store_true", help="show installed plugins and what they provide")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be launched; launch nothing"
    )
    parser.add_argument(
        "--eval",
        action="store_true",
        help="evaluate the job's agent on its test_dataset (else train_dataset) with its own endpoint",
    )
    parser.add_argument("--limit", type=int, help="with --eval: only the first N tasks")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.path=value",
        help="override config fields (relative paths: to the current directory)",
    )
    return parser


def print_listing(out: TextIO) -> None:
    from aworld_core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    catalog = manager.catalog()
    out.write("Plugins:\n")
    for info in manager.plugins():
        state = "disabled" if info.disabled else (f"ERROR: {info.error}" if info.error else "ok")
        out.write(f"  {info.name:<28} {info.distribution} {info.version}  [{state}]\n")
    kinds = ("backend", "environment", "reward", "dataset")
    provided = [item for kind in kinds for item in catalog.items(kind).values()]
    name_w = max([12, *(len(item.name) for item in provided)])
    dist_w = max([22, *(len(item.distribution) for item in provided)])
    out.write("Backends:\n")
    for name, item in sorted(catalog.items("backend").items()):
        spec = item.spec
        framework = ""
        if spec.framework:
            framework = (
                f"{spec.framework} installed"
                if spec.framework_installed()
                else f"framework not installed ({spec.install_text()})"
            )
        gpu = ", needs a GPU to train" if spec.requires_gpu else ""
        out.write(f"  {name:<{name_w}} {item.distribution:<{dist_w}} {spec.description} [{framework}{gpu}]\n")
        out.write(f"  {'':<{name_w}} {'':<{dist_w}} honours: {', '.join(spec.capability_names()) or 'none'}\n")
    for kind, title in (("environment", "Tool environments"), ("reward", "Rewards"), ("dataset", "Datasets")):
        out.write(f"{title}:\n")
        items = sorted(catalog.items(kind).items())
        if not items:
            out.write("  (none)\n")
        for name, item in items:
            out.write(f"  {name:<{name_w}} {item.distribution:<{dist_w}} {item.spec.description}\n")
    out.write("Commands:\n")
    commands = sorted(catalog.items("command").items())
    if not commands:
        out.write("  (none)\n")
    for name, item in commands:
        out.write(f"  {name:<{name_w}} {item.distribution:<{dist_w}} {item.spec.description}\n")
    conventions = sorted(catalog.items("reward_convention").items())
    if conventions:  # beyond the core's plain and trajectory-aware ones
        out.write("Reward conventions:\n")
        for name, item in conventions:
            out.write(f"  {name:<{name_w}} {item.distribution:<{dist_w}} {item.spec.signature}\n")
    if catalog.conflicts or manager.entry_point_conflicts:
        out.write("Conflicts (these names cannot be used until one provider is removed):\n")
        for conflict in manager.entry_point_conflicts:
            out.write(f"  {conflict.describe()}\n")
        for (kind, name), owners in sorted(catalog.conflicts.items()):
            who = ", ".join(f"{o.distribution} {o.version}" for o in owners)
            out.write(f"  {kind} '{name}': {who}\n")


def run_eval(job: Any, limit: int | None, out: TextIO) -> int:
    from aworld_core.datasets import load_dataset_section
    from aworld_core.evaluate import evaluate
    from aworld_core.jobs import job_environment
    from aworld_core.settings import get_settings
    from aworld_core.tools.mcp_shared import closing_shared_sessions
    from aworld_core.validation import validate_job
    from aworld_core.worker.build import build_agent
    from aworld_core.worker.openai_agent import OpenAIAgent, training_only

    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: give at least 1 (or leave --limit out for every task)")
    # every problem at once: no reward, an empty dataset, bad paths, environment, reward signature
    validate_job(None, job, evaluation=True)
    section = job.test_dataset or job.train_dataset
    samples = load_dataset_section(section, job.base_dir)[: limit or None]
    if not samples:  # a hub dataset (not loaded by the validation) can be empty too
        raise UsageError(f"the evaluation dataset '{section.path or section.name}' has no rows")
    output = job.resolved_output_dir(get_settings().output_root) / "eval.jsonl"
    # the job's environment runs as it does for training: agents built from MCP_SERVER_URL find it
    with job_environment(job):
        agent = build_agent(job, cache=False)  # one error message when no plugin builds one
        if isinstance(agent, OpenAIAgent):  # served the trained policy by the kit's gateway only
            raise training_only(agent.ref)
        report = asyncio.run(closing_shared_sessions(evaluate(
            agent, samples, job.reward, concurrency=job.rollout.concurrency, output=output,
            timeout=job.rollout.timeout_for(agent), max_steps=job.rollout.max_turns, base_dir=job.base_dir,
        ), agent))
    out.write(report.summary() + "\n")
    return 0


def _guard_secret_overrides(overrides: list[str]) -> None:
    """A key or token typed as an override is masked from here on, with a warning: a command
    line is readable by every user of the machine."""
    from aworld_core.config import parse_override
    from aworld_core.secrets import is_secret_name, register_secret

    for text in overrides:
        try:
            keys, value = parse_override(text)
        except AworldError:
            continue  # reported by the config loader
        if not (is_secret_name(keys[-1]) or keys[-1] == "llm_api_key") or not isinstance(value, (str, int)):
            continue
        register_secret(text.partition("=")[2].strip())
        hint = "LLM_API_KEY" if keys[-1] == "llm_api_key" else "an environment variable and write {env: NAME} in the config"
        sys.stderr.write(
            f"warning: {'.'.join(keys)} was given on the command line, which every user of this machine can "
            f"read (/proc/<pid>/cmdline, shell history); pass it through {hint} instead\n"
        )


def is_command_word(text: str) -> bool:
    """Whether the first argument names a plugin's subcommand: a job's arguments are options
    (``-...``) and ``key.path=value`` overrides, so a bare word never was one of them."""
    return not text.startswith("-") and "=" not in text


def run_command(name: str, argv: list[str]) -> int:
    """``aworld NAME args...``: the subcommand a plugin registered (``register_commands``), or exit 2
    naming the distribution that adds it."""
    from aworld_core.plugins import get_plugin_manager
    from aworld_core.secrets import mask

    try:
        command = get_plugin_manager().catalog().command(name)
    except AworldError as exc:
        sys.stderr.write(mask(f"error: {exc}\n"))
        return exc.exit_code
    return command.run(argv)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    from aworld_core.secrets import install_log_masking, mask, register_settings_secrets

    out = out or sys.stdout
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and is_command_word(argv[0]):
        return run_command(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    install_log_masking()
    try:
        if args.list:
            print_listing(out)
            return 0
        if not args.config:
            raise UsageError("--config FILE is required (or use --list); see --help")
        from aworld_core.config import load_job_config
        from aworld_core.jobs import choose_backend, format_plan, launch_job, plan_job
        from aworld_core.secrets import register_job_secrets

        _guard_secret_overrides(args.overrides)
        register_settings_secrets()
        job = load_job_config(args.config, args.overrides)
        register_job_secrets(job)
        from aworld_core.offline import offline_env_applied

        # telemetry (and, on local paths, hub lookups) off before anything imports a framework
        with offline_env_applied(job):
            if args.eval:
                return run_eval(job, args.limit, out)
            backend = choose_backend(args.backend, job)
            job = job.model_copy(update={"backend": backend})
            from aworld_core.validation import validate_job

            validate_job(backend, job)  # the same checks for --dry-run and a launch: the same refusals
            plan, output_dir = plan_job(backend, job)
            if args.dry_run:
                out.write(format_plan(plan, job, output_dir))
                return 0
            result = launch_job(backend, job, plan)
            out.write(f"done: backend={backend} output={result.output_dir}\n")
            for key, value in sorted(result.metrics.items()):
                out.write(f"  {key}: {value}\n")
            return result.returncode
    except AworldError as exc:
        sys.stderr.write(mask(f"error: {exc}\n"))
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
