"""Several policies in one job: the ``policies:`` and ``agent_policies:`` sections and their rules.

A single-policy job trains the job's ``model`` as the agent(s) the Swarm marks trainable. A
multi-policy job names its policies and maps every agent of its ``Swarm`` to one of them::

    model: {path: ./base-model}          # the base: tokenizer, chat template, LoRA adapters' base
    policies:
      planner:  {lora: {r: 8}}           # a LoRA adapter on model.path, trained
      answerer: {lora: {r: 8}}           # another adapter on the same base, trained
      critic:   {model: {path: ./small}} # a separate small model, trained in full
      judge:    {endpoint: {base_url: http://127.0.0.1:8000/v1, model_name: judge}}  # fixed, untrained
    agent_policies: {planner: planner, answerer: answerer, critic: critic, judge: judge}

A policy is one of four kinds (:attr:`PolicySection.kind`): ``adapter`` (a LoRA adapter on the job's
model, or on the policy's own ``model``), ``model`` (its own model, every weight), ``base`` (the
job's model itself, every weight) or ``endpoint`` (an OpenAI-compatible server; never trained).
``train: false`` keeps a local policy as it starts (it samples, it is never updated: an ablation, a
frozen adapter). Why the rules below: two trained policies must never share weights they update
(two full-weight policies of one model are one policy; a full-weight policy under adapters would
move their base), and every agent must sample from exactly one policy, so that each policy's
training segments are exactly its own agents' sampled tokens.

What is checked where: the sections' shape and the mapping's names when the job is read
(:func:`check_policy_sections`, from ``JobConfig``); the Swarm's agents against the mapping when the
agent is built (:func:`check_agent_mapping`, from validation and at run time); whether the backend
trains several policies before anything runs (:func:`check_policy_backend`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aworld_core.errors import UsageError

__all__ = [
    "PolicySection", "LoraSection", "PolicyModel", "PolicyEndpoint", "trained_policies", "is_multi_policy",
    "policy_segments", "set_policy_rewards", "policy_reward", "POLICY_REWARDS",
]

PolicyKind = Literal["adapter", "model", "base", "endpoint"]

# peft keys adapters by name in ModuleDicts ('.' is refused there) and calls the base "__base__"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraSection(_Section):
    """A LoRA adapter (``peft.LoraConfig``'s fields): trained from a fresh start, or from ``path``."""

    r: int = Field(default=8, ge=1, description="Adapter rank.")
    alpha: float = Field(default=16, gt=0, description="lora_alpha: the adapter's scale is alpha / r.")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="lora_dropout (training only).")
    target_modules: list[str] | str = Field(default="all-linear", description="Module names, or 'all-linear'.")
    path: str | None = Field(
        default=None, description="A saved adapter directory (peft's save_pretrained) to start from."
    )


class PolicyModel(_Section):
    """A policy's own model. Its chat template, family and tool parser are the job's ``model``'s
    (one rendering rule per job: every agent's turns are recorded with the same template)."""

    path: str
    tokenizer: str | None = Field(default=None, description="Tokenizer directory; default: path.")
    build: str | None = Field(
        default=None, description="'module:function' called as function(path) to create the directory."
    )


class PolicyEndpoint(_Section):
    """A fixed OpenAI-compatible endpoint: the agents mapped to it sample there and are never trained.

    The key is never written in the job: ``api_key_env`` names the environment variable holding it
    (default: the ``LLM_API_KEY`` setting)."""

    base_url: str = Field(description="e.g. http://127.0.0.1:8000/v1")
    model_name: str
    api_key_env: str | None = Field(default=None, description="The variable holding the API key.")


class PolicySection(_Section):
    """One policy: a LoRA adapter, a model of its own, the job's model, or a fixed endpoint."""

    lora: LoraSection | None = Field(default=None, description="A LoRA adapter on the base (model, else the job's).")
    model: PolicyModel | None = Field(default=None, description="Its own model; default: the job's model.")
    endpoint: PolicyEndpoint | None = Field(default=None, description="A fixed endpoint (never trained).")
    train: bool | None = Field(
        default=None, description="Update this policy; default: true, except for an endpoint (never)."
    )

    @property
    def kind(self) -> PolicyKind:
        if self.endpoint is not None:
            return "endpoint"
        if self.lora is not None:
            return "adapter"
        return "model" if self.model is not None else "base"

    @property
    def trained(self) -> bool:
        return self.kind != "endpoint" and self.train is not False

    @property
    def local(self) -> bool:
        """Served by the backend's own engine (everything but an endpoint)."""
        return self.kind != "endpoint"


