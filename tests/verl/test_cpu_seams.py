"""Canaries for every place aworld-verl reaches into verl 0.9.1 (``aworld_verl.seams``,
``aworld_verl.cpu_platform``, ``aworld_verl.external_rollout``): each fails loudly, naming what
changed, when a verl release moves what the seam relies on.

The process-level checks run in a fresh interpreter (the seams are installed by ``import verl``
through the ``verl.plugins`` entry point, once per process), all in one subprocess to pay verl's
import once.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl.experimental.agent_loop")

PROBE = textwrap.dedent(
    """
    import json, os, sys
    import verl
    import torch
    from verl.utils import device
    from verl.plugin.platform.platform_manager import PlatformRegistry, get_platform
    import verl.utils.distributed as dist
    out = {
        "platform": type(get_platform()).__name__,
        "registered": list(PlatformRegistry.registered_names()),
        "device_name": device.get_device_name(),
        "device_id": device.get_device_id(),
        "backend": device.get_nccl_backend(),
        "resource": device.get_resource_name(),
        "ipc": device.is_support_ipc(),
        "mem": list(device.get_torch_device().mem_get_info()),
        "empty_cache": device.get_torch_device().empty_cache() is None,
        "wrapped": getattr(dist.initialize_global_process_group_ray, "__aworld_wrapped__", None) is not None,
    }
    # the process group: verl's own worker import binds the wrapped function by name
    import verl.workers.engine_workers as ew
    out["engine_workers_bound"] = ew.initialize_global_process_group_ray is dist.initialize_global_process_group_ray
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
    dist.initialize_global_process_group_ray(timeout_second=60)
    out["pg_backend"] = str(torch.distributed.get_backend())
    t = torch.ones(3)
    torch.distributed.all_reduce(t)
    out["all_reduce"] = t.tolist()
    torch.distributed.destroy_process_group()
    # registrations made when verl imports the registry modules
    from verl.workers.rollout.replica import RolloutReplicaRegistry
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.engine import EngineRegistry
    out["replica"] = RolloutReplicaRegistry.get("external_vllm").__name__
    out["adapter"] = get_rollout_class("external_vllm", "async").__name__
    out["engine_cpu"] = EngineRegistry.get_engine_cls("language_model", "fsdp").__name__
    out["value_engine_cpu"] = EngineRegistry.get_engine_cls("value_model", "fsdp2").__name__
    import verl.workers.engine.fsdp.transformer_impl as impl
    out["loader_restored"] = type(impl.__loader__).__name__
    print("PROBE" + json.dumps(out))
    """
)


def _probe(env_extra: dict[str, str]) -> dict:
    from aworld_core.vllm_server import free_port

    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(free_port())], capture_output=True, text=True, env=env,
                          timeout=600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE")), None)
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line[len("PROBE"):])


@pytest.fixture(scope="module")
def probed() -> dict:
    return _probe({"VERL_PLATFORM": "cpu"})


def test_verl_loads_the_entry_point_and_the_cpu_platform_answers(probed):
    """verl's ``verl.plugins`` group loads ``aworld_verl.verl_plugin``; ``VERL_PLATFORM=cpu`` picks
    ``PlatformCPU`` (a verl release that adds an abstract method to ``PlatformBase`` makes it
    uninstantiable: this fails)."""
    assert probed["platform"] == "PlatformCPU" and "cpu" in probed["registered"]
    assert probed["device_name"] == "cpu" and probed["device_id"] == "cpu"
    assert probed["backend"] == "gloo" and probed["resource"] == "GPU" and probed["ipc"] is False
    assert probed["mem"] == [0, 0] and probed["empty_cache"] is True


def test_the_process_group_seam(probed):
    """verl builds ``cpu:gloo,{device}:{backend}`` (duplicate on a CPU); the wrapper is what
    ``engine_workers`` calls, and a one-rank gloo group comes up through it."""
    assert probed["wrapped"] and probed["engine_workers_bound"]
    assert probed["pg_backend"] in ("gloo", "cpu:gloo") and probed["all_reduce"] == [1.0, 1.0, 1.0]


def test_registrations_made_when_verl_imports_its_registries(probed):
    assert probed["replica"] == "ExternalVllmReplica" and probed["adapter"] == "ExternalVllmAdapter"
    assert probed["engine_cpu"] == "FSDPEngineWithLMHead" and probed["value_engine_cpu"] == "FSDPEngineWithValueHead"
    assert probed["loader_restored"] == "SourceFileLoader"  # the post-import hook leaves no trace


def test_a_cpu_machine_picks_the_cpu_platform_without_being_told():
    """verl probes nvidia, npu and rocm first (registered before ours); with none of them the CPU."""
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    code = "import verl; from verl.utils.device import get_device_name; print('DEV', get_device_name())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "DEV cpu" in proc.stdout


def test_canary_verl_source_still_needs_each_seam():
    """What the seams work around is still in verl (when one of these fails, verl changed: drop
    or move the seam, and update docs/backend-verl.md "verl on a CPU")."""
    import verl
    import verl.utils.distributed as dist
    from verl.plugin.platform import platform_manager
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.rollout import base as rollout_base

    # entry points: verl loads the group on import
    assert '"verl.plugins"' in inspect.getsource(verl)
    # the process-group string that duplicates 'cpu' on a CPU
    original = getattr(dist.initialize_global_process_group_ray, "__aworld_wrapped__",
                       dist.initialize_global_process_group_ray)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in inspect.getsource(original)
    # verl ships no cpu platform and registers its FSDP engines for cuda/npu only
    assert set(platform_manager.PlatformRegistry.registered_names()) >= {"nvidia", "huawei", "amd", "cpu"}
    source = inspect.getsource(transformer_impl)
    assert 'backend=["fsdp", "fsdp2"], device=["cuda", "npu"])\nclass FSDPEngineWithLMHead' in source
    assert 'backend=["fsdp", "fsdp2"], device=["cuda", "npu"])\nclass FSDPEngineWithValueHead' in source
    # _ROLLOUT_REGISTRY is still the private dict get_rollout_class reads
    assert isinstance(rollout_base._ROLLOUT_REGISTRY, dict)
    assert "_ROLLOUT_REGISTRY[(rollout_name, mode)]" in inspect.getsource(rollout_base.get_rollout_class)


def test_torch_still_refuses_the_duplicate_backend_string():
    """The reason for the process-group seam (when torch accepts it, the wrapper can go)."""
    import torch.distributed as dist

    with pytest.raises(ValueError, match="[Dd]uplicate"):
        dist.distributed_c10d.BackendConfig("cpu:gloo,cpu:gloo")


def test_canary_what_verl_calls_on_a_rollout_server_our_actor_answers():
    """Every ``server.<method>.remote`` verl's replica and client call exists on
    ``ExternalVllmServer`` with compatible arguments."""
    import re

    from verl.workers.rollout import llm_server, replica

    from aworld_verl.external_rollout import ExternalVllmServer

    called = set(re.findall(r"server\.(\w+)\.remote\(", inspect.getsource(replica.RolloutReplica)))
    called |= set(re.findall(r"server\.(\w+)\.remote\(", inspect.getsource(llm_server.LLMServerClient)))
    assert {"generate", "sleep", "wake_up", "abort_all_requests", "resume_generation"} <= called
    missing = sorted(name for name in called if not callable(getattr(ExternalVllmServer, name, None)))
    assert not missing, f"verl now calls {missing} on its rollout servers: add them to ExternalVllmServer"
    generate = inspect.signature(ExternalVllmServer.generate).parameters
    for name in ("prompt_ids", "sampling_params", "request_id", "image_data", "video_data"):
        assert name in generate
    call = inspect.getsource(llm_server.LLMServerClient.generate)
    assert "server.generate.remote(" in call and "prompt_ids=prompt_ids" in call


def test_canary_the_naive_weight_sync_reaches_our_adapter():
    """verl's V1 sync trainer forces the naive backend, whose actor-side ``update_weights`` hands
    the FSDP weights to ``self.rollout.update_weights`` (our adapter) with these keywords."""
    from verl.trainer.ppo.v1 import trainer_base
    from verl.workers import engine_workers
    from verl.workers.rollout.base import BaseRollout

    from aworld_verl.external_rollout import ExternalVllmAdapter

    assert 'checkpoint_engine_config.backend = "naive"' in inspect.getsource(trainer_base.PPOTrainer._setup)
    sync = inspect.getsource(engine_workers.ActorRolloutRefWorker.update_weights)
    assert "await self.rollout.update_weights(" in sync and "base_sync_done=True, global_steps=global_steps" in sync
    assert "get_per_tensor_param" in sync
    abstract = {name for name, member in inspect.getmembers(BaseRollout) if getattr(member, "__isabstractmethod__", False)}
    assert abstract <= {name for name in abstract if name in ExternalVllmAdapter.__dict__}, abstract
    params = inspect.signature(ExternalVllmAdapter.update_weights).parameters
    assert {"weights", "global_steps", "peft_config", "base_sync_done", "wire_format"} <= set(params)


def test_canary_the_replay_buffer_poll_interval_we_shorten():
    """The CPU plan passes ``poll_interval`` to verl's replay buffer (through ``sampler_kwargs``)."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    assert inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default == 2.0


