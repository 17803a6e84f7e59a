"""The toy task: answer in the case of the question. Prompts are random words, all UPPER or all
lower case; the reward is the share of the answer's letters in that case (no letters: 0)."""

from __future__ import annotations

import random
from typing import Any

from aworld_core import Sample

WORDS = "the a of to and in is it what when how city weather number answer question tool call result".split()


def load_case_prompts(n: int = 512, seed: int = 0) -> list[Sample]:
    """``n`` prompts of 3-6 random words, upper and lower case in turn (so each step's batch is balanced);
    generated here, never downloaded."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        case = ("upper", "lower")[i % 2]
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6)))
        text = text.upper() if case == "upper" else text
        samples.append(Sample(id=f"case-{i}", prompt=[{"role": "user", "content": text}], ground_truth=case,
                              data_source="case_prompts"))
    return samples


def same_case(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """The share of the answer's ASCII letters in the case ``ground_truth`` names."""
    letters = [c for c in solution_str or "" if c.isascii() and c.isalpha()]
    match = str.isupper if ground_truth == "upper" else str.islower
    return sum(map(match, letters)) / len(letters) if letters else 0.0


def build_model(path: str) -> None:
    """``model.build``: aworld_core.testing's tiny Qwen2 and BPE tokenizer (random init), with the
    embeddings at half the kit's scale so that the first samples vary enough to explore."""
    import torch
    from transformers.utils import logging as hf_logging

    from aworld_core.testing import load_tiny_model, make_tiny_model

    hf_logging.disable_progress_bar()
    make_tiny_model(path)
    model = load_tiny_model(path)
    with torch.no_grad():
        model.model.embed_tokens.weight.div_(2.0)
    model.save_pretrained(path)
