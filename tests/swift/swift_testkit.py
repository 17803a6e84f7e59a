"""Real components for the ms-swift suite: a tiny tool-calling model made here, jobs, datasets.

``build_tool_model`` trains a byte-level BPE tokenizer (the special tokens and chat template of
``aworld_core.testing.tiny_model``) on the texts this suite's conversations are made of, so ms-swift's long
hermes tool block takes a few dozen tokens instead of hundreds; then a 2-layer Qwen2 with random
weights is warm-started for a few seconds on add-tool traces rendered by ms-swift's own
``qwen2_5`` template (the tokenizer ms-swift loads for the directory, its hermes tool block, the
exact tool schema the test MCP server lists). Under ms-swift it then calls the tool, reads the
result and answers. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = "Use the add tool, then answer."
MODEL_TYPE = "qwen2"
TEMPLATE = "qwen2_5"


def add_question(a: int, b: int) -> str:
    return f"What is {a} + {b}?"


TRAIN_PAIRS = [(1, 2), (3, 4), (5, 1), (2, 2)]


def tool_traces(pairs: list[tuple[int, int]]) -> list[list[dict[str, Any]]]:
    """Conversations: question, one add call, its result, the answer."""
    traces = []
    for a, b in pairs:
        call = json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
        traces.append([
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": add_question(a, b)},
            {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
            {"role": "tool", "content": str(a + b)},
            {"role": "assistant", "content": f"The answer is {a + b}."},
        ])
    return traces


def _corpus(tools: list[dict[str, Any]], pairs: list[tuple[int, int]]) -> list[str]:
    from swift.agent_template import agent_template_map

    block = agent_template_map["hermes"]()._format_tools(tools, SYSTEM_PROMPT)
    default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    texts = [block, default_system, "user\n", "assistant\n", "system\n"]
    for a in range(10):
        for b in range(10):
            call = json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
            texts += [add_question(a, b), f"<tool_call>\n{call}\n</tool_call>",
                      f"<tool_response>\n{a + b}\n</tool_response>", f"The answer is {a + b}."]
    return texts * 4


def build_tokenizer(texts: list[str], vocab_size: int = 1024) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, with ``aworld_core.testing.tiny_model``'s special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from aworld_core.testing import SPECIAL_TOKENS, TAG_TOKENS, load_template

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token="<|begin_of_text|>", clean_up_tokenization_spaces=False)
    fast.add_tokens(TAG_TOKENS)
    fast.chat_template = load_template("qwen2_5")
    return fast


def build_tool_model(path: Path, tools: list[dict[str, Any]], *, pairs: list[tuple[int, int]] = TRAIN_PAIRS,
                     steps: int = 80, lr: float = 5e-3, seed: int = 0) -> Path:
    """A tiny Qwen2 that calls the add tool under ms-swift's ``qwen2_5`` template.

    It learns a few traces by heart (seconds on a shared CPU): under sampling it still strays, which
    gives GRPO groups different rewards."""
    import torch
    from swift import get_processor, get_template

    from aworld_core.testing import build_tiny_model, load_tiny_model

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(_corpus(tools, pairs))
    tokenizer.save_pretrained(path)
    build_tiny_model(len(tokenizer), seed=seed).save_pretrained(path)
    processor = get_processor(str(path), model_type=MODEL_TYPE)
    template = get_template(processor, template_type=TEMPLATE)
    template.set_mode("train")
    rows = []
    for messages in tool_traces(pairs):
        encoded = template.encode({"messages": messages, "tools": tools})
        rows.append((encoded["input_ids"], encoded["labels"]))
    model = load_tiny_model(path)
    model.train()
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    pad = processor.pad_token_id or 0
    for _ in range(steps):
        batch = rows
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
        attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(path)
    return path


def write_add_dataset(path: Path, pairs: list[tuple[int, int]], *, prefix: str = "add", **extra: Any) -> Path:
    """JSONL rows the core's loaders read: id, question, answer (and extra columns)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for index, (a, b) in enumerate(pairs):
            row = {"id": f"{prefix}-{index}", "question": add_question(a, b), "answer": str(a + b), **extra}
            handle.write(json.dumps(row) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
