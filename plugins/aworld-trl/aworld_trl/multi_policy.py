"""Several policies trained in one TRL run: LoRA adapters of ``model.path``, one GRPO group per policy.

A job with ``policies:`` (``aworld_core.policies``) trains each of its adapter policies from the same
episodes. How, on TRL's own ``GRPOTrainer``:

* **One model, one engine.** The job's model becomes a ``peft.PeftModel`` holding one adapter per
  policy (:func:`build_policy_model`); the HF engine samples from it, each request through its
  policy's adapter (``AdapterEngine``), so every adapter the trainer updates is what the next
  rollout samples from (the engine holds the trained weights themselves: the sync after each step
  is the update itself, and each adapter's tokens carry the step that sampled them).
* **Rows.** Each episode is a TRL row of its own (a one-token placeholder that trains nothing, with
  the episode's reward for TRL's logs); once TRL has built its batch, :func:`add_policy_rows` adds a
  row per training segment of every trained policy (its own agents' turns, exactly as sampled).
* **Credit: per-policy GRPO groups.** For a group of ``num_generations`` episodes of one prompt and
  a policy ``p``, the members that trained and have ``p``'s turns form ``p``'s group: each is
  credited ``r_p`` (the episode's reward, or the policy's own when the reward gave per-policy
  rewards, ``aworld_core.policies.set_policy_rewards``) and its advantage is
  ``(r_p - mean) / scale`` over that group (TRL's ``scale_rewards``: the group's std + 1e-4, the
  batch's, or 1). Every segment of ``p`` in the episode gets it (moved by ``(r_s - r_p) / scale`` for a
  segment with a reward of its own, the core's segment rule).
* **Loss.** Each row trains its own adapter: :meth:`compute_loss` runs TRL's loss once per policy
  on that policy's rows with its adapter active (``PeftModel.set_adapter``) and sums them. With TRL's
  token-mean losses (``dapo``, ``cispo``: normalized by the batch's sampled tokens) the sum is
  exactly the loss of the whole batch, so each sampled token weighs the same whichever policy it is.
  **No activation checkpointing** (TRL turns it on by default; :func:`config_defaults` turns it off, and
  asking for it is refused): a checkpointed forward is recomputed during ``backward``, long after
  :meth:`compute_loss` returned, under whichever adapter was set last, so every policy but the last
  would get the gradient of a forward it did not run (the first-listed policy's reward fell while the
  second learned).
* **Checkpoints.** ``save_model`` (and TRL's ``checkpoint-N``) writes each adapter in ``<dir>/<policy>``;
  resuming, transformers loads each adapter back from its folder, and the trainer puts every trained
  adapter in the optimizer (transformers marks only the active one trainable when it loads them).

What this path does not do (refused at plan time, :func:`check_multi_policy`): policies with a model
of their own or every weight of the job's model, ``use_vllm``, asynchronous rollouts, a KL term
(``beta``), per-sequence losses, the entropy mask and re-used generations (old log-probabilities
would have to be computed per adapter), and activation (gradient) checkpointing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aworld_core.errors import AworldError, ConfigError, UsageError
from aworld_trl.segments import SEGMENT_KEYS, group_size, merge_rows

POLICY_FIELD = "aworld_policy_rows"  # per TRL row: the episode's segments, per trained policy
POLICY_COLUMN = "aworld_policy"  # per row of TRL's batch: the index of the policy it trains (-1: none)
TOKEN_MEAN_LOSSES = ("dapo", "cispo")  # normalized by the batch's sampled-token count: sums over sub-batches
CHECKPOINTING_KEYS = ("gradient_checkpointing", "activation_checkpointing")  # transformers 5 renamed it


def config_defaults(arguments: Any) -> dict[str, Any]:
    """``GRPOConfig`` defaults of a multi-policy job, under the job's own ``backends.trl`` keys
    (``arguments``): activation checkpointing off, which TRL turns on by default (see the module
    docstring; a job that asks for it is refused by :func:`check_multi_policy`)."""
    return {} if any(key in arguments for key in CHECKPOINTING_KEYS) else {"gradient_checkpointing": False}


def adapter_policies(job: Any) -> list[str]:
    """The job's policies served as adapters here, in the job's order."""
    return [name for name, p in job.policies.items() if p.local]


def check_multi_policy(job: Any, options: Any, args: Any = None) -> None:
    """Plan-time refusals of what this path cannot do exactly (see the module docstring)."""
    import importlib.util

    problems = []
    for name, policy in job.policies.items():
        if policy.local and (policy.kind != "adapter" or policy.model is not None):
            what = "a model of its own" if policy.model is not None else "every weight of model.path"
            problems.append(
                f"policies.{name} trains {what}; the trl backend trains several policies as LoRA adapters of "
                f"model.path: give it a lora (policies.{name}.lora) on the job's model, or an endpoint"
            )
    if options.lora is not None:
        problems.append("backends.trl.aworld.lora: with policies, each policy's lora says its adapter; remove it")
    if options.vllm is not None:
        problems.append("backends.trl.use_vllm: several adapters are sampled by the HF engine; remove use_vllm")
    if options.async_rollout is not None:
        problems.append("backends.trl.aworld.async_rollout: not with several policies yet; remove it")
    if importlib.util.find_spec("peft") is None:
        problems.append("several policies need peft: pip install 'aworld-trl[peft]'")
    if args is not None:
        if args.loss_type not in TOKEN_MEAN_LOSSES:
            problems.append(f"backends.trl.loss_type={args.loss_type!r}: several policies need a token-mean loss "
                            f"({', '.join(TOKEN_MEAN_LOSSES)}), whose per-policy parts sum to the batch's loss")
        if args.beta:
            problems.append(f"backends.trl.beta={args.beta}: a KL term is not supported with several policies yet; "
                            "remove beta")
        if args.gradient_checkpointing or getattr(args, "activation_checkpointing", False):
            problems.append("backends.trl.gradient_checkpointing: several policies train with it off (a checkpointed "
                            "forward is recomputed during backward under the last adapter set, not the row's own); "
                            "remove it")
        if args.top_entropy_quantile < 1.0:
            problems.append("backends.trl.top_entropy_quantile: the entropy mask is taken over a batch, not per "
                            "policy; remove it")
        if args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations):
            problems.append("backends.trl: gradient_accumulation_steps must be a multiple of steps_per_generation x "
                            "num_iterations with several policies (TRL would need old log-probabilities per adapter)")
    if problems:
        raise ConfigError(
            "the trl backend cannot train this multi-policy job:\n" + "\n".join(f"  {p}" for p in problems),
            [("policies", None, p) for p in problems],
        )


def lora_config(section: Any) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=section.r, lora_alpha=section.alpha, lora_dropout=section.dropout,
                      target_modules=section.target_modules, task_type="CAUSAL_LM")


def build_policy_model(job: Any, model: Any) -> Any:
    """``model`` under one LoRA adapter per local policy (loaded from ``lora.path`` when given); the
    trained adapters' weights require gradients, the others' do not."""
    from peft import PeftModel, get_peft_model

    names = adapter_policies(job)
    peft_model: Any = None
    for name in names:
        section = job.policies[name].lora
        if section.path is not None:
            path = job.resolve_path(section.path)
            if not Path(path).is_dir():
                raise UsageError(f"policies.{name}.lora.path {path!r} is not a directory (a saved peft adapter)")
            if peft_model is None:
                peft_model = PeftModel.from_pretrained(model, path, adapter_name=name, is_trainable=True)
            else:
                peft_model.load_adapter(path, adapter_name=name, is_trainable=True)
        elif peft_model is None:
            peft_model = get_peft_model(model, lora_config(section), adapter_name=name)
        else:
            peft_model.add_adapter(name, lora_config(section))
    trained = [n for n in names if job.policies[n].trained]
    frozen = [n for n in names if n not in trained]
    if frozen:
        peft_model.set_requires_grad(frozen, requires_grad=False)
    if trained:
        peft_model.set_requires_grad(trained, requires_grad=True)
    return peft_model


def build_router(job: Any, engine: Any, tokenizer: Any, max_response_tokens: int | None) -> Any:
    """The episode's ``PolicyClients``: one ``TokenLLM`` per adapter over the shared engine."""
    from aworld_core.policy_clients import PolicyClients
    from aworld_core.tokens.adapter_engine import AdapterEngine
    from aworld_core.worker import build_token_llm

    clients = {
        name: build_token_llm(AdapterEngine(engine, name), tokenizer, job, max_response_tokens=max_response_tokens,
                              model_name=name)
        for name in adapter_policies(job)
    }
    for name in clients:
        if not job.policies[name].trained:
            engine.set_version(0, adapter=name)  # never updated: its tokens keep the version it started at
    return PolicyClients.from_job(job, clients)


