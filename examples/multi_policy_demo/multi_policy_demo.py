"""The multi-policy demo's swarm, reward, model build and report, in one module the job names by file.

Task: "What is A * B?" (4-digit A, B; the CPU GRPO demo's ``arith`` dataset). Two agents in a
sequential ``Swarm``, each its own policy (a LoRA adapter of one tiny model):

* the **planner** must call the ``calc`` tool of the real MCP calculator with ``A*B`` and relay the
  tool's result as its final message. Its warm start calls the tool only ``CALL_RATE`` of the time,
  else guesses a number of the right length (as the CPU GRPO demo's model does);
* the **answerer** gets the planner's message and answers ``<answer>N</answer>``. Its warm start
  uses the tag only ``TAG_RATE`` of the time, else writes the bare number (no answer: reward 0).

The episode is right only when both are: the final answer is the exact product. Greedy decoding is
wrong for both roles before RL (each role's likelier choice is the wrong one), sampling sometimes
right. Each policy is credited on its own part (``set_policy_rewards``): the planner on relaying the
right product, the answerer on answering exactly what it was given, in the tag.

The model is the CPU GRPO demo's tiny Qwen2 and tokenizer (``aworld_cpu_grpo_demo.build``), warm
started here on both roles' conversations with that demo's loss helpers. Nothing is downloaded.

``python multi_policy_demo.py --report RUN [RUN ...]`` prints each role's success per step (from the
runs' ``trajectories.jsonl``) and the held-out results, and draws ``policies.png`` beside the first run.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from aworld_core import Agent, Swarm, get_agent_tool_env_and_servers, get_settings

CALL_RATE = 0.3  # the warm start's planner calls calc this often, else guesses
TAG_RATE = 0.3  # the warm start's answerer answers in <answer> tags this often, else a bare number
ROLES = ("planner", "answerer")


# -- the swarm and the reward ----------------------------------------------------------------------


def make_swarm() -> Swarm:
    """The planner (with the job's calculator environment, when it runs) hands over to the answerer.

    The environment exports ``MCP_SERVER_URL`` while the job runs; a ``--dry-run`` builds the swarm
    without it (validation checks the agents against ``agent_policies``), so the planner then has no
    tool server."""
    mcp_config = None
    if get_settings().mcp_server_url:
        mcp_config, _ = get_agent_tool_env_and_servers(release_workspace=False)
    return Swarm(
        Agent("planner", conf={"max_steps": 3}, mcp_config=mcp_config),  # call calc, relay its result
        Agent("answerer", conf={"max_steps": 1}),  # one reply: the answer
    )


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def role_outcomes(episode: Any, truth: int) -> dict[str, float]:
    """Each role's success in ``episode`` (a role that did not speak is left out): the planner relays
    the exact product; the answerer answers, in the tag, exactly the number it was given."""
    from aworld_cpu_grpo_demo.tasks import parse_answer

    said = {role: [s.exp_data.state.content for s in episode.steps if s.exp_meta.agent_id == role] for role in ROLES}
    out: dict[str, float] = {}
    if said["planner"]:
        out["planner"] = float(_number(said["planner"][-1]) == truth)
    if said["answerer"]:
        given = _number(said["planner"][-1]) if said["planner"] else None
        answer = parse_answer(said["answerer"][-1])
        out["answerer"] = float(given is not None and answer == given)
    return out


def role_reward(episode: Any, sample: Any) -> float:
    """The episode's reward: 1 for the exact product in ``<answer>`` tags, else 0. Each policy is
    credited with its own role's success (``aworld_core.policies.set_policy_rewards``)."""
    from aworld_core.policies import set_policy_rewards
    from aworld_cpu_grpo_demo.tasks import parse_answer

    truth = int(str(sample.ground_truth))
    set_policy_rewards(episode, role_outcomes(episode, truth))
    return float(parse_answer(episode.final_answer) == truth)


# -- the warm start's conversations ------------------------------------------------------------------


def planner_messages(a: int, b: int, guess: int | None = None) -> list[dict[str, Any]]:
    """The planner's conversation: the call and its relayed result, or (``guess``) a guess at once."""
    from aworld_cpu_grpo_demo.calculator import TOOL_NAME
    from aworld_cpu_grpo_demo.tasks import QUESTION
    from aworld_cpu_grpo_demo.traces import tool_call_message

    question = {"role": "user", "content": QUESTION.format(a=a, b=b)}
    if guess is not None:
        return [question, {"role": "assistant", "content": str(guess)}]
    return [question, tool_call_message(a, b),
            {"role": "tool", "tool_call_id": "call_0", "name": TOOL_NAME, "content": str(a * b)},
            {"role": "assistant", "content": str(a * b)}]


def answerer_messages(given: int, tagged: bool) -> list[dict[str, Any]]:
    return [{"role": "user", "content": str(given)},
            {"role": "assistant", "content": f"<answer>{given}</answer>" if tagged else str(given)}]


def traces(rng: random.Random, size: int, call_rate: float = CALL_RATE, tag_rate: float = TAG_RATE) -> list[Any]:
    """A quarter planner decisions (call with probability ``call_rate``, else a guess of the product's
    length), a quarter more planner calls with no loss on that first decision (the CPU GRPO demo's
    recipe: they teach the call's syntax and the relay without shifting the decision), half answerer
    conversations (tagged with probability ``tag_rate``) given products and guesses alike."""
    from aworld_cpu_grpo_demo.traces import Trace, balanced_problem, guess_of_length

    out = []
    for index in range(size):
        a, b = balanced_problem(rng)  # products of 7 and 8 digits equally often
        guess = guess_of_length(rng, a * b)
        if index % 4 == 0:
            out.append(Trace(planner_messages(a, b, None if rng.random() < call_rate else guess)))
        elif index % 4 == 1:
            out.append(Trace(planner_messages(a, b), train_first_token=False))
        else:
            out.append(Trace(answerer_messages(a * b if rng.random() < 0.5 else guess, rng.random() < tag_rate)))
    return out


# -- the model -----------------------------------------------------------------------------------------


def _greedy_rates(model: Any, tokenizer: Any, rng: random.Random, n: int = 8) -> dict[str, float]:
    """Greedy probes of the skills RL builds on: the planner copies A and B into its call (its reply
    started with the call's tag), the answerer copies the number it is given (tagged or not)."""
    import torch

    def reply(messages: list[dict[str, Any]], tokens: int, prefix: str = "") -> str:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefix
        ids = tokenizer.encode(text, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        return tokenizer.decode(out[0][len(ids):], skip_special_tokens=True)

    from aworld_cpu_grpo_demo.traces import balanced_problem

    model.eval()
    calls = copies = 0
    for _ in range(n):
        a, b = balanced_problem(rng)
        calls += f'"{a}*{b}"' in reply(planner_messages(a, b)[:1], 30, prefix="<tool_call>")
        copies += str(a * b) in reply(answerer_messages(a * b, True)[:1], 14)
    model.train()
    return {"call copied": calls / n, "answer copied": copies / n}


def build_model(path: str, *, seed: int = 0, steps: int = 800, batch_size: int = 32, lr: float = 2e-3) -> Path:
    """``model.build``: the CPU GRPO demo's tokenizer and tiny Qwen2, warm-started on both roles'
    conversations, at ``path`` (once; a rerun reuses it). Loss on the assistant turns only."""
    import torch
    from transformers.utils import logging as hf_logging

    from aworld_cpu_grpo_demo.build import new_model, save_model_dir, train_tokenizer
    from aworld_cpu_grpo_demo.warm_start import encode, train_step

    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)  # a tiny model on a busy 2-core machine: one thread is the faster
    target = Path(path)
    if target.exists():
        return target
    started = time.perf_counter()
    print(f"building the multi-policy demo's model in {target} (tokenizer, tiny Qwen2, warm start)", flush=True)
    rng = random.Random(seed)
    tokenizer = train_tokenizer(seed)
    model = new_model(tokenizer, seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 40)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    loss_value = 0.0
    for step in range(steps):
        ids, labels = encode(tokenizer, traces(rng, batch_size))
        loss_value = train_step(model, ids, labels, tokenizer.pad_token_id, optimizer, schedule)
        if step % 100 == 0 or step == steps - 1:
            rates = _greedy_rates(model, tokenizer, random.Random(step))
            print(f"  warm start step {step:4d}/{steps}  loss {loss_value:.3f}  "
                  + "  ".join(f"{k} {v:.2f}" for k, v in rates.items()), flush=True)
    model.eval()
    save_model_dir(target, model, tokenizer, {"steps": steps, "final_loss": loss_value})
    print(f"  model ready in {time.perf_counter() - started:.0f}s (warm-start loss {loss_value:.3f})", flush=True)
    return target


# -- the report ------------------------------------------------------------------------------------------

_STEP = re.compile(r"^ep-s(\d+)c")  # the trl backend's episode ids: ep-s<step>c<call>-<index>
WINDOW = 5  # steps averaged for "first" and "last"


def _rates(episodes: list[Any]) -> dict[str, float | None]:
    """Each role's success rate (over the episodes where it spoke) and the episode reward's mean."""
    from aworld_core.policies import POLICY_REWARDS

    out: dict[str, float | None] = {}
    for role in ROLES:
        values = [e.metadata[POLICY_REWARDS][role] for e in episodes
                  if role in (e.metadata or {}).get(POLICY_REWARDS, {})]
        out[role] = sum(values) / len(values) if values else None
    rewards = [e.reward for e in episodes if e.reward is not None]
    out["episode"] = sum(rewards) / len(rewards) if rewards else None
    return out


def run_report(run: Path) -> dict[str, Any]:
    """Per-step role rates from ``trajectories.jsonl``, first/last means, the held-out evaluations."""
    from aworld_core.export import read_jsonl

    steps: dict[int, list[Any]] = {}
    for episode in read_jsonl(run / "trajectories.jsonl"):
        found = _STEP.match(episode.id)
        if found:
            steps.setdefault(int(found.group(1)), []).append(episode)
    curve = {step: _rates(episodes) for step, episodes in sorted(steps.items())}
    keys = [*ROLES, "episode"]

    def mean(rows: list[dict[str, float | None]], key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return sum(values) / len(values) if values else None

    rows = list(curve.values())
    report: dict[str, Any] = {"run": str(run), "curve": curve,
                              "first": {k: mean(rows[:WINDOW], k) for k in keys},
                              "last": {k: mean(rows[-WINDOW:], k) for k in keys}}
    for when in ("before", "after"):
        path = run / f"eval_{when}.jsonl"
        report[f"eval_{when}"] = _rates(list(read_jsonl(path))) if path.exists() else None
    summary = run / "summary.json"
    if summary.exists():
        report["seconds"] = json.loads(summary.read_text(encoding="utf-8"))["metrics"].get("process_seconds")
    return report


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def draw(reports: list[dict[str, Any]], path: Path) -> Path:
    """One panel per role (its success rate per step) and one for the episode reward, a line per run."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    panels = (("planner", "planner: relays the exact product"), ("answerer", "answerer: <answer> of what it got"),
              ("episode", "episode reward (both right)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 3.8))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for report in reports:
            points = [(s, r[key]) for s, r in report["curve"].items() if r[key] is not None]
            if points:
                steps, values = zip(*points, strict=True)
                after = (report.get("eval_after") or {}).get(key)
                label = f"{Path(report['run']).name} (held-out after: {_fmt(after)})"
                ax.plot(steps, values, linewidth=1.2, label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("multi-policy demo: each role's success rate while training (sampled episodes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    """``--report RUN [RUN ...]``: print each run's numbers and draw ``policies.png`` beside the first."""
    if len(argv) < 2 or argv[0] != "--report":
        print("usage: python multi_policy_demo.py --report RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    runs = [Path(a) for a in argv[1:]]
    missing = [str(r) for r in runs if not (r / "trajectories.jsonl").exists()]
    if missing:
        print(f"no trajectories.jsonl in {', '.join(missing)}: run the job first", file=sys.stderr)
        return 2
    reports = [run_report(r) for r in runs]
    print("| run | planner first -> last | answerer first -> last | episode reward first -> last | "
          "held-out accuracy before -> after (planner, answerer) | seconds |")
    print("|---|---|---|---|---|---|")
    for rep in reports:
        before, after = rep["eval_before"] or {}, rep["eval_after"] or {}
        held = (f"{_fmt(before.get('episode'))} -> {_fmt(after.get('episode'))} "
                f"({_fmt(before.get('planner'))} -> {_fmt(after.get('planner'))}, "
                f"{_fmt(before.get('answerer'))} -> {_fmt(after.get('answerer'))})")
        cells = [f"{_fmt(rep['first'][k])} -> {_fmt(rep['last'][k])}" for k in (*ROLES, "episode")]
        print(f"| {Path(rep['run']).name} | {' | '.join(cells)} | {held} | {rep.get('seconds', '-')} |")
    print(f"plot: {draw(reports, runs[0] / 'policies.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
