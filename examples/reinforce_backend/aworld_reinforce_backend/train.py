"""The trainer the plan launches: REINFORCE with a GRPO-style group baseline in plain PyTorch, on the
worker kit. Per step: sample groups through the core's runtime, apply the group policy, compute
group advantages, train exactly the sampled tokens, log the step's reward."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from aworld_core import worker as kit  # the worker kit: every kit.* call below
from aworld_core.datasets import load_dataset_section
from aworld_core.tokens import HFTokenEngine
from aworld_reinforce_backend.plugin import options


def train(job: dict[str, Any], output_dir: str) -> dict[str, float]:
    """Train the job's model (``backends.reinforce`` overrides ``plugin.DEFAULTS``); writes ``metrics.jsonl``
    (a line per step), ``summary.json`` and ``checkpoint/`` into ``output_dir``; returns the summary."""
    return asyncio.run(_train(kit.load_job(job), Path(output_dir)))


async def _train(job: Any, out: Path) -> dict[str, float]:
    hf_logging.disable_progress_bar()
    opts = options(job)
    steps, n, size, budget = opts["steps"], opts["prompts_per_step"], opts["group_size"], opts["max_response_tokens"]
    torch.manual_seed(job.seed)
    torch.set_num_threads(opts["torch_threads"])
    engine = HFTokenEngine.from_pretrained(job.resolve_path(job.model.path), max_new_tokens=budget,
                                           max_batch_size=n * size, batch_window_s=0.01)
    model, tokenizer = engine.model, engine.tokenizer
    llm = kit.build_token_llm(engine, tokenizer, job, max_response_tokens=budget)
    runner = kit.EpisodeRunner.from_job(job, llm)  # the job's agent, reward, limits and group policy
    samples = load_dataset_section(job.train_dataset, job.base_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts["learning_rate"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / steps)  # linear decay to 0
    failed = kit.FailedSteps(kit.GroupPolicy.from_job(job).max_failed_steps)
    initial = [p.detach().clone() for p in model.parameters()]
    rewards: list[float] = []
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(out / "metrics.jsonl", "w", encoding="utf-8") as log:
        for step in range(steps):
            prompts = [samples[(step * n + i) % len(samples)] for i in range(n)]  # in order, wrapping
            groups = await runner.run_groups(prompts, size, {"policy_version": step})
            episodes = [e for g in groups for e in g.episodes]
            failed.step(episodes)  # raises after max_failed_steps steps in a row with nothing to train
            # failed members (and dropped groups) answer None: no token trained, not in the baseline
            group_rewards = [r for g in groups for r in g.rewards("none")]
            advantages = kit.group_advantages(group_rewards, size)
            scales = [divisor for _, divisor in kit.group_statistics(group_rewards, size)]  # per-segment rewards
            keep = [i for i, e in enumerate(episodes) if kit.is_trainable(e)]
            scored = [e.reward for e in episodes if e.reward is not None]
            row = {"step": step, "reward": sum(scored) / max(len(scored), 1), **kit.step_metrics(episodes)}
            if keep:
                # one row per training segment (a rewritten or compacted history is several), each with
                # its episode's advantage; the loss is the mean over all rows' sampled tokens
                batch = kit.episodes_to_batch([episodes[i] for i in keep], [advantages[i] for i in keep],
                                              scales=[scales[i] for i in keep], pad_id=engine.pad_id)
                row["rows"] = int(batch["input_ids"].shape[0])
                with engine.weights_lock:  # no rollout reads the weights while they change
                    model.train()
                    logprobs = kit.token_logprobs(model, batch)
                    loss = kit.policy_gradient_loss(logprobs, batch)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    schedule.step()
                    model.eval()
                # ~0 (float noise): the tokens trained are the tokens sampled, under the same policy
                gap = ((logprobs.detach() - batch["old_logprobs"]).abs() * batch["loss_mask"]).max().item()
                row.update(loss=loss.item(), logprob_gap=gap)
            engine.set_version(step + 1)
            rewards.append(row["reward"])
            log.write(json.dumps(row) + "\n")
            log.flush()
            if step % opts["print_every"] == 0 or step == steps - 1:
                print(f"step {step:3d}  reward {row['reward']:.3f}  {time.monotonic() - started:5.1f} s", flush=True)
    delta = sum(float((p.detach() - p0).pow(2).sum()) for p, p0 in zip(model.parameters(), initial, strict=True))
    model.save_pretrained(out / "checkpoint")
    tokenizer.save_pretrained(out / "checkpoint")
    k = min(10, len(rewards))
    summary = {"reward_first": sum(rewards[:k]) / k, "reward_last": sum(rewards[-k:]) / k,
               "param_delta_l2": delta**0.5, "steps": len(rewards), "seconds": time.monotonic() - started}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
