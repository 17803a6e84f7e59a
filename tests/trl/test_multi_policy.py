"""Several policies trained in one TRL run (issue 31, M3): two LoRA adapters of one tiny model, a
planner (calls the real MCP calculator) and an answerer, trained together by TRL's GRPOTrainer from
the same episodes.

Checked on the batch TRL really trains: every row is one segment of one trained policy, holding exactly
its sampled ids (mask 1) and its tool/template ids (mask 0); nothing else trains; each row's advantage
is its policy's GRPO advantage over the group (the planner credited with its own reward); each adapter
changes and the checkpoint holds one folder per policy; ``train: false`` leaves its adapter as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aworld_core.errors import ConfigError
from aworld_core.export import read_jsonl

AGENTS = Path(__file__).resolve().parent / "multi_policy_agents.py"
POLICIES = ["planner", "answerer"]


def _job(tmp_path: Path, model_dir: Path, mcp_config: dict[str, Any], write_samples: Any, policies: Any = None,
         **trl: Any) -> dict[str, Any]:
    return {
        "name": "trl-multi-policy",
        "backend": "trl",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(model_dir)},
        "agent": {"factory": f"{AGENTS}:make_swarm", "options": {"mcp_config": mcp_config}},
        "policies": policies or {"planner": {"lora": {"r": 4, "alpha": 16}}, "answerer": {"lora": {"r": 4, "alpha": 16}}},
        "agent_policies": {"planner": "planner", "answerer": "answerer"},
        "train_dataset": {"path": str(write_samples(tmp_path / "train.jsonl", 8))},
        "reward": {"name": f"{AGENTS}:policy_reward", "trajectory_aware": True},
        "rollout": {"concurrency": 8, "episode_timeout_s": 60},
        "backends": {"trl": {
            "max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4,
            "learning_rate": 5e-3, "temperature": 1.0, "max_completion_length": 128,
            "aworld": {"progress": False, "print_every": 0, "eval_before": False, "eval_after": False}, **trl,
        }},
    }


def _row(batch: dict[str, Any], r: int) -> tuple[list[int], list[int], list[int]]:
    prompt = batch["prompt_ids"][r][batch["prompt_mask"][r].bool()].tolist()
    n = int(batch["completion_mask"][r].sum().item())
    ids = batch["completion_ids"][r, :n].tolist()
    mask = (batch["completion_mask"][r] * batch["tool_mask"][r])[:n].tolist()
    return prompt, ids, mask


def _adapters(checkpoint: Path) -> dict[str, dict[str, Any]]:
    from safetensors.torch import load_file

    return {p: load_file(str(checkpoint / p / "adapter_model.safetensors")) for p in POLICIES}


def _expected_rows(episodes: dict[str, Any], rows: list[dict[str, Any]], trained: list[str], group: int):
    """(policy index, segment, advantage) in the order the rows are added: policy, group, member, segment."""
    from aworld_core.policies import policy_reward, policy_segments

    agent_policies = {"planner": "planner", "answerer": "answerer"}
    out = []
    for index, policy in enumerate(trained):
        for g in range(0, len(rows), group):
            members = [episodes[r["aworld_episode_id"]] for r in rows[g:g + group]]
            rewards = [policy_reward(e, policy, agent_policies) if e.reward is not None and policy_segments(e, policy)
                       else None for e in members]
            present = [x for x in rewards if x is not None]
            mean = sum(present) / len(present) if present else 0.0
            std = (sum((x - mean) ** 2 for x in present) / (len(present) - 1)) ** 0.5 if len(present) > 1 else 0.0
            for episode, reward in zip(members, rewards, strict=True):
                if reward is None:
                    continue
                for segment in policy_segments(episode, policy):
                    out.append((index, segment, (reward - mean) / (std + 1e-4)))
    return out


@pytest.mark.slow
def test_two_adapters_train_from_the_same_episodes(tmp_path, tool_model_dir, calculator, recorded, write_samples):
    from aworld_trl.trainer import train

    result = train(_job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples), str(tmp_path / "run"))
    episodes = {e.id: e for e in read_jsonl(result.artifacts["trajectories"])}
    assert len(recorded) == 2
    for batch in recorded:
        rows = batch["inputs"]
        assert len(rows) == 8
        expected = _expected_rows(episodes, rows, POLICIES, 4)
        assert expected, "no trained segment in the batch"
        assert {i for i, _, _ in expected} == {0, 1}, "both policies have rows"
        sampled = 0
        for k, (index, segment, advantage) in enumerate(expected):
            place = len(rows) + k  # TRL's own rows are the episodes' placeholders; ours follow
            prompt, ids, mask = _row(batch, place)
            assert int(batch["aworld_policy"][place]) == index
            assert prompt == segment.prompt_ids and ids == segment.response_ids and mask == segment.response_mask
            assert batch["sampling_per_token_logps"][place, : len(ids)].tolist() == pytest.approx(segment.response_logprobs)
            assert float(batch["advantages"][place]) == pytest.approx(advantage, abs=1e-5)
            sampled += segment.sampled_tokens
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
        assert loss_mask[: len(rows)].sum().item() == 0  # the placeholders train nothing
        assert loss_mask.sum().item() == sampled == batch["num_items_in_batch"].item()
        assert (batch["aworld_policy"][len(rows) + len(expected):] == -1).all()
    # each policy's segments hold its own agent's turns, tagged, with the versions that sampled them
    for episode in episodes.values():
        for segment in episode.training.segments() if episode.training else []:
            assert segment.policy in POLICIES
    # both adapters trained (LoRA's B starts at zero); one folder per policy in the checkpoint
    adapters = _adapters(Path(result.artifacts["checkpoint"]))
    for policy, weights in adapters.items():
        moved = max(float(v.abs().max()) for k, v in weights.items() if "lora_B" in k)
        assert moved > 0, f"{policy}'s adapter did not change"
    history = [line for line in Path(result.artifacts["metrics"]).read_text().splitlines() if line.strip()]
    assert any("policy/planner/reward" in line and "policy/answerer/rows" in line for line in history)


@pytest.mark.slow
def test_an_untrained_policy_keeps_its_adapter(tmp_path, tool_model_dir, calculator, recorded, write_samples):
    from aworld_trl.trainer import train

    policies = {"planner": {"lora": {"r": 4, "alpha": 16}}, "answerer": {"lora": {"r": 4, "alpha": 16}, "train": False}}
    job = _job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples, policies=policies, max_steps=1)
    result = train(job, str(tmp_path / "run"))
    batch = recorded[0]
    assert set(batch["aworld_policy"].tolist()) <= {-1, 0}  # only the planner's rows train
    adapters = _adapters(Path(result.artifacts["checkpoint"]))
    assert max(float(v.abs().max()) for k, v in adapters["answerer"].items() if "lora_B" in k) == 0.0
    assert max(float(v.abs().max()) for k, v in adapters["planner"].items() if "lora_B" in k) > 0.0


def test_what_the_trl_path_cannot_train_is_refused(tmp_path, write_samples):
    from aworld_core.config import load_job_config
    from aworld_trl.options import check_section

    (tmp_path / "model").mkdir()
    base = _job(tmp_path, tmp_path / "model", {"mcpServers": {}}, write_samples)
    cases = {
        "a model of its own": ({"policies": {"planner": {"model": {"path": str(tmp_path / "m")}},
                                              "answerer": {"lora": {}}}}, "policies.planner trains a model of its own"),
        "use_vllm": ({"trl": {"use_vllm": True}}, "use_vllm"),
        "grpo loss": ({"trl": {"loss_type": "grpo"}}, "backends.trl.loss_type='grpo'"),
        "beta": ({"trl": {"beta": 0.04}}, "backends.trl.beta=0.04"),
        "lora beside": ({"trl": {"aworld": {"lora": {"r": 4}}}}, "backends.trl.aworld.lora: with policies"),
        "checkpointing": ({"trl": {"gradient_checkpointing": True}}, "backends.trl.gradient_checkpointing"),
        "checkpointing, new name": ({"trl": {"activation_checkpointing": True}}, "backends.trl.gradient_checkpointing"),
    }
    for name, (change, message) in cases.items():
        data = {**base, "backends": {"trl": {**base["backends"]["trl"]}}}
        if "policies" in change:
            data["policies"] = change["policies"]
        for key, value in change.get("trl", {}).items():
            data["backends"]["trl"][key] = {**data["backends"]["trl"].get(key, {}), **value} if isinstance(value, dict) \
                else value
        with pytest.raises(Exception, match=".") as raised:
            check_section(load_job_config(data=data))
        assert message in str(raised.value), (name, str(raised.value))
        if name != "use_vllm":
            assert isinstance(raised.value, ConfigError), name
    # TRL's default (activation checkpointing on) cannot train several adapters: off unless asked for (refused)
    options_ok = check_section(load_job_config(data=base))
    assert options_ok is not None
    from aworld_trl.options import grpo_config

    args, _ = grpo_config(load_job_config(data=base), tmp_path / "out")
    assert args.gradient_checkpointing is False
    assert getattr(args, "activation_checkpointing", False) is False


def _logprobs(model: Any, adapter: str | None, segment: Any) -> list[float]:
    """log p of each response token of ``segment`` given what precedes it, under ``adapter`` (None: the
    base model, adapters off)."""
    import torch

    ids = torch.tensor([[*segment.prompt_ids, *segment.response_ids]])
    with torch.no_grad():
        if adapter is None:
            with model.disable_adapter():
                logits = model(input_ids=ids).logits[0].float()
        else:
            logits = model(input_ids=ids, adapter_names=[adapter]).logits[0].float()
    n = len(segment.prompt_ids)
    logps = torch.log_softmax(logits[n - 1 : -1], dim=-1)
    return logps.gather(-1, torch.tensor(segment.response_ids)[:, None]).squeeze(-1).tolist()


@pytest.mark.slow
def test_resume_restores_every_policy(tmp_path, tool_model_dir, calculator, write_samples):
    """A run saves checkpoint-1 with one folder per adapter; a run resumed from it samples its next
    episodes with both adapters exactly as saved (their logprobs recomputed under checkpoint-1's
    adapters, not under fresh ones), continues the step count, and trains both adapters further."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from aworld_core.policies import policy_segments
    from aworld_trl.trainer import train

    def run(**trl: Any) -> Any:
        job = _job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples, save_strategy="steps",
                   save_steps=1, lr_scheduler_type="constant", **trl)
        return train(job, str(tmp_path / "run"))

    run(max_steps=1)
    first = tmp_path / "run" / "trl" / "checkpoint-1"
    saved = _adapters(first)
    resumed = run(max_steps=2, resume_from_checkpoint=True)
    assert '"global_step": 2' in (tmp_path / "run" / "trl" / "checkpoint-2" / "trainer_state.json").read_text()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tool_model_dir)), str(first / "planner"),
                                      adapter_name="planner")
    model.load_adapter(str(first / "answerer"), adapter_name="answerer")
    model.eval()
    checked = {p: 0 for p in POLICIES}
    for episode in read_jsonl(resumed.artifacts["trajectories"]):
        for policy in POLICIES:
            for segment in policy_segments(episode, policy):
                sampled = [i for i, m in enumerate(segment.response_mask) if m]
                own = _logprobs(model, policy, segment)
                base = _logprobs(model, None, segment)
                assert [segment.response_logprobs[i] for i in sampled] == pytest.approx([own[i] for i in sampled], abs=1e-3)
                checked[policy] += len(sampled)
                if max(abs(own[i] - base[i]) for i in sampled) > 1e-2:
                    checked[f"{policy}-differs"] = 1
    assert all(checked[p] > 0 for p in POLICIES), checked
    assert all(checked.get(f"{p}-differs") for p in POLICIES), "checkpoint-1's adapters are indistinguishable from none"
    trained = _adapters(Path(resumed.artifacts["checkpoint"]))
    for policy in POLICIES:
        assert any(not torch.equal(v, trained[policy][k]) for k, v in saved[policy].items()), f"{policy} did not train"