# -- the batch ------------------------------------------------------------------------------------


def policy_plans(groups: Sequence[Any], policies: Sequence[str], agent_policies: dict[str, str]) -> list[Any]:
    """Per TRL row (the members of ``groups`` in order): ``None`` for a member that does not train,
    else ``{policy: {"reward": r_p, "segments": [...]}}`` for each trained policy with turns in it."""
    from aworld_core.policies import policy_reward, policy_segments

    plans: list[Any] = []
    for group in groups:
        for episode, trained in zip(group.episodes, group.trained(), strict=True):
            if not trained:
                plans.append(None)
                continue
            plan = {}
            for policy in policies:
                segments = policy_segments(episode, policy)
                if segments:
                    plan[policy] = {
                        "reward": policy_reward(episode, policy, agent_policies),
                        "segments": [{**{k: list(getattr(s, k)) for k in SEGMENT_KEYS}, "reward": s.reward} for s in segments],
                    }
            plans.append(plan)
    return plans


def _scales(trainer: Any, values: list[list[float | None]]) -> list[list[float]]:
    """TRL's advantage divisor for each member of each group (``scale_rewards``), over ``values``."""
    import torch
    from trl.trainer.utils import nanstd

    mode = getattr(trainer, "scale_rewards", "group")
    if mode in (False, "none"):
        return [[1.0] * len(g) for g in values]
    if mode == "batch":
        flat = torch.tensor([float("nan") if v is None else v for g in values for v in g])
        std = nanstd(flat).item() if (~torch.isnan(flat)).sum() > 1 else 0.0
        return [[std + 1e-4] * len(g) for g in values]
    out = []
    for group in values:
        t = torch.tensor([float("nan") if v is None else v for v in group])
        std = nanstd(t).item() if (~torch.isnan(t)).sum() > 1 else 0.0
        out.append([std + 1e-4] * len(group))
    return out


