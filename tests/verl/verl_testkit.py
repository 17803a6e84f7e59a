"""Real pieces for the verl suite: verl's config, a rollout-server stand-in, agents and loops.

* ``compose_verl_config(overrides)``: verl 0.9.1's own ``ppo_trainer`` config through hydra.
* ``StubServer``: what verl's ``LLMServerClient`` is to an agent loop (``generate(request_id, *,
  prompt_ids, sampling_params, **kw) -> verl TokenOutput``). Behind it either the tiny local
  Qwen2 model (``HFTokenEngine``), or a script of replies it samples as token ids; it records
  every call, so tests can compare what the loop trained on with what was sampled.
* agent factories (``module:function`` references the agent-loop YAML names) reading their
  endpoints from environment variables, and ``SeedStyleLoop``, the seed's subclass pattern.

This directory is put on ``sys.path`` by ``tests/verl/conftest.py`` (importable as ``verl_testkit``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_core.agents import Agent, AgentConfig, Swarm
from aworld_core.schemas import SamplingParams

HERE = Path(__file__).resolve().parent

MCP_URL_ENV = "AWORLD_VERL_TEST_MCP_URL"
OTHER_LLM_URL_ENV = "AWORLD_VERL_TEST_OTHER_LLM_URL"
OTHER_LLM_MODEL_ENV = "AWORLD_VERL_TEST_OTHER_LLM_MODEL"

PROMPT_LENGTH = 768
RESPONSE_LENGTH = 256

BASE_OVERRIDES = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "actor_rollout_ref.rollout.temperature=0.7",
    "actor_rollout_ref.rollout.top_p=0.9",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0",
    "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
    f"data.max_prompt_length={PROMPT_LENGTH}",
    f"data.max_response_length={RESPONSE_LENGTH}",
]


def verl_config_dir() -> str:
    import verl

    return str(Path(verl.__file__).resolve().parent / "trainer" / "config")


def compose_verl_config(overrides: list[str], config_name: str = "ppo_trainer") -> Any:
    """verl's trainer config with ``overrides`` (hydra rejects keys verl does not have)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


# ---------------------------------------------------------------------------------------------
# The rollout server stand-in
# ---------------------------------------------------------------------------------------------


@dataclass
class ServedCall:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    kwargs: dict[str, Any]
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] | None = None
    member: int = 0  # the episode's position in the order episodes first called the server
    stop_reason: str = "completed"


Reply = str | Callable[[ServedCall], str]


