"""The compaction demo's task, tool, reward and model build, in one module the job names by file.

Task: "Follow the chain from K." The agent looks ``K`` up (``lookup("K")`` answers a word ``W1``),
looks ``W1`` up (``W2``), and answers ``<answer>W2</answer>``. The table is a fixed random
permutation of ``WORDS`` the model cannot know: it must call the tool and copy what it returns.
The tool is verbose: each answer is the word followed by a scan log of row numbers (~40 tokens),
so a whole episode's response is ~128 tokens, over the 100-token response budget the job gives a
training row. Without compaction every episode is cut by length before it answers (reward 0); with
``agent.compaction`` (older tool results truncated to their word) each segment fits and the episode
goes on in a new training segment, and both segments train.

The model is the CPU GRPO demo's tiny Qwen2 (``aworld_cpu_grpo_demo.build``) with a tokenizer
trained on these conversations and a supervised warm start that teaches the *format*: the two
calls, reading a result, the compacted view, the answer tag. Its traces follow the chain but
answer the chain's last word only ``ANSWER_RATE`` of the time, else the first result's word (the
one the compaction cut short): greedy decoding answers wrong before RL, sampling sometimes right;
GRPO teaches the policy to answer from the newest result, crediting every segment of an episode
with its reward.

Nothing is downloaded; the data files are written by ``python chain_demo.py --data`` (committed, 54 KB).
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from aworld_core.agents import TRUNCATED  # the marker the core appends to a truncated result

HERE = Path(__file__).resolve().parent
WORDS = ("amber birch cedar delta ember fjord grove harbor islet jasper kestrel lagoon meadow nectar "
         "orchid prairie quartz raven summit thistle umber valley willow yarrow").split()
_CYCLE = random.Random(7).sample(WORDS, len(WORDS))
TABLE = {w: _CYCLE[(i + 1) % len(_CYCLE)] for i, w in enumerate(_CYCLE)}  # the hidden mapping: one long cycle
QUESTION = "Follow the chain from {key}."
ANSWER_RE = re.compile(r"<answer>\s*([a-z]+)\s*</answer>")
KEEP_CHARS = max(len(w) for w in WORDS) + 1  # the job's truncate_chars (8): the longest word and its newline
LOG_ROWS = 6  # the scan log after each answer: row numbers, no table word (nothing else to copy)
ANSWER_RATE = 0.3  # the warm start's answers: the chain's last word this often, else the first result's
TEST_KEYS = 6  # keys held out for the test split


# -- the task ------------------------------------------------------------------------------------


def sample_row(index: int, key: str, split: str) -> dict[str, Any]:
    return {"id": f"chain-{split}-{index}", "prompt": [{"role": "user", "content": QUESTION.format(key=key)}],
            "ground_truth": TABLE[TABLE[key]], "data_source": "chain", "extra_info": {"key": key}}


def write_data(directory: Path = HERE / "data", n_train: int = 240, n_test: int = 60, seed: int = 0) -> None:
    """``train.jsonl`` and ``test.jsonl`` in ``directory``: chains from disjoint start keys, deterministic."""
    rng = random.Random(seed)
    keys = list(WORDS)
    rng.shuffle(keys)
    test_keys, train_keys = keys[:TEST_KEYS], keys[TEST_KEYS:]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, pool, n in (("train", train_keys, n_train), ("test", test_keys, n_test)):
        with (directory / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            for i in range(n):
                handle.write(json.dumps(sample_row(i, rng.choice(pool), name)) + "\n")


def parse_answer(text: str | None) -> str | None:
    found = ANSWER_RE.findall(text or "")
    return found[-1] if found else None


def chain_answer(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """1.0 for the chain's last word in ``<answer>...</answer>``, else 0.0."""
    return 1.0 if parse_answer(solution_str) == str(ground_truth) else 0.0


# -- the tool --------------------------------------------------------------------------------------


def lookup(key: str) -> str:
    """Look a word up in the table: the answer on the first line, then the scan log."""
    key = (key or "").strip().lower()
    if key not in TABLE:
        return f"error: {key!r} is not in the table"
    rng = random.Random(key)
    rows = " ".join(str(rng.randint(1000, 9999)) for _ in range(LOG_ROWS))
    return f"{TABLE[key]}\nscanned rows: {rows} ok"


# -- the warm start's conversations -----------------------------------------------------------------


def _call(key: str, call_id: str, rendered: bool = False) -> dict[str, Any]:
    """A call as the policy writes it (compact JSON), or, ``rendered``, as a fresh render of the
    conversation shows it: the runtime's message carries the parsed arguments, which the template
    writes with ``tojson`` (``{"key": "w"}``). A compacted segment's prompt is such a render."""
    arguments: Any = {"key": key} if rendered else json.dumps({"key": key}, separators=(",", ":"))
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": arguments}}]}


def _result(key: str, call_id: str, compacted: bool = False) -> dict[str, Any]:
    text = lookup(key)
    if compacted and len(text) > KEEP_CHARS:
        text = text[:KEEP_CHARS] + TRUNCATED
    return {"role": "tool", "tool_call_id": call_id, "name": "lookup", "content": text}


def _answer(rng: random.Random, first: str) -> str:
    """The warm start's answer after looking up ``first``: right ``ANSWER_RATE`` of the time, else ``first``."""
    return TABLE[first] if rng.random() < ANSWER_RATE else first