def test_canary_verl_pools_still_want_gpus():
    """Why the CPU plan starts Ray with logical GPUs: verl's resource pools hard-code ``use_gpu``."""
    from verl.single_controller.ray import base

    assert "use_gpu=True" in inspect.getsource(base.ResourcePoolManager.create_resource_pool)


def test_max_tokens_rule_is_verls():
    """Our server actor budgets ``max_tokens`` as verl's vLLM server does (its source, compared:
    the module needs vLLM to import)."""
    from pathlib import Path

    import verl

    from aworld_verl.external_rollout import max_tokens_for

    source = (Path(verl.__file__).parent / "workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    assert "self.config.response_length, self.config.prompt_length + self.config.response_length - len(prompt_ids)" in source
    assert "max_tokens = max(1, min(max_tokens, max_possible_tokens))" in source
    rule = dict(response_length=32, prompt_length=16, max_model_len=48)
    assert max_tokens_for({}, 10, **rule) == 32
    assert max_tokens_for({}, 30, **rule) == 18  # 16 + 32 - 30, within 48 - 30
    params = {"max_tokens": 100}
    assert max_tokens_for(params, 40, **rule) == 8 and params == {}
    assert max_tokens_for({"max_new_tokens": 0}, 1, **rule) == 1
    with pytest.raises(ValueError, match="no room"):
        max_tokens_for({}, 48, **rule)