class StubServer:
    """Stands in for verl's ``LLMServerClient``: token ids in, sampled token ids out.

    ``script`` maps a call to the text the "model" writes (a list is consumed in order per
    episode, keyed by ``request_id``); without a script the tiny model samples. Scripted text is
    encoded here, on the sampling side, and the stop id the loop asked for is appended, as a
    server's sampler would emit it. ``delay_s`` delays every answer (for timeouts).

    ``abort(call)`` returning ``"partial"`` or ``"empty"`` answers that call as vLLM answers a
    request a weight sync aborted (``stop_reason="aborted"``): the first half of what it would
    have sampled, with logprobs, or nothing with ``log_probs=None``. The next call of the same
    request id is answered with the rest (the resume), whatever the script says.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        engine: Any = None,
        script: list[Reply] | Callable[[ServedCall], str] | None = None,
        prompt_length: int = PROMPT_LENGTH,
        response_length: int = RESPONSE_LENGTH,
        version: int | None = 3,
        delay_s: float = 0.0,
        fail_when: Callable[[ServedCall], bool] | None = None,
        abort: Callable[[ServedCall], str | None] | None = None,
    ):
        self.tokenizer = tokenizer
        self.engine = engine
        self.script = script
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.version = version
        self.delay_s = delay_s
        self.fail_when = fail_when
        self.abort = abort
        self.calls: list[ServedCall] = []
        self._turn: dict[str, int] = {}
        self._members: dict[str, int] = {}
        self._rest: dict[str, tuple[list[int], list[float]]] = {}  # what an aborted request had left

    def calls_for(self, episode_prefix: str) -> list[ServedCall]:
        return [c for c in self.calls if c.request_id.split(":", 1)[0] == episode_prefix]

    def _max_tokens(self, call: ServedCall) -> int:
        # verl's server default: the response budget, capped by what the context has left
        default = min(self.response_length, self.prompt_length + self.response_length - len(call.prompt_ids))
        return max(1, int(call.sampling_params.get("max_tokens", default)))

    def _text(self, call: ServedCall) -> str:
        script = self.script
        if callable(script):
            return script(call)
        turn = self._turn.get(call.request_id, 0)
        self._turn[call.request_id] = turn + 1
        reply = script[min(turn, len(script) - 1)]  # type: ignore[index]
        return reply(call) if callable(reply) else reply

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        member = self._members.setdefault(request_id.split(":", 1)[0], len(self._members))
        call = ServedCall(request_id, list(prompt_ids), dict(sampling_params), dict(kwargs), member=member)
        self.calls.append(call)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_when is not None and self.fail_when(call):
            raise RuntimeError(f"rollout server error for {request_id}")
        limit = self._max_tokens(call)
        stops = list(sampling_params.get("stop_token_ids") or [])
        if request_id in self._rest:  # the resume of an aborted request
            ids, logprobs = self._rest.pop(request_id)
            ids, logprobs = ids[:limit], logprobs[:limit]
            call.token_ids, call.log_probs = ids, logprobs
            return self._output(call, ids, logprobs, sampling_params)
        if self.script is not None:
            ids = self.tokenizer.encode(self._text(call), add_special_tokens=False)
            if stops:
                ids.append(stops[0])
            ids = ids[:limit]
            logprobs = [round(-0.05 * (1 + (i % 7)), 4) for i in range(len(ids))]
        else:
            top_k = sampling_params.get("top_k")
            out = await self.engine.generate(
                list(prompt_ids),
                SamplingParams(
                    temperature=sampling_params.get("temperature"),
                    top_p=sampling_params.get("top_p"),
                    top_k=None if top_k is None or top_k < 0 else top_k,
                    max_tokens=limit,
                    extra={"stop_token_ids": stops},
                ),
                request_id=request_id,
            )
            ids, logprobs = list(out.token_ids), list(out.logprobs or [])
        mode = self.abort(call) if self.abort is not None else None
        if mode is not None:
            cut = len(ids) // 2 if mode == "partial" else 0
            self._rest[request_id] = (ids[cut:], logprobs[cut:])
            ids, logprobs = ids[:cut], logprobs[:cut]
            call.stop_reason = "aborted"
            call.token_ids, call.log_probs = ids, logprobs
            return self._output(call, ids, logprobs if ids else None, sampling_params)
        call.token_ids, call.log_probs = ids, logprobs
        return self._output(call, ids, logprobs, sampling_params)

    def _output(self, call: ServedCall, ids: list[int], logprobs: list[float] | None, params: dict[str, Any]) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        return TokenOutput(
            token_ids=ids,
            log_probs=logprobs if params.get("logprobs") else None,
            stop_reason=call.stop_reason,
            num_preempted=0,
            extra_fields={"global_steps": self.version},
        )


# ---------------------------------------------------------------------------------------------
# Agents the agent-loop YAML names (module:function), configured by environment variables
# ---------------------------------------------------------------------------------------------


def plain_agent() -> Agent:
    """A lone trained agent without tools, with its own sampling that verl must override."""
    return Agent("solver", system_prompt=None, conf=AgentConfig(temperature=0.3, top_p=0.5, max_steps=3))


def mcp_agent() -> Agent:
    """A trained agent with the tools of the MCP server at ``$AWORLD_VERL_TEST_MCP_URL``."""
    url = os.environ[MCP_URL_ENV]
    config = {"mcpServers": {"calc": {"type": "streamable-http", "url": url, "timeout": 5, "sse_read_timeout": 30}}}
    return Agent(
        "calculator",
        system_prompt="You add numbers with the add tool.",
        conf=AgentConfig(max_steps=4, tool_timeout_s=10),
        mcp_config=config,
        mcp_servers=["calc"],
    )


def _helper(trainable: bool) -> Agent:
    conf = AgentConfig(
        llm_base_url=os.environ.get(OTHER_LLM_URL_ENV),
        llm_model_name=os.environ.get(OTHER_LLM_MODEL_ENV, "stub-model"),
        llm_api_key="unused",
        max_steps=2,
        llm_retries=0,
    )
    return Agent("researcher", desc="Looks things up.", conf=conf, trainable=trainable)


def lead_swarm() -> Swarm:
    """The lead (trained, verl) calls a researcher that uses its own endpoint (not trained)."""
    lead = Agent("lead", system_prompt="Delegate research, then answer.", conf=AgentConfig(max_steps=3))
    return Swarm(lead, _helper(trainable=False), mode="lead", name="team", train=["lead"])


def two_trained_swarm() -> Swarm:
    """Lead and member both trained: two token sessions in one episode."""
    lead = Agent("lead", system_prompt="Delegate, then answer.", conf=AgentConfig(max_steps=3))
    member = Agent("helper", desc="Answers sub-questions.", conf=AgentConfig(max_steps=2))
    return Swarm(lead, member, mode="lead", name="pair", train=["lead", "helper"])


def exact_answer_reward(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 when the ground truth appears in the answer (a plain reward: the seed's signature)."""
    return 1.0 if str(ground_truth) in (solution_str or "") else 0.0