def _policy_objective(model: Any, batch: dict[str, Any], index: int) -> Any:
    """sum over the batch's rows of policy ``index``: advantage x the log-probability of each trained
    token (mask 1), under the model's active adapter; its gradient is the GRPO ascent direction of
    TRL's loss at the first step (ratio 1, no clipping), up to a positive factor."""
    import torch

    total = torch.zeros(())
    for r in (batch["aworld_policy"] == index).nonzero().squeeze(-1).tolist():
        prompt, ids, mask = _row(batch, r)
        logits = model(input_ids=torch.tensor([[*prompt, *ids]])).logits[0, len(prompt) - 1: -1].float()
        logps = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
        total = total + float(batch["advantages"][r]) * (logps * torch.tensor(mask, dtype=logps.dtype)).sum()
    return total


@pytest.mark.slow
@pytest.mark.parametrize("order", [POLICIES, POLICIES[::-1]], ids=["planner-first", "answerer-first"])
def test_each_adapter_moves_up_its_own_objective(tmp_path, tool_model_dir, calculator, recorded, write_samples, order):
    """After one step, each adapter moved along its own policy's GRPO ascent direction, whichever place
    it has in ``policies``. LoRA's B starts at zero and Adam's first step is -lr x sign(gradient), so
    each saved lora_B is the update: its signs must be those of the gradient of the policy's objective
    (advantage x log p of its own rows' sampled tokens) taken with that adapter alone and no
    activation checkpointing. (TRL's default gradient checkpointing recomputed the first policy's
    forward during backward under the last adapter set, so its update pointed nowhere in particular:
    the first-listed policy's reward fell while the second learned.)"""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from aworld_trl.trainer import train

    policies = {p: {"lora": {"r": 4, "alpha": 16}} for p in order}
    result = train(_job(tmp_path, tool_model_dir, calculator.mcp_config(), write_samples, policies=policies,
                        max_steps=1, lr_scheduler_type="constant"), str(tmp_path / "run"))
    batch = recorded[0]
    checkpoint = Path(result.artifacts["checkpoint"])
    for index, policy in enumerate(order):
        assert (batch["aworld_policy"] == index).any() and batch["advantages"][batch["aworld_policy"] == index].abs().max() > 0
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tool_model_dir)),
                                          str(checkpoint / policy), adapter_name=policy, is_trainable=True)
        model.train()
        update = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
        with torch.no_grad():  # the adapter as it was before the step (A is unchanged by it: B's zero kills its gradient)
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.zero_()
        before = _policy_objective(model, batch, index)
        before.backward()
        agree = total = 0
        for n, p in model.named_parameters():
            if "lora_B" not in n:
                continue
            big = p.grad.abs() > 1e-3 * p.grad.abs().max()  # Adam's update of a near-zero gradient is near zero
            agree += int((torch.sign(update[n][big]) == torch.sign(p.grad[big])).sum())
            total += int(big.sum())
        assert total > 0
        assert agree / total > 0.95, f"{policy} (policies' #{index + 1}): its update follows its own ascent direction " \
                                     f"on only {agree}/{total} weights"
        with torch.no_grad():  # and its objective rose
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_(update[n])
            after = _policy_objective(model, batch, index)
        assert float(after) > float(before), f"{policy}: objective {float(before):.4f} -> {float(after):.4f}"