def trained_policies(job: Any) -> list[str]:
    """The names of the job's policies that training updates, in the job's order."""
    return [name for name, policy in (getattr(job, "policies", None) or {}).items() if policy.trained]


def is_multi_policy(job: Any) -> bool:
    """Whether the job maps its agents to policies (a ``policies:`` section)."""
    return bool(getattr(job, "policies", None))


def _weights(name: str, policy: PolicySection, job_model: str | None) -> tuple[str | None, bool]:
    """(the model path whose weights the policy runs on, whether it updates every one of them)."""
    path = policy.model.path if policy.model is not None else job_model
    return path, policy.kind in ("model", "base")


def check_policy_sections(
    policies: dict[str, PolicySection], agent_policies: dict[str, str], job_model: str | None
) -> None:
    """The sections' own rules (``ValueError`` with the fix; the job loader names the field)."""
    if agent_policies and not policies:
        raise ValueError(
            "agent_policies maps agents to policies but the job has no 'policies' section; define each "
            "policy under policies (e.g. policies: {planner: {lora: {r: 8}}}) or remove agent_policies"
        )
    if not policies:
        return
    if not agent_policies:
        raise ValueError(
            f"policies {sorted(policies)} are defined but no agent is mapped to one; set agent_policies "
            f"(agent name -> policy name) for every agent of the Swarm"
        )
    for name, policy in policies.items():
        if not _NAME.match(name) or name in ("default", "__base__"):
            raise ValueError(
                f"policy name {name!r}: use a letter then letters, digits, '_' or '-' (at most 64; not "
                f"'default' or '__base__', which peft reserves); it names the policy's adapter and output files"
            )
        if policy.endpoint is not None:
            extra = [f"policies.{name}.{key}" for key in ("lora", "model") if getattr(policy, key) is not None]
            if extra:
                raise ValueError(
                    f"policies.{name} is a fixed endpoint; {', '.join(extra)} would be ignored (an endpoint is "
                    "served elsewhere and never trained): remove them, or remove endpoint to serve it here"
                )
            if policy.train:
                raise ValueError(
                    f"policies.{name}.train: true, but an endpoint is never trained (its weights are on "
                    "another server); remove train, or give the policy a lora/model served here"
                )
        if policy.kind in ("adapter", "base") and policy.model is None and job_model is None:
            raise ValueError(
                f"policies.{name} runs on the job's model, but the job has no model.path; set model.path "
                f"(the base model) or give the policy its own model"
            )
    unknown = {agent: p for agent, p in agent_policies.items() if p not in policies}
    if unknown:
        agent, p = next(iter(unknown.items()))
        raise ValueError(
            f"agent_policies.{agent}: unknown policy {p!r}; the job's policies are {', '.join(policies)} "
            f"(define it under policies, or map the agent to one of them)"
        )
    unused = [name for name in policies if name not in agent_policies.values()]
    if unused:
        raise ValueError(
            f"policies {unused} are mapped to no agent, so nothing would sample from or train them; map an "
            f"agent to each in agent_policies, or remove them"
        )
    # two trained policies never update the same weights
    full: dict[str, str] = {}
    for name, policy in policies.items():
        if not policy.trained:
            continue
        path, every_weight = _weights(name, policy, job_model)
        if every_weight and path is not None:
            if path in full:
                raise ValueError(
                    f"policies {full[path]} and {name} both train every weight of {path!r}: they would be one "
                    f"policy; give each a lora (adapters on that base) or a model of its own"
                )
            full[path] = name
    for name, policy in policies.items():
        path, every_weight = _weights(name, policy, job_model)
        if policy.kind == "adapter" and path in full:
            raise ValueError(
                f"policy {full[path]} trains every weight of {path!r}, which policy {name} adapts with LoRA: "
                f"the adapter's base would move under it; give {full[path]} a lora too, or train: false"
            )


