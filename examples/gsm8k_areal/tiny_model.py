"""A tiny local model for running this example on a CPU, made here (nothing is downloaded).

``job_cpu.yaml``'s ``model.build``: the core calls ``build(path)`` when ``model.path`` does not exist
yet. It is the CPU demo's byte-level tokenizer and chat template (``aworld_cpu_grpo_demo``, installed
in ``.venvs/areal`` by ``make``) with a small random Qwen2 whose heads are 32 wide (vLLM's CPU
attention kernels take 32 and up) and whose context holds a GSM8K prompt with the tool schema.
Random weights do not solve GSM8K: the CPU run shows the whole pipeline (episodes through AReaL's
trainer, weight updates into vLLM, checkpoint, metrics), not learning; the GPU job (``job.yaml``)
trains Qwen2.5-1.5B-Instruct.
"""

from __future__ import annotations

from pathlib import Path

CONTEXT = 2048  # the model's positions; job_cpu.yaml's gconfig.max_tokens stays within it
SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
         "intermediate_size": 128, "max_position_embeddings": CONTEXT}


def build(path: str) -> Path:
    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer

    target = Path(path)
    tokenizer = train_tokenizer(seed=0, corpus_size=600)
    tokenizer.model_max_length = CONTEXT
    model = new_model(tokenizer, seed=0, **SHAPE)
    staging = target.with_name(target.name + ".building")
    model.save_pretrained(staging)
    save_tokenizer(tokenizer, staging)
    staging.rename(target)
    return target
