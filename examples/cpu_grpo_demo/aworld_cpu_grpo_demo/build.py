"""Build the demo's model directory: tokenizer, tiny Qwen2 model, supervised warm start.

``build_model(path)`` is the job's ``model.build``: the core calls it when ``model.path`` does
not exist yet, so a rerun of the demo skips it. Nothing is downloaded: the tokenizer is trained
on synthetic conversations and the model starts from random weights. The directory is written
under a temporary name and renamed at the end, so an interrupted build is never mistaken for a
finished one.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from importlib import resources
from pathlib import Path
from typing import Any

from aworld_cpu_grpo_demo.traces import corpus

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<answer>", "</answer>"]
PAD, EOS = "<|endoftext|>", "<|im_end|>"
BPE_VOCAB_SIZE = 320

# the tiny Qwen2 that ``new_model`` makes by default (0.83 M parameters): the other demos, the verl
# end-to-end test and the model-shape benchmarks build it
MODEL_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 384,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
# make demo's model (0.22 M parameters): half as wide, the same depth and 32-wide heads (vLLM's CPU
# attention kernels take 32 and up). Its warm-start step took 0.13 s against the 0.83 M shape's
# 0.33 s on 2 idle cores, and after GRPO it answered 99-100 of 100 held-out problems where the wider
# one answered 90 (docs/performance.md, "make demo")
DEMO_SHAPE: dict[str, Any] = {
    **MODEL_SHAPE,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 192,
}


def chat_template() -> str:
    return resources.files("aworld_cpu_grpo_demo").joinpath("chat_template.jinja").read_text(encoding="utf-8")


def _strip_markup(text: str) -> str:
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        text = text.replace(token, "\n")
    return text


def train_tokenizer(seed: int = 0, corpus_size: int = 3000) -> Any:
    """A byte-level BPE with one token per digit; tags and chat markers are single tokens.

    One token per digit keeps numbers copyable digit by digit (the skill the tool loop needs).
    Tags are added tokens but not *special* ones, so decoding keeps them for the tool parser.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    template = chat_template()
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=template)
    texts = [_strip_markup(plain.apply_chat_template(c, tokenize=False)) for c in corpus(rng, corpus_size)]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=template,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )


def new_model(tokenizer: Any, seed: int = 0, **shape: Any) -> Any:
    """A randomly initialised tiny Qwen2 (``MODEL_SHAPE``, 0.83 M parameters; ``shape`` overrides its sizes)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
        **{**MODEL_SHAPE, **shape},
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def save_tokenizer(tokenizer: Any, path: Path) -> None:
    """Save it, naming ``PreTrainedTokenizerFast`` as its class so loaders keep its own ids."""
    tokenizer.save_pretrained(str(path))
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")



def save_model_dir(target: Path, model: Any, tokenizer: Any, stats: dict[str, Any]) -> Path:
    """Write a built model, its tokenizer and its warm-start stats to ``<target>.building``, then
    rename that into place: an interrupted build never leaves a half-made model at ``target``,
    which later runs would reuse as finished (the builders return an existing ``target`` as is)."""
    staging = target.with_name(target.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(staging)
    save_tokenizer(tokenizer, staging)
    (staging / "warm_start.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target

def build_model(path: str, *, seed: int = 0, warm_start_steps: int = 800, batch_size: int = 64,
                progress: bool = True, threads: int | str = "auto", copy_rate: float = 0.3,
                shape: dict[str, Any] | None = None) -> Path:
    """Create tokenizer + model at ``path`` and warm-start it; returns the directory.

    ``shape``: sizes over ``DEMO_SHAPE`` (``MODEL_SHAPE`` builds the 0.83 M model
    the demo shipped before 2026-11-27, on which the older figures in docs/performance.md were taken).

    ``threads``: torch intra-op threads for the warm start; ``"auto"`` (default) times its first
    steps with one thread and with all cores and keeps the faster (two threads were 1.6x faster
    on an idle 2-core machine and several times slower on a busy one).
    """
    import torch
    from transformers.utils import logging as hf_logging

    from aworld_cpu_grpo_demo.warm_start import warm_start

    hf_logging.disable_progress_bar()  # the saving bar would only repeat "model ready"
    if threads != "auto":
        torch.set_num_threads(int(threads))

    target = Path(path)
    if target.exists():
        return target
    started = time.perf_counter()
    print(f"building the demo model in {target} (tokenizer, tiny Qwen2, warm start; once per run directory)",
          flush=True)
    tokenizer = train_tokenizer(seed)
    model = new_model(tokenizer, seed, **{**DEMO_SHAPE, **(shape or {})})
    params = sum(p.numel() for p in model.parameters())
    print(f"  tokenizer: {len(tokenizer)} tokens; model: {params / 1e6:.2f} M parameters", flush=True)
    stats = warm_start(model, tokenizer, steps=warm_start_steps, batch_size=batch_size, seed=seed,
                       progress=progress, copy_rate=copy_rate, probe_threads=threads == "auto")
    save_model_dir(target, model, tokenizer, stats)
    print(f"  model ready in {time.perf_counter() - started:.0f}s (warm-start loss {stats['final_loss']:.3f}, "
          f"{stats['torch_threads']} torch thread(s))", flush=True)
    return target
