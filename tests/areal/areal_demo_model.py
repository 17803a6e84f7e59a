"""The demo's model for the trainer tests: the CPU demo's tokenizer, chat template and warm start
(``aworld_cpu_grpo_demo``), in a test shape whose heads are 32 wide (vLLM's CPU attention kernels
take 32 and up; the demo's own shape has them too, but its 170 s warm start is too long here).

Warm-started for a few seconds on the demo's traces with 30% of first decisions "call the tool":
the tool-call syntax is learnt, the choice to call is rare (about 0.1 of episodes at temperature
1), so GRPO has something to raise. Made at test time; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
         "intermediate_size": 192}
WARM_START = {"steps": 150, "batch_size": 16, "lr": 5e-3, "tool_first_share": 0.3, "copy_rate": 1.0}


def build_demo_model(path: Path, seed: int = 0) -> Path:
    import torch

    from aworld_cpu_grpo_demo.build import new_model, save_tokenizer, train_tokenizer
    from aworld_cpu_grpo_demo.warm_start import warm_start

    tokenizer = train_tokenizer(seed=seed, corpus_size=600)
    model = new_model(tokenizer, seed=seed, **SHAPE)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        warm_start(model, tokenizer, seed=seed, progress=False, **WARM_START)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(path)
    save_tokenizer(tokenizer, path)
    return path