def _seed_style_loop_class() -> type:
    from aworld_verl import AworldAgentLoop

    class SeedStyleLoop(AworldAgentLoop):
        """The seed's pattern: a subclass whose build_agents points the agent at the loop's server."""

        async def build_agents(self) -> Agent:
            return Agent(
                "seed_agent",
                system_prompt="Answer briefly.",
                conf=AgentConfig(
                    llm_base_url=await self.get_llm_server_address(),
                    llm_model_name=await self.get_llm_server_model_name(),
                    llm_api_key="unused",
                    max_steps=2,
                ),
            )

    SeedStyleLoop.__module__ = __name__
    SeedStyleLoop.__qualname__ = "SeedStyleLoop"
    return SeedStyleLoop


def __getattr__(name: str) -> Any:  # the loop class needs verl; build it only when asked for
    if name == "SeedStyleLoop":
        cls = _seed_style_loop_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def exploding_reward(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """A reward that fails at run time (recorded on the episode, never a silent 0)."""
    raise ValueError("the grader is down")


def down_mcp_agent() -> Agent:
    """A trained agent whose MCP server at ``$AWORLD_VERL_TEST_MCP_URL`` is down (no retries)."""
    url = os.environ[MCP_URL_ENV]
    config = {"mcpServers": {"calc": {"type": "streamable-http", "url": url, "timeout": 2, "sse_read_timeout": 5}}}
    return Agent("calculator", system_prompt="You add numbers with the add tool.",
                 conf=AgentConfig(max_steps=2, mcp_connect_retries=0), mcp_config=config, mcp_servers=["calc"])


# ---------------------------------------------------------------------------------------------
# verl's V1 trainer as far as it runs on CPU
# ---------------------------------------------------------------------------------------------

V1_OVERRIDES = [
    "algorithm.adv_estimator=grpo",
    # the actor recomputes old logprobs on GPUs; bypass mode uses the rollout's (verl's option)
    "algorithm.rollout_correction.bypass_mode=true",
    "trainer.v1.sampler.custom_sampler.path=pkg://aworld_verl.sampler",
    "trainer.v1.sampler.custom_sampler.name=aworld_replay_buffer",
]


@dataclass
class StoredRow:
    """One output as verl's V1 trainer holds it in TransferQueue after the advantage step."""

    key: str
    uid: str
    session: int
    index: int
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]
    score: float  # rm_scores summed: what GRPO reads
    advantage: float  # the row's advantage on its first trained token (0.0 for a masked row)
    extra: dict[str, Any]


@dataclass
class V1Step:
    metrics: dict[str, Any]
    rows: list[StoredRow]

    def group(self, uid: str) -> list[StoredRow]:
        return sorted((r for r in self.rows if r.uid == uid), key=lambda r: (r.session, r.index))

    def uids(self) -> list[str]:
        return list(dict.fromkeys(r.uid for r in self.rows))


class _InProcessManager:
    """What ``AgentLoopManagerTQ`` does for the trainer, with the worker in this process: hand the
    batch to the worker, which spawns its prompts' sessions and returns at once."""

    def __init__(self, worker: Any):
        self.worker = worker
        self.pending: list[asyncio.Task[Any]] = []

    def generate_sequences(self, batch: Any) -> None:
        self.pending.append(asyncio.ensure_future(self.worker.generate_sequences(batch)))

    async def settle(self) -> None:
        await asyncio.gather(*self.pending)
        self.pending.clear()
        while self.worker.background_tasks:
            await asyncio.gather(*list(self.worker.background_tasks))