def check_agent_mapping(agent: Any, job: Any) -> None:
    """``UsageError`` unless every agent of ``agent`` (an Agent or Swarm) is mapped to exactly the
    job's policies: an agent mapped to nothing, a mapped name that is no agent, or an agent the
    Swarm says is not trained mapped to a trained policy."""
    policies = getattr(job, "policies", None) or {}
    if not policies:
        return
    mapping: dict[str, str] = dict(job.agent_policies)
    agents = list(getattr(agent, "agents", None) or [agent])
    names = [a.name for a in agents]
    where = f"swarm '{agent.name}'" if hasattr(agent, "agents") else "the job's agent"
    unmapped = [n for n in names if n not in mapping]
    if unmapped:
        raise UsageError(
            f"agent_policies maps no policy to agent(s) {unmapped} of {where} (agents: {', '.join(names)}); "
            f"every agent samples from one policy: add agent_policies.{unmapped[0]}: <one of "
            f"{', '.join(policies)}> (an endpoint policy for an agent that is not trained)"
        )
    strangers = [n for n in mapping if n not in names]
    if strangers:
        raise UsageError(
            f"agent_policies names {strangers}, which {'are' if len(strangers) > 1 else 'is'} not an agent of "
            f"{where} (agents: {', '.join(names)}); fix the name or remove the entry"
        )
    is_trained = getattr(agent, "is_trained", None)
    for a in agents:
        policy = policies[mapping[a.name]]
        marked = is_trained(a) if is_trained is not None else a.trainable
        if policy.trained and not marked:
            raise UsageError(
                f"agent '{a.name}' is marked not trained in {where} (trainable=False or left out of "
                f"Swarm(train=...)) but mapped to policy '{mapping[a.name]}', which trains; map it to an "
                f"endpoint or a policy with train: false, or mark it trainable"
            )


def check_policy_backend(backend: str, job: Any) -> None:
    """``UsageError`` naming the backend when the job has policies and the backend does not declare
    that it trains several (its workers would sample every agent from one model)."""
    if not is_multi_policy(job):
        return
    from aworld_core.plugins import get_plugin_manager

    if get_plugin_manager().catalog().backend(backend).capabilities.multi_policy:
        return
    trained = trained_policies(job)
    raise UsageError(
        f"backend '{backend}' does not train several policies in one run (it declares no multi_policy "
        f"capability), but the job maps its agents to policies ({', '.join(job.policies)}; trained: "
        f"{', '.join(trained) or 'none'}); use a backend that does (see docs/multi-policy.md), or remove "
        f"policies/agent_policies and mark the one trained agent in the Swarm"
    )


def check_job_agents(job: Any) -> None:
    """Build the job's agent as a run would and check it against ``agent_policies``."""
    if not is_multi_policy(job):
        return
    from aworld_core.worker.build import build_agent

    check_agent_mapping(build_agent(job, cache=False), job)


def policy_segments(episode: Any, policy: str) -> list[Any]:
    """The training segments of ``episode`` that ``policy`` sampled (``TrainingSegment.policy``), in
    order: exactly its own agents' turns; every other agent's words are prompt or env tokens there."""
    from aworld_core.worker.credit import episode_segments

    return [s for s in episode_segments(episode) if s.policy == policy]


POLICY_REWARDS = "policy_rewards"  # episode.metadata key: the per-policy (or per-agent) rewards a reward gave


def set_policy_rewards(episode: Any, rewards: dict[str, float]) -> None:
    """Per-agent or per-policy rewards of a multi-policy episode, keyed by agent or policy name.

    A trajectory-aware reward (``func(episode=, sample=)``) returns the episode's reward as always and
    may call this first to credit the policies differently (e.g. the planner on whether it chose the
    right tool, the answerer on the answer). A policy with no entry (neither its name nor one of its
    agents') is credited with the episode's reward; agents of one policy with several entries get
    their mean. The values travel in ``episode.metadata`` (plain JSON)."""
    import math

    clean: dict[str, float] = {}
    for key, value in rewards.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise UsageError(f"the reward for {key!r} is {value!r}; per-policy rewards must be finite numbers")
        clean[str(key)] = float(value)
    episode.metadata[POLICY_REWARDS] = clean


def policy_reward(episode: Any, policy: str, agent_policies: dict[str, str]) -> float | None:
    """The reward ``policy`` is credited with for ``episode``: its own (by policy name, else the mean
    of its agents' entries) when the reward gave per-policy rewards, else the episode's."""
    given = (getattr(episode, "metadata", None) or {}).get(POLICY_REWARDS) or {}
    if policy in given:
        return float(given[policy])
    mine = [float(given[agent]) for agent, p in agent_policies.items() if p == policy and agent in given]
    if mine:
        return sum(mine) / len(mine)
    return episode.reward