def policy_advantages(trainer: Any, plans: list[Any], policies: Sequence[str], group_size: int) -> list[dict[str, Any]]:
    """The rows to add: one per segment of each trained policy, each with its per-policy GRPO advantage."""
    rows: list[dict[str, Any]] = []
    if len(plans) % group_size:
        raise AworldError(f"{len(plans)} rows are not whole groups of {group_size}")
    for index, policy in enumerate(policies):
        rewards = [[None if not plan or policy not in plan else plan[policy]["reward"] for plan in plans[g:g + group_size]]
                   for g in range(0, len(plans), group_size)]
        scales = _scales(trainer, rewards)
        for g, (group, scale) in enumerate(zip(rewards, scales, strict=True)):
            present = [r for r in group if r is not None]
            mean = sum(present) / len(present) if present else 0.0
            for m, (reward, s) in enumerate(zip(group, scale, strict=True)):
                if reward is None:
                    continue
                advantage = (reward - mean) / s
                for segment in plans[g * group_size + m][policy]["segments"]:
                    credit = advantage if segment["reward"] is None else advantage + (segment["reward"] - reward) / s
                    rows.append({**segment, "advantage": credit, "policy": index, "policy_reward": reward})
    return rows


def add_policy_rows(trainer: Any, output: dict[str, Any], inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """TRL's batch ``output`` (one placeholder row per episode) with a row per training segment of each
    trained policy, its advantage by the per-policy group rule, and :data:`POLICY_COLUMN`."""
    import torch

    policies: list[str] = trainer.aworld_policies
    for key in ("old_per_token_logps", "ref_per_token_logps", "num_images", "pixel_values", "importance_sampling_ratio"):
        if output.get(key) is not None:
            raise AworldError(f"several policies on TRL cannot carry the batch's '{key}' per adapter (refused at plan "
                              "time; this TRL version computed it anyway)")
    mode = "train" if trainer.model.training else "eval"
    plans = [row.get(POLICY_FIELD) for row in inputs]
    new = policy_advantages(trainer, plans, policies, group_size(trainer, trainer.model.training))
    old_rows = output["prompt_ids"].shape[0]
    # the placeholders TRL built (one per episode) train nothing: mask 0, advantage 0, no policy (-1)
    merged = merge_rows(trainer, output, inputs, new)
    column = torch.full((merged["prompt_ids"].shape[0],), -1, dtype=torch.long)
    column[old_rows:old_rows + len(new)] = torch.tensor([row["policy"] for row in new], dtype=torch.long)
    merged[POLICY_COLUMN] = column.to(output["prompt_ids"].device)
    result = {**output, **merged}
    metrics = trainer._metrics[mode]
    for index, policy in enumerate(policies):
        mine = [r for r in new if r["policy"] == index]
        rewards = [plan[policy]["reward"] for plan in plans if plan and policy in plan]
        metrics[f"policy/{policy}/rows"].append(float(len(mine)))
        metrics[f"policy/{policy}/sampled_tokens"].append(float(sum(sum(r["response_mask"]) for r in mine)))
        metrics[f"policy/{policy}/episodes"].append(float(len(rewards)))
        if rewards:
            metrics[f"policy/{policy}/reward"].append(sum(rewards) / len(rewards))
    return result


def policy_loss(trainer: Any, model: Any, inputs: dict[str, Any], compute: Any) -> Any:
    """TRL's loss of ``inputs`` with each row through its own policy's adapter: ``compute(model, sub)``
    (TRL's ``compute_loss``) once per policy on its rows, with its adapter active, summed."""
    import torch

    rows = inputs[POLICY_COLUMN]
    size = rows.shape[0]
    peft_model = trainer.accelerator.unwrap_model(model)
    trained: list[str] = trainer.aworld_policies
    total = None
    try:
        for index, name in enumerate(trained):
            picked = (rows == index).nonzero().squeeze(-1)
            if picked.numel() == 0:
                continue
            sub = {k: (v[picked] if torch.is_tensor(v) and v.ndim > 0 and v.shape[0] == size else v)
                   for k, v in inputs.items() if k != POLICY_COLUMN}
            peft_model.set_adapter(name)  # this policy's adapter in the forward (peft also freezes the others)
            loss = compute(model, sub)
            total = loss if total is None else total + loss
    finally:
        peft_model.set_requires_grad(trained, requires_grad=True)  # every trained adapter takes its gradient
    if total is None:  # nothing to train in this micro-batch (filler rows): a zero with a gradient path
        param = next(p for p in model.parameters() if p.requires_grad)
        total = param.sum() * 0.0
    return total