class _NoGpuPool:
    """The one thing the trainer's metrics ask of its resource pool (built with the GPU workers)."""

    def get_n_gpus(self) -> int:
        return 1


class V1Trainer:
    """verl 0.9.1's V1 sync trainer (``PPOTrainerSync``, its replay buffer built from the config:
    aworld's sampler) over verl's TransferQueue worker (``AgentLoopWorkerTQ``, the class the Ray
    actor wraps, in this process). ``step`` runs the trainer's own code for one step up to the
    actor update: submit a batch (``_submit_batch_to_rollout``), sample it, compute advantages."""

    def __init__(self, config: Any, server: Any):
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

        self.config = config
        self.trainer = get_trainer_cls("sync")(config)
        self.worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class(config, llm_client=server)
        self.manager = _InProcessManager(self.worker)
        self.trainer.agent_loop_manager = self.manager
        self.trainer.resource_pool_manager = _NoGpuPool()  # init() builds the GPU pools; metrics read its size
        _clear_partition("train")

    async def step(self, rows: list[dict[str, Any]], global_steps: int = 1) -> V1Step:
        import uuid

        import numpy as np
        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu

        columns: dict[str, Any] = {}
        for key in rows[0]:
            columns[key] = np.empty(len(rows), dtype=object)
            columns[key][:] = [row[key] for row in rows]
        columns["uid"] = np.array([str(uuid.uuid4()) for _ in rows], dtype=object)  # as _fetch_one_gen_batch
        batch = tu.get_tensordict(columns)
        tu.assign_non_tensor_data(batch, "global_steps", global_steps)
        self.trainer.global_steps = global_steps
        self.trainer._submit_batch_to_rollout(batch)
        await self.manager.settle()
        meta, metrics = await asyncio.to_thread(self.trainer.replay_buffer.sample, global_steps, "train", len(rows))
        try:
            await asyncio.to_thread(self.trainer._compute_advantage, meta, metrics)
            stored = await asyncio.to_thread(_read_rows, meta)
            # the trainer's own step metrics over what the loops stored (they must compute)
            timing = {"step": 1.0, "gen": 1.0}
            await asyncio.to_thread(self.trainer._compute_metrics, meta, metrics, timing, global_steps, 0)
        finally:
            tq.kv_clear(keys=meta.keys, partition_id=meta.partition_id)  # the trainer's step 7
            _clear_partition("train")
        return V1Step(metrics, stored)


def _clear_partition(partition_id: str) -> None:
    import transfer_queue as tq

    listed = (tq.kv_list(partition_id) or {}).get(partition_id, {})
    if listed:
        tq.kv_clear(keys=list(listed), partition_id=partition_id)


def _read_rows(meta: Any) -> list[StoredRow]:
    import transfer_queue as tq

    fields = ["uid", "responses", "response_mask", "rollout_log_probs", "rm_scores", "advantages", "extra_fields"]
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=fields)
    uids = data.pop("uid").tolist()
    extras = data.pop("extra_fields").tolist()
    out = []
    for i, key in enumerate(meta.keys):
        uid, session, index = key.rsplit("_", 2)
        mask = [int(x) for x in data["response_mask"][i].tolist()]
        adv = data["advantages"][i].tolist()
        first = next((j for j, m in enumerate(mask) if m), None)
        out.append(StoredRow(
            key=key, uid=str(uids[i]), session=int(session), index=int(index),
            response_ids=[int(x) for x in data["responses"][i].tolist()], response_mask=mask,
            logprobs=[float(x) for x in data["rollout_log_probs"][i].tolist()],
            score=float(sum(data["rm_scores"][i].tolist())),
            advantage=float(adv[first]) if first is not None else 0.0,
            extra=dict(extras[i]),
        ))
        assert uid == str(uids[i])
    return out


def verl_row(agent_name: str, question: str, index: int = 0, truth: str = "5") -> dict[str, Any]:
    """One verl dataset row as the agent loop receives it."""
    return {
        "raw_prompt": [{"role": "user", "content": question}],
        "agent_name": agent_name,
        "data_source": "unit",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": index},
        "index": index,
    }
