"""A tiny causal LM and tokenizer made at test time, plus chat templates of three families.

Nothing is downloaded: a byte-level BPE tokenizer is trained on a small built-in corpus with the
special tokens of ChatML (Qwen) and Llama-3 chats, and a 2-layer Qwen2 model gets random weights.
Both are saved with ``save_pretrained`` so suites exercise the same loading path as real models.
Needs the ``hf`` extra (``pip install 'aworld-core[hf]'``); torch and transformers are imported
only when a function here runs.

Load the tokenizer with ``PreTrainedTokenizerFast.from_pretrained(dir)`` (``load_tiny_tokenizer``):
in transformers 5 ``AutoTokenizer`` swaps in Qwen2's own pre-tokenizer for a ``qwen2`` model dir
and the ids stop matching the ones the tokenizer was trained with.

Use from other suites: the session-scoped fixtures ``tiny_model_dir``, ``tiny_tokenizer`` and
``tiny_model`` live in ``aworld_core.testing.fixtures``; a test module asks for them with::

    pytest_plugins = ["aworld_core.testing.fixtures"]

or calls ``get_tiny_model_dir()`` (built once per process) outside pytest.
"""

from __future__ import annotations

import json
import random
import tempfile
import threading
from pathlib import Path
from typing import Any

from aworld_core.testing._extras import require

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAMES = ("qwen2_5", "qwen3", "llama3")
DEFAULT_TEMPLATE = "qwen2_5"
_HF = ("torch", "transformers", "tokenizers")

# ChatML / Qwen control tokens are "special" (skipped by skip_special_tokens); the tag tokens are
# added but not special, as in Qwen's own tokenizer.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
]
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

_WORDS = (
    "the a an of to and in is it that for on with as was at by be this are from or have not but "
    "what all were when we there can which their if do will each about how up out them then she many "
    "some so these would other into has more her two like him see time could no make than first been "
    "its who now people my made over did down only way find use may water long little very after "
    "words called just where most know get through back much before go good new write our used me "
    "man too any day same right look think also around another came come work three word must because "
    "does part even place well such here take why things help put years different away again off "
    "went old number great tell men say small every found still between name should home big give "
    "air line set own under read last never us left end along while might next sound below saw "
    "something thought both few those always looked show large often together asked house world "
    "answer question search weather city file read tool call result error query number value sum "
    "paris london tokyo berlin madrid rome temperature celsius weather_lookup calculator web_search"
).split()


def _corpus(rng: random.Random, lines: int = 1500) -> list[str]:
    """Chat-ish text, JSON tool calls and numbers: enough for merges that look like a real vocab."""
    out: list[str] = []
    for _ in range(lines):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14)))
        kind = rng.random()
        if kind < 0.5:
            out.append(words.capitalize() + rng.choice([".", "?", "!", ":"]))
        elif kind < 0.8:
            name = rng.choice(["weather_lookup", "calculator", "web_search", "read_file"])
            args = {rng.choice(_WORDS): rng.choice([rng.randint(0, 999), rng.choice(_WORDS)])}
            out.append(json.dumps({"name": name, "arguments": args}))
        else:
            out.append(f"{rng.randint(0, 10**6)} + {rng.randint(0, 999)} = {rng.random():.4f}")
    return out


def build_tiny_tokenizer(vocab_size: int = 640, seed: int = 0, template: str = DEFAULT_TEMPLATE) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained here (deterministic for a seed) whose
    chat template is ``template``: a family name (``TEMPLATE_NAMES``) or the Jinja text itself."""
    chat_template = template_text(template)
    require(*_HF, what="the tiny tokenizer")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(random.Random(seed)), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        bos_token="<|begin_of_text|>",
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(TAG_TOKENS)
    fast.chat_template = chat_template
    return fast


def build_tiny_model(vocab_size: int, seed: int = 0, hidden: int = 64, layers: int = 2) -> Any:
    """A Qwen2 causal LM with random weights (float32, CPU)."""
    require(*_HF, what="the tiny model")
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # random init gives near-uniform next-token distributions; a wider spread makes sampling
    # (top-k / top-p / temperature) observably different, like a real model's peaked outputs
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(8.0)
    model.eval()
    return model


def make_tiny_model(directory: str | Path, seed: int = 0, template: str = DEFAULT_TEMPLATE) -> Path:
    """Write a tiny tokenizer (chat template ``template``: a family name or Jinja text) and model
    into ``directory`` (created) and return it."""
    directory = Path(directory)
    tokenizer = build_tiny_tokenizer(seed=seed, template=template)
    directory.mkdir(parents=True, exist_ok=True)
    model = build_tiny_model(len(tokenizer), seed=seed)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory


def load_tiny_tokenizer(directory: str | Path) -> Any:
    """The tokenizer saved in ``directory``, as ``PreTrainedTokenizerFast`` (not ``AutoTokenizer``)."""
    require(*_HF, what="loading the tiny tokenizer")
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(directory))


def load_tiny_model(directory: str | Path) -> Any:
    """The model saved in ``directory``, in eval mode."""
    require(*_HF, what="loading the tiny model")
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM.from_pretrained(str(directory))
    model.eval()
    return model


def load_template(name: str) -> str:
    """A chat template shipped with the kit, by family name (``qwen2_5``, ``qwen3``, ``llama3``)."""
    path = TEMPLATES_DIR / f"{name}.jinja"
    if name not in TEMPLATE_NAMES or not path.exists():
        raise FileNotFoundError(f"no chat template {name!r}; have {', '.join(TEMPLATE_NAMES)}")
    return path.read_text()


def template_text(template: str) -> str:
    """``template`` as Jinja text: a family name is loaded with ``load_template``, text is kept."""
    if "{{" in template or "{%" in template:
        return template
    return load_template(template)


def assistant_turn_text(tokenizer: Any, template: str, message: dict[str, Any], tools: Any = None) -> str:
    """What a model trained on ``template`` samples for assistant ``message``: the text after the
    generation prompt, up to and including the turn's end token (nothing the template adds after).

    Feed its ids (``tokenizer.encode(text, add_special_tokens=False)``) to a scripted engine to get
    rollouts whose text the template would reproduce.
    """
    context = [{"role": "user", "content": "hi"}]
    head = tokenizer.apply_chat_template(
        context, tools=tools, chat_template=template, add_generation_prompt=True, tokenize=False
    )
    full = tokenizer.apply_chat_template(
        [*context, message], tools=tools, chat_template=template, add_generation_prompt=False, tokenize=False
    )
    if not full.startswith(head):
        raise ValueError("the template renders the context differently once an assistant turn follows")
    body = full[len(head) :]
    ends = [body.find(t) + len(t) for t in ("<|im_end|>", "<|eot_id|>") if t in body]
    if not ends:
        raise ValueError("the assistant turn has no end-of-turn token")
    return body[: min(ends)]


_CACHE_LOCK = threading.Lock()
_CACHED_DIRS: dict[str, Path] = {}


def get_tiny_model_dir(template: str = DEFAULT_TEMPLATE) -> Path:
    """The tiny model directory for ``template``, built once per process into a temporary directory."""
    with _CACHE_LOCK:
        cached = _CACHED_DIRS.get(template)
        if cached is None or not (cached / "config.json").exists():
            cached = make_tiny_model(Path(tempfile.mkdtemp(prefix="aworld-tiny-model-")), template=template)
            _CACHED_DIRS[template] = cached
        return cached
