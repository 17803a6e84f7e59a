"""The HF model's teacher-forced logprobs, to compare with what vLLM reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def hf_logprobs(model_dir: Path, sequence: list[int]) -> list[float]:
    """Teacher-forced ``log_softmax(logits)`` of each token of ``sequence`` given the ones before
    (entry i is the logprob of ``sequence[i + 1]``)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = _models.get(model_dir)
    if model is None:
        model = _models[model_dir] = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0].float()
    table = torch.log_softmax(logits[:-1], dim=-1)
    return table.gather(-1, torch.tensor(sequence[1:])[:, None]).squeeze(-1).tolist()


_models: dict[Path, Any] = {}
