"""Supervised warm start on synthetic traces, so tool calls are in the model's distribution.

Loss is on the model's own tokens only (assistant turns, their closing ``<|im_end|>`` included);
user and tool tokens are context. Traces are rendered with the model's chat template, so the
token stream matches what the agent runtime produces at rollout time.
"""

from __future__ import annotations

import math
import random
from typing import Any

from aworld_cpu_grpo_demo.traces import Trace, warm_start_batch

ASSISTANT_OPEN = "<|im_start|>assistant\n"
TURN_CLOSE = "<|im_end|>"
IGNORE = -100


def assistant_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of every assistant turn's content plus its closing ``<|im_end|>``."""
    spans = []
    start = text.find(ASSISTANT_OPEN)
    while start != -1:
        begin = start + len(ASSISTANT_OPEN)
        close = text.find(TURN_CLOSE, begin)
        end = len(text) if close == -1 else close + len(TURN_CLOSE)
        spans.append((begin, end))
        start = text.find(ASSISTANT_OPEN, end)
    return spans


def encode(tokenizer: Any, traces: list[Trace]) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids and labels (``-100`` off the assistant's tokens) for each trace."""
    texts = tokenizer.apply_chat_template([t.messages for t in traces], tokenize=False)
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    all_ids, all_labels = [], []
    for trace, text, ids, offsets in zip(traces, texts, encoded["input_ids"], encoded["offset_mapping"],
                                         strict=True):
        spans = assistant_spans(text)
        labels = [
            token if any(begin <= start < end for begin, end in spans) else IGNORE
            for token, (start, _) in zip(ids, offsets, strict=True)
        ]
        if not trace.train_first_token:
            first = next(i for i, label in enumerate(labels) if label != IGNORE)
            labels[first] = IGNORE
        all_ids.append(ids)
        all_labels.append(labels)
    return all_ids, all_labels


def length_buckets(ids: list[list[int]], labels: list[list[int]], buckets: int = 2) -> list[list[tuple]]:
    """Rows sorted by length in ``buckets`` chunks, so short traces are not padded to the longest
    (guesses are half as long as tool traces: about a fifth less compute per step)."""
    rows = sorted(zip(ids, labels, strict=True), key=lambda row: len(row[0]))
    size = -(-len(rows) // buckets)
    return [rows[i : i + size] for i in range(0, len(rows), size)]



def train_step(model: Any, ids: list[list[int]], labels: list[list[int]], pad_id: int, optimizer: Any,
               scheduler: Any) -> float:
    """One supervised step over a batch: the mean next-token loss over every labelled token (the
    length buckets' summed losses over the batch's count), clipped at norm 1; returns the loss.
    The demos' warm starts (this one, the compaction and multi-policy demos) share it."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    total = sum(1 for row in labels for y in row[1:] if y != IGNORE)
    loss_sum = 0.0
    for chunk in length_buckets(ids, labels):
        loss = _chunk_loss(model, chunk, pad_id) / total
        loss.backward()
        loss_sum += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss_sum

def _chunk_loss(model: Any, rows: list[tuple], pad_id: int) -> Any:
    """Summed next-token loss over the labelled tokens of ``rows``."""
    import torch

    width = max(len(x) for x, _ in rows)
    input_ids = torch.tensor([x + [pad_id] * (width - len(x)) for x, _ in rows])
    attention = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in rows])
    target = torch.tensor([y + [IGNORE] * (width - len(y)) for _, y in rows])
    logits = model(input_ids=input_ids, attention_mask=attention).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), target[:, 1:].reshape(-1), ignore_index=IGNORE,
        reduction="sum",
    )


def warm_start(model: Any, tokenizer: Any, *, steps: int = 800, batch_size: int = 64, lr: float = 2e-3,
               seed: int = 0, progress: bool = True, tool_first_share: float = 0.25,
               copy_rate: float = 0.3, probe_threads: bool = False) -> dict[str, Any]:
    """Train ``model`` in place on fresh synthetic traces each step (AdamW, cosine decay).

    ``tool_first_share`` and ``copy_rate`` shape the mixture (see ``traces``); the demo keeps the
    defaults, tests raise them to get a model that always calls the tool. ``probe_threads``: time
    the first steps with one torch thread and with all cores, alternating, and keep the faster
    (on an idle 2-core machine two threads were 1.6x faster; on a busy one 3-7x slower).
    """
    import torch
    from tqdm import tqdm

    rng = random.Random(seed + 1)
    torch.manual_seed(seed)
    pad_id = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 40)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses: list[float] = []
    probe = _ThreadProbe() if probe_threads else None
    bar = tqdm(range(steps), desc="warm start", unit="step", disable=not progress)
    for step in bar:
        if probe is not None:
            probe.before(step)
        ids, labels = encode(tokenizer, warm_start_batch(rng, batch_size, tool_first_share, copy_rate))
        losses.append(train_step(model, ids, labels, pad_id, optimizer, scheduler))
        if probe is not None:
            probe.after(step)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    tail = losses[-20:]
    return {"steps": steps, "batch_size": batch_size, "lr": lr, "final_loss": sum(tail) / len(tail),
            "torch_threads": torch.get_num_threads()}


class _ThreadProbe:
    """Alternate 1 thread / all cores for a few steps, keep the faster; again every ``every`` steps,
    since the machine's load can change during the build (step 0 only warms up)."""

    def __init__(self, rounds: int = 4, every: int = 100):
        import os

        self.candidates = sorted({1, os.cpu_count() or 1})
        self.rounds = rounds
        self.every = every
        self.times: dict[int, list[float]] = {}
        self._started = 0.0

    def _threads_for(self, step: int) -> int | None:
        if len(self.candidates) == 1 or step == 0:
            return None
        index = (step - 1) % self.every
        if index < self.rounds * len(self.candidates):
            return self.candidates[index % len(self.candidates)]
        return None

    def before(self, step: int) -> None:
        import time

        import torch

        threads = self._threads_for(step)
        if threads is not None:
            if (step - 1) % self.every == 0:
                self.times = {n: [] for n in self.candidates}
            torch.set_num_threads(threads)
        self._started = time.perf_counter()

    def after(self, step: int) -> None:
        import time

        import torch

        threads = self._threads_for(step)
        if threads is None:
            return
        self.times[threads].append(time.perf_counter() - self._started)
        if (step - 1) % self.every == self.rounds * len(self.candidates) - 1:  # the window's last step
            best = min(self.candidates, key=lambda n: sorted(self.times[n])[len(self.times[n]) // 2])
            torch.set_num_threads(best)
