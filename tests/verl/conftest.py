"""Fixtures for the verl suite: run with ``.venvs/verl/bin/python -m pytest tests/verl``.

verl's trainer needs GPUs, but its agent-loop machinery runs on CPU: the tests build verl's real
``AgentLoopWorker`` (no Ray) over a ``StubServer`` with the tiny local model behind it, and for
the V1 trainer a local Ray with verl's TransferQueue (``ray_tq``, once per session), verl's
``AgentLoopWorkerTQ`` in this process and the real ``PPOTrainerSync`` (``make_v1``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from aworld_core.testing import get_tiny_model_dir

    return get_tiny_model_dir()


@pytest.fixture(scope="session")
def verl_base_config(tiny_model_dir: Path) -> Any:
    pytest.importorskip("verl.experimental.agent_loop")
    from verl_testkit import BASE_OVERRIDES, compose_verl_config

    return compose_verl_config([f"actor_rollout_ref.model.path={tiny_model_dir}", *BASE_OVERRIDES])


@pytest.fixture(scope="session")
def verl_tokenizer(verl_base_config: Any) -> Any:
    """The tokenizer verl's workers load for the tiny model (AutoTokenizer through HFModelConfig)."""
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(verl_base_config.actor_rollout_ref.model.path))


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir: Path) -> Any:
    from aworld_core.testing import load_tiny_model
    from aworld_core.tokens.hf_engine import HFTokenEngine

    return HFTokenEngine(load_tiny_model(tiny_model_dir), None, batch_window_s=0.0, max_new_tokens=64)


@pytest.fixture
def make_worker(verl_base_config: Any, tmp_path: Path):
    """``make_worker(entries, llm_client, **config_updates)``: verl's AgentLoopWorker with our YAML.

    ``entries`` is the agent-loop YAML (a list of ``{name, _target_, ...kwargs}``), written to a
    file and loaded by the worker exactly as in training; ``config_updates`` are dotted config
    keys to change (e.g. ``{"actor_rollout_ref.rollout.response_length": 24}``).
    """
    import copy

    import yaml
    from omegaconf import OmegaConf

    def make(entries: list[dict[str, Any]], llm_client: Any, updates: dict[str, Any] | None = None) -> Any:
        from verl.experimental.agent_loop import AgentLoopWorker

        path = tmp_path / f"agent_loop_{len(list(tmp_path.glob('agent_loop_*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(entries, sort_keys=False))
        config = copy.deepcopy(verl_base_config)
        OmegaConf.update(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path", str(path))
        for key, value in (updates or {}).items():
            OmegaConf.update(config, key, value)
        return AgentLoopWorker(config, llm_client=llm_client)

    return make


@pytest.fixture
async def close_states():
    """Stop gateways and agent clients the loops started on this test's event loop."""
    yield
    from aworld_verl.worker_state import close_worker_states

    await close_worker_states()


@pytest.fixture(scope="session")
def ray_tq():
    """A local Ray instance with verl's TransferQueue (what V1's trainer and workers share)."""
    pytest.importorskip("transfer_queue")
    import ray
    import transfer_queue as tq

    # logical CPUs for TransferQueue's controller and storage actors (they reserve one each)
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    tq.init()
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture
def make_v1(ray_tq: Any, verl_base_config: Any, tmp_path: Path):
    """``make_v1(entries, llm_client, overrides)``: verl's V1 sync trainer over its TQ worker, with
    our agent-loop YAML; ``overrides`` are hydra overrides on top of the suite's base config."""
    import yaml
    from omegaconf import OmegaConf

    def make(entries: list[dict[str, Any]], llm_client: Any, overrides: list[str] | None = None) -> Any:
        from verl_testkit import BASE_OVERRIDES, V1_OVERRIDES, V1Trainer, compose_verl_config

        path = tmp_path / f"agent_loop_v1_{len(list(tmp_path.glob('agent_loop_v1_*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(entries, sort_keys=False))
        model = verl_base_config.actor_rollout_ref.model.path
        config = compose_verl_config(
            [f"actor_rollout_ref.model.path={model}", *BASE_OVERRIDES, *V1_OVERRIDES, *(overrides or [])]
        )
        OmegaConf.update(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path", str(path))
        return V1Trainer(config, llm_client)

    return make
