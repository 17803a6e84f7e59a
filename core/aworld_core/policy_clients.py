"""``PolicyClients``: which LLM client each agent of a multi-policy episode samples from.

A backend that trains several policies (``aworld_core.policies``) passes one of these as the
episode's ``llm`` instead of one token client. It holds a token client (``TokenLLM``) per policy
served here (LoRA adapters of one base share one engine through ``AdapterEngine``; a policy with a
model of its own has its own engine) and the fixed endpoints of the untrained ones, and maps every
agent to its policy. The runtime asks it for each agent's client; the agent's turns go into that
policy's token sessions, so each policy's training segments hold exactly its own agents' sampled
tokens (what another agent said reaches it as prompt or tool-result tokens, mask 0). Finished
sessions come back tagged with their policy (``TrainingSegment.policy``).

It answers the session calls the worker kit makes on a token client (``finish_session``,
``session``, ``session_ids``), routing each to the policy's client that holds the session.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Mapping
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import TrainingView


def tag_view(view: TrainingView, policy: str) -> TrainingView:
    """``view`` with every segment marked as sampled by ``policy``."""
    return view.model_copy(update={
        "policy": policy,
        "later_segments": [s.model_copy(update={"policy": policy}) for s in view.later_segments],
    })


class PolicyClients:
    """Per-agent LLM clients of a multi-policy job.

    ``clients``: policy name -> the token client serving it here; ``assignment``: agent name ->
    policy name (every agent); ``endpoints``: policy name -> its ``PolicyEndpoint`` (an untrained
    policy served elsewhere); ``trained``: the policies training updates (default: every policy in
    ``clients``); the others sample here but are never updated (``train: false``).
    """

    def __init__(
        self,
        clients: Mapping[str, Any],
        assignment: Mapping[str, str],
        *,
        endpoints: Mapping[str, Any] | None = None,
        trained: list[str] | None = None,
    ):
        self.clients = dict(clients)
        self.assignment = dict(assignment)
        self.endpoints = dict(endpoints or {})
        both = set(self.clients) & set(self.endpoints)
        if both:
            raise UsageError(f"policies {sorted(both)} are given both a client here and an endpoint")
        unknown = sorted({p for p in self.assignment.values() if p not in self.clients and p not in self.endpoints})
        if unknown:
            raise UsageError(f"agents are mapped to policies {unknown}, which have neither a client nor an endpoint")
        self.trained = list(self.clients) if trained is None else list(trained)
        stray = [p for p in self.trained if p not in self.clients]
        if stray:
            raise UsageError(f"trained policies {stray} have no client here (an endpoint is never trained)")
        self._endpoint_llms: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_job(cls, job: Any, clients: Mapping[str, Any]) -> PolicyClients:
        """The job's mapping, with ``clients`` for its local policies (every one of them)."""
        policies = job.policies
        missing = [name for name, p in policies.items() if p.local and name not in clients]
        if missing:
            raise UsageError(f"policies {missing} are served here but no client was built for them")
        return cls(
            {name: clients[name] for name, p in policies.items() if p.local},
            job.agent_policies,
            endpoints={name: p.endpoint for name, p in policies.items() if p.endpoint is not None},
            trained=[name for name, p in policies.items() if p.trained],
        )

    def __repr__(self) -> str:
        return f"PolicyClients({self.assignment})"

    # -- routing --------------------------------------------------------------------------------

    def policy_of(self, agent: str) -> str:
        try:
            return self.assignment[agent]
        except KeyError:
            raise UsageError(
                f"agent '{agent}' is mapped to no policy (agent_policies maps {sorted(self.assignment)}); map "
                f"every agent of the Swarm"
            ) from None

    def routes(self, agent: str) -> bool:
        """Whether ``agent`` samples through a token client here (its turns are recorded)."""
        return self.policy_of(agent) in self.clients

    def client(self, agent: str) -> Any:
        """The token client ``agent`` samples from."""
        policy = self.policy_of(agent)
        if policy not in self.clients:
            raise UsageError(f"agent '{agent}' is mapped to endpoint policy '{policy}', which has no token client")
        return self.clients[policy]

    def endpoint_client(self, agent: str) -> Any:
        """The OpenAI-compatible client of ``agent``'s endpoint policy, one per event loop."""
        from aworld_core.llm.openai_http import OpenAICompatibleLLM
        from aworld_core.settings import get_settings

        policy = self.policy_of(agent)
        endpoint = self.endpoints.get(policy)
        if endpoint is None:
            raise UsageError(f"agent '{agent}' is mapped to policy '{policy}', which is served here, not an endpoint")
        loop = asyncio.get_running_loop()
        per_loop = self._endpoint_llms.setdefault(loop, {})
        llm = per_loop.get(policy)
        if llm is None:
            if endpoint.api_key_env:
                key = os.environ.get(endpoint.api_key_env)
                if not key:
                    raise UsageError(
                        f"policies.{policy}.endpoint.api_key_env names {endpoint.api_key_env}, which is not set "
                        f"in this process's environment; export it before the run"
                    )
            else:
                key = get_settings().llm_api_key
            llm = per_loop[policy] = OpenAICompatibleLLM(endpoint.base_url, endpoint.model_name, key)
        return llm

    def check(self, agent_or_swarm: Any) -> None:
        """``UsageError`` naming an agent of ``agent_or_swarm`` that is mapped to nothing."""
        agents = list(getattr(agent_or_swarm, "agents", None) or [agent_or_swarm])
        names = [a.name for a in agents]
        unmapped = [n for n in names if n not in self.assignment]
        if unmapped:
            raise UsageError(
                f"agent(s) {unmapped} of '{agent_or_swarm.name}' are mapped to no policy (agent_policies maps "
                f"{sorted(self.assignment)}); every agent samples from one policy"
            )

    # -- the session calls of a token client ----------------------------------------------------

    def _holder(self, session_id: str) -> tuple[str, Any] | None:
        for policy, client in self.clients.items():
            session = getattr(client, "session", None)
            if session is not None and session(session_id) is not None:
                return policy, client
        return None

    def finish_session(self, session_id: str) -> TrainingView | None:
        """The session's training view tagged with its policy (``None`` if it never sampled)."""
        held = self._holder(session_id)
        if held is None:  # never sampled: refuse late calls on every client, collect nothing
            for client in self.clients.values():
                client.finish_session(session_id)
            return None
        policy, client = held
        view = client.finish_session(session_id)
        return None if view is None else tag_view(view, policy)

    def session(self, session_id: str) -> Any:
        held = self._holder(session_id)
        return None if held is None else held[1].session(session_id)

    def session_ids(self) -> list[str]:
        return [s for client in self.clients.values() for s in client.session_ids()]

    async def aclose(self) -> None:
        """Close the endpoint clients made on this loop (the token clients belong to the backend)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for llm in (self._endpoint_llms.pop(loop, None) or {}).values():
            await llm.aclose()
