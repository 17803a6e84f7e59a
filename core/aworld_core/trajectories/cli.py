"""``python -m aworld_core.trajectories``: filter collected trajectories, then convert them.

    python -m aworld_core.trajectories filter runs/collect/results.jsonl -o runs/sft/data \\
        --min-reward 1 --best-of-n 1 --val-fraction 0.1
    python -m aworld_core.trajectories convert runs/sft/data/train.jsonl -o train.parquet \\
        --format verl --tools tools.json

``filter`` writes ``train.jsonl`` / ``val.jsonl`` (episodes, readable by every tool here and by
the SFT jobs) and ``report.json``, and prints what was kept and dropped and why. ``convert``
writes one training format. Exit codes: 0 done, 2 bad input (arguments, files, a tokenizer that
does not match the token data).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from aworld_core.errors import AworldError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aworld_core.trajectories",
        description="Turn collected trajectories (task service downloads, exported episodes, evaluation "
        "outputs) into SFT data.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("filter", help="keep the good episodes, split train/val by task, report why others went")
    f.add_argument("inputs", nargs="+", help="trajectory files (.jsonl, .parquet) or directories")
    f.add_argument("-o", "--output", required=True, help="directory for train.jsonl, val.jsonl, report.json")
    f.add_argument("--status", action="append", choices=["success", "failed", "timeout", "cancelled", "running"],
                   help="episode statuses to keep (repeat); default: success")
    f.add_argument("--min-reward", type=float, help="keep episodes whose reward is at least this")
    f.add_argument("--min-turns", type=int, help="at least this many LLM calls")
    f.add_argument("--max-turns", type=int, help="at most this many LLM calls")
    tools = f.add_mutually_exclusive_group()
    tools.add_argument("--tool-use", dest="tool_use", action="store_true", default=None,
                       help="only episodes that called a tool")
    tools.add_argument("--no-tool-use", dest="tool_use", action="store_false", help="only episodes without tool calls")
    f.add_argument("--keep-truncated", action="store_true", help="keep episodes cut off by a length limit or max_steps")
    f.add_argument("--min-tokens", type=int, help="prompt + response tokens, at least")
    f.add_argument("--max-tokens", type=int, help="prompt + response tokens, at most")
    f.add_argument("--require-tokens", action="store_true", help="drop episodes without token data")
    f.add_argument("--no-dedupe", action="store_true", help="keep repeated identical trajectories")
    f.add_argument("--best-of-n", type=int, help="keep the n best episodes per task (reward, turns, tokens)")
    f.add_argument("--val-fraction", type=float, default=0.0, help="share of tasks held out for validation")
    f.add_argument("--seed", type=int, default=0, help="seed of the train/val split")

    c = sub.add_parser("convert", help="write kept episodes in a training format")
    c.add_argument("inputs", nargs="+", help="episode files (e.g. the filter's train.jsonl)")
    c.add_argument("-o", "--output", required=True, help="output file (.jsonl or .parquet)")
    from aworld_core.trajectories.convert import backend_formats, format_names

    theirs = "; ".join(f"{name}: the {backend} backend's SFT rows" for name, backend in backend_formats().items())
    c.add_argument("--format", required=True, choices=format_names(),
                   help="tokens: token-exact (prompt_ids, completion_ids, completion_mask); messages: TRL "
                   f"SFTTrainer{'; ' + theirs if theirs else ''}")
    c.add_argument("--tokenizer", help="tokens: the tokenizer directory of the model to train (checked against "
                   "the token data)")
    c.add_argument("--tools", help="JSON file with the agent's tool specs (every format but tokens)")
    return parser


def _filter(args: argparse.Namespace, out: TextIO) -> int:
    from aworld_core.export import write_jsonl
    from aworld_core.schemas import EpisodeStatus
    from aworld_core.trajectories.filter import FilterSpec, filter_episodes, split_by_task
    from aworld_core.trajectories.read import read_trajectories

    try:
        spec = FilterSpec(
            statuses=[EpisodeStatus(s) for s in (args.status or ["success"])],
            min_reward=args.min_reward, min_turns=args.min_turns, max_turns=args.max_turns,
            tool_use=args.tool_use, drop_truncated=not args.keep_truncated, min_tokens=args.min_tokens,
            max_tokens=args.max_tokens, require_tokens=args.require_tokens, dedupe=not args.no_dedupe,
            best_of_n=args.best_of_n,
        )
    except ValueError as exc:
        raise _usage(f"invalid filter options: {exc}") from None
    if not 0 <= args.val_fraction < 1:
        raise _usage(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    collection = read_trajectories(args.inputs)
    kept, report = filter_episodes(collection.episodes, spec)
    train, val = split_by_task(kept, args.val_fraction, args.seed)
    target = Path(args.output)
    write_jsonl(train, target / "train.jsonl")
    write_jsonl(val, target / "val.jsonl")
    for line in report.lines():
        out.write(line + "\n")
    if collection.without_episode:
        shown = ", ".join(collection.without_episode[:5]) + (" ..." if len(collection.without_episode) > 5 else "")
        out.write(f"  {len(collection.without_episode)} task result(s) carried no episode: {shown}\n")
    out.write(f"split by task: {len(train)} train, {len(val)} val episodes -> {target}/train.jsonl, val.jsonl\n")
    summary = {**report.as_dict(), "train_episodes": len(train), "val_episodes": len(val),
               "results_without_episode": collection.without_episode, "sources": collection.sources,
               "filter": spec.model_dump(mode="json"), "val_fraction": args.val_fraction, "seed": args.seed}
    (target / "report.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if not kept:
        out.write("warning: no episode was kept; loosen the filters\n")
    return 0


def _convert(args: argparse.Namespace, out: TextIO) -> int:
    from aworld_core.trajectories.convert import convert, read_tools, write_rows
    from aworld_core.trajectories.read import read_trajectories

    tokenizer = None
    if args.format == "tokens":
        if not args.tokenizer:
            raise _usage("--format tokens needs --tokenizer DIR (the model to train), to check the token data is its")
        from aworld_core.tokens.llm import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    elif args.tokenizer:
        raise _usage("--tokenizer is only used with --format tokens (messages are rendered by the trainer)")
    collection = read_trajectories(args.inputs)
    rows = convert(collection.episodes, args.format, tokenizer=tokenizer, tools=read_tools(args.tools))
    path = write_rows(rows, args.output)
    extra = ""
    if args.format == "tokens":
        trained = sum(sum(r["completion_mask"]) for r in rows)
        total = sum(len(r["prompt_ids"]) + len(r["completion_ids"]) for r in rows)
        extra = f" ({total:,} tokens, {trained:,} with loss)"
    out.write(f"wrote {len(rows)} {args.format} rows from {len(collection.episodes)} episodes to {path}{extra}\n")
    return 0


def _usage(message: str) -> AworldError:
    from aworld_core.errors import UsageError

    return UsageError(message)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        return _filter(args, out) if args.command == "filter" else _convert(args, out)
    except AworldError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