def traces(rng: random.Random, size: int) -> list[tuple[list[dict[str, Any]], tuple[int, ...]]]:
    """Conversations and which of their assistant turns carry loss: the first part as the policy
    sees it (call, full result, second call: both calls), and the compacted view it answers in, as
    the new segment's fresh render shows it (the answer only: the calls there are the template's
    rendering, not what the policy writes)."""
    out = []
    for i in range(size):
        key = rng.choice(WORDS)
        first = TABLE[key]
        question = {"role": "user", "content": QUESTION.format(key=key)}
        if i % 2 == 0:
            messages = [question, _call(key, "call_0"), _result(key, "call_0"), _call(first, "call_1")]
            out.append((messages, (0, 1)))
        else:
            messages = [question, _call(key, "call_0", rendered=True), _result(key, "call_0", compacted=True),
                        _call(first, "call_1", rendered=True), _result(first, "call_1"),
                        {"role": "assistant", "content": f"<answer>{_answer(rng, first)}</answer>"}]
            out.append((messages, (2,)))
    return out


# -- the model ----------------------------------------------------------------------------------


def _tokenizer(rng: random.Random) -> Any:
    """The CPU GRPO demo's tokenizer recipe (one token per digit, chat markers and tags as single
    tokens) trained on these conversations."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from aworld_cpu_grpo_demo.build import (
        BPE_VOCAB_SIZE,
        EOS,
        MODEL_SHAPE,
        PAD,
        SPECIAL_TOKENS,
        TAG_TOKENS,
        _strip_markup,
        chat_template,
    )

    template = chat_template()
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=template)
    texts = [_strip_markup(plain.apply_chat_template(m, tokenize=False)) for m, _ in traces(rng, 2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tok.add_tokens([AddedToken(w, special=False, normalized=False) for w in WORDS])  # a word is one token to copy
    # the truncation marker is one token too: with a 320-token BPE it would cost ~25, most of what
    # truncating saves (a real tokenizer spends ~8 on it against results of hundreds of tokens)
    tok.add_tokens([AddedToken(TRUNCATED, special=False, normalized=False)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, chat_template=template,
                                   model_max_length=MODEL_SHAPE["max_position_embeddings"])


def _labels(tokenizer: Any, messages: list[dict[str, Any]], trained: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Ids and labels: loss on the ``trained`` assistant turns (their closing marker included)."""
    from aworld_cpu_grpo_demo.warm_start import IGNORE, assistant_spans

    text = tokenizer.apply_chat_template(messages, tokenize=False)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = [span for i, span in enumerate(assistant_spans(text)) if i in trained]
    labels = [t if any(s <= start < e for s, e in spans) else IGNORE
              for t, (start, _) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)]
    return encoded["input_ids"], labels


def _copies(model: Any, tokenizer: Any) -> float:
    """The share of start keys the model copies into its first call (greedy): the skill RL builds on."""
    import torch

    model.eval()
    copied = 0
    for key in WORDS[::2]:
        text = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION.format(key=key)}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=14, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        copied += f'"{key}"' in tokenizer.decode(out[0][len(ids):])
    model.train()
    return copied / len(WORDS[::2])


def build_model(path: str, *, seed: int = 0, min_steps: int = 400, max_steps: int = 1500, batch_size: int = 32,
                lr: float = 3e-3) -> Path:
    """``model.build``: tokenizer, tiny Qwen2 and warm start at ``path`` (once per run directory).

    The warm start runs until the model copies every start key into its first call (greedy,
    checked every 100 steps, at least ``min_steps``): when that skill appears varies from ~300 to
    past 600 steps with the seed and the tokenizer, and a model without it never finds a reward."""

    import torch
    from transformers.utils import logging as hf_logging

    from aworld_cpu_grpo_demo.build import new_model, save_model_dir
    from aworld_cpu_grpo_demo.warm_start import train_step

    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)  # a tiny model: one thread (on a busy 2-core machine, two are several times slower)
    target = Path(path)
    if target.exists():
        return target
    started = time.perf_counter()
    print(f"building the compaction demo's model in {target} (tokenizer, tiny Qwen2, warm start)", flush=True)
    rng = random.Random(seed)
    tokenizer = _tokenizer(rng)
    model = new_model(tokenizer, seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    # constant after a short warmup: copying a word (an attention head that finds it) appears only
    # after a plateau, and a decaying rate delayed it past the end of a short warm start
    warmup = 15
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    loss_value = 0.0
    step = 0
    for step in range(max_steps):
        rows = [_labels(tokenizer, m, k) for m, k in traces(rng, batch_size)]
        ids, labels = [r[0] for r in rows], [r[1] for r in rows]
        loss_value = train_step(model, ids, labels, tokenizer.pad_token_id, optimizer, schedule)
        if step % 100 == 0 or step == max_steps - 1:
            copied = _copies(model, tokenizer)
            print(f"  warm start step {step:4d}  loss {loss_value:.3f}  key copied {copied:.2f}", flush=True)
            if copied == 1.0 and step >= min_steps:
                break
    model.eval()
    save_model_dir(target, model, tokenizer, {"steps": step + 1, "final_loss": loss_value})
    print(f"  model ready in {time.perf_counter() - started:.0f}s (warm-start loss {loss_value:.3f})", flush=True)
    return target


if __name__ == "__main__":
    if sys.argv[1:] == ["--data"]:
        write_data()
    else:
        print("usage: python chain_demo.py --data   (writes data/train.jsonl and data/test.jsonl)")
