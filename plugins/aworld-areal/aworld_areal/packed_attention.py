"""Packed sequences under ``attn_impl: sdpa`` in AReaL 1.0.4's FSDP engine: one sequence's tokens
attend only to that sequence.

AReaL packs a micro-batch's sequences into one row and describes the boundaries with
``cu_seq_lens_q``/``cu_seq_lens_k`` and per-sequence ``position_ids`` (``FSDPEngine`` micro-batch
preparation), and passes ``attention_mask=dict(full_attention=None, sliding_attention=None)``. That
is right for ``flash_attention_2`` (varlen kernels read the boundaries), but flash attention does not
exist on a CPU, and HF's ``sdpa`` takes the dict as "no mask": plain causal attention over the whole
packed row, so every sequence attends to the ones packed before it. Measured on the demo's model:
logits off by 3.4 against the sequence alone; AReaL's recomputed logprobs then disagree with the
rollout's (``behave_imp_weight`` averaged 0.5-0.8 instead of 1 on fresh samples) and the PPO
gradient is that of another model (the demo's reward rose, then collapsed).

:func:`install` registers, through HF's public ``AttentionInterface``, an ``sdpa`` that runs each
packed sequence on its own when it is given ``cu_seq_lens_q`` and no mask (one row), and HF's own
``sdpa`` otherwise. Installed in the trainer process by ``aworld_areal.run`` when the actor uses
``sdpa``; the canary in tests/areal/test_vllm_engine.py checks AReaL still packs this way and that
the packed forward equals the sequences' own.
"""

from __future__ import annotations

from typing import Any

_installed = False


def packed_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
    """HF's ``sdpa`` per packed sequence (``query``: [1, heads, tokens, dim]); HF's output layout
    ([1, tokens, heads, dim])."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or attention_mask is not None or query.shape[0] != 1 or key.shape[2] != query.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    total = query.shape[2]
    bounds = [int(b) for b in cu.tolist() if 0 < int(b) < total]
    starts, ends = [0, *bounds], [*bounds, total]  # tokens past the last boundary (padding): one more segment
    rest = {k: v for k, v in kwargs.items() if k not in ("cu_seq_lens_q", "cu_seq_lens_k")}
    outputs = [
        sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, dropout=dropout,
                               scaling=scaling, is_causal=is_causal, **rest)[0]
        for s, e in zip(starts, ends, strict=True) if e > s
    ]
    return torch.cat(outputs, dim=1), None


def install() -> None:
    """Register :func:`packed_sdpa` as ``sdpa`` (process-wide; idempotent)."""
    global _installed
    if _installed:
        return
    from transformers import AttentionInterface

    AttentionInterface.register("sdpa", packed_sdpa)
    _installed = True
