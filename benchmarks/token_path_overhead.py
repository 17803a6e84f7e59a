"""What the token-exact path costs on top of the model: per-turn CPU of TokenLLM, per-request
overhead of the OpenAI-compatible gateway, and what HFTokenEngine's batching buys.

    .venv/bin/python benchmarks/token_path_overhead.py [--episodes 32] [--turns 20] [--result TEXT] [--direct-only]

``--result 2`` makes every tool result short: the dropped-message check then pays one probe render
per turn (a long result is settled by finding it in the env text).

Uses the tiny test model and tokenizer built on the spot (``aworld_core.testing``) and a
scripted engine, so the figures are the path's own cost, not a model's. Figures only; nothing
here is asserted (benchmarks are not tests).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from aworld_core.gateway import Gateway, GatewayServer
from aworld_core.schemas import SamplingParams
from aworld_core.testing import (
    assistant_turn_text,
    get_tiny_model_dir,
    load_template,
    load_tiny_model,
    load_tiny_tokenizer,
)
from aworld_core.tokens import HFTokenEngine, ScriptedTokenEngine, TokenLLM

TOOLS = [
    {
        "type": "function",
        "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    }
]
CALL = {
    "role": "assistant",
    "content": "Searching.",
    "tool_calls": [{"id": "x", "type": "function", "function": {"name": "search", "arguments": {"q": "paris weather"}}}],
}
RESULT = "The weather in paris is mild today with light wind. " * 4


def ms(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"p50 {statistics.median(values) * 1e3:7.3f} ms   p99 {p99 * 1e3:7.3f} ms"


async def direct(tok, episodes: int, turns: int, result: str = RESULT) -> None:
    ids = tok.encode(assistant_turn_text(tok, load_template("qwen2_5"), CALL, TOOLS), add_special_tokens=False)
    llm = TokenLLM(ScriptedTokenEngine(lambda p, s, r: ids), tok, chat_template=load_template("qwen2_5"))
    by_turn: dict[int, list[float]] = {}
    for e in range(episodes):
        messages = [{"role": "user", "content": "What is the weather in paris?"}]
        for t in range(turns):
            start = time.perf_counter()
            response = await llm.chat(messages, TOOLS, session_id=f"ep{e}")
            by_turn.setdefault(t, []).append(time.perf_counter() - start)
            call = response.tool_calls[0]
            messages += [response.message(), {"role": "tool", "tool_call_id": call.id, "content": result}]
        view = llm.finish_session(f"ep{e}")
    print(f"TokenLLM.chat, scripted engine ({episodes} episodes, final sequence {len(view.prompt_ids) + len(view.response_ids)} tokens):")
    for t in sorted({0, 1, turns // 2, turns - 1}):
        print(f"  turn {t + 1:3d}: {ms(by_turn[t])}")


async def gateway(tok, episodes: int, turns: int) -> None:
    import aiohttp

    ids = tok.encode(assistant_turn_text(tok, load_template("qwen2_5"), CALL, TOOLS), add_special_tokens=False)
    llm = TokenLLM(ScriptedTokenEngine(lambda p, s, r: ids), tok, chat_template=load_template("qwen2_5"))
    latencies: list[float] = []
    with GatewayServer(Gateway(llm)) as server:
        async with aiohttp.ClientSession() as http:

            async def episode(e: int) -> None:
                url = f"{server.session_base_url(f'ep{e}')}/chat/completions"
                messages = [{"role": "user", "content": "What is the weather in paris?"}]
                for _ in range(turns):
                    start = time.perf_counter()
                    async with http.post(url, json={"messages": messages, "tools": TOOLS}) as r:
                        out = await r.json()
                    latencies.append(time.perf_counter() - start)
                    message = out["choices"][0]["message"]
                    call = message["tool_calls"][0]
                    messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": RESULT}]

            start = time.perf_counter()
            await asyncio.gather(*[episode(e) for e in range(episodes)])
            wall = time.perf_counter() - start
    print(f"gateway over loopback HTTP ({episodes} concurrent episodes x {turns} turns):")
    print(f"  per request: {ms(latencies)}   {len(latencies) / wall:8.1f} requests/s")


async def batching(tok, model) -> None:
    prompt = tok.encode("What is the weather in paris today?", add_special_tokens=False)
    sampling = SamplingParams(temperature=1.0, max_tokens=32)
    for window, label in ((0.0, "no batching "), (0.005, "5 ms window ")):
        engine = HFTokenEngine(model, tok, batch_window_s=window, max_batch_size=16)
        if window == 0.0:
            engine.max_batch_size = 1
        start = time.perf_counter()
        outs = await asyncio.gather(*[engine.generate(prompt, sampling, request_id=f"r{i}") for i in range(16)])
        wall = time.perf_counter() - start
        tokens = sum(len(o.token_ids) for o in outs)
        print(f"HFTokenEngine, tiny model, 16 concurrent requests, {label}: {tokens / wall:8.1f} tokens/s "
              f"({engine.batches_run} forward batches)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--result", default=RESULT, help="the tool result of every turn (default: 208 characters)")
    parser.add_argument("--direct-only", action="store_true", help="only the TokenLLM.chat figures")
    args = parser.parse_args()
    directory = get_tiny_model_dir()
    tok, model = load_tiny_tokenizer(directory), load_tiny_model(directory)
    await direct(tok, args.episodes, args.turns, args.result)
    if args.direct_only:
        return
    await gateway(tok, args.episodes, args.turns)
    await batching(tok, model)


if __name__ == "__main__":
    asyncio.run(main())
