"""The slice of SGLang's HTTP API that AReaL's ``RemoteSGLangEngine`` uses, answered by a real model.

``GET /health`` and ``POST /generate`` (non-streaming, ``return_logprob``), in the shapes AReaL's
``SGLangBackend`` builds and parses, served on loopback by aiohttp from a background thread and
sampled from a tiny HF model through the core's ``HFTokenEngine``. With it, AReaL's own
``RemoteInfEngine`` runs unchanged in a test: ``initialize(addr=...)``, ``submit`` (which resolves
the workflow from its import path and kwargs for every prompt), its ``WorkflowExecutor`` threads
and event loop, ``agenerate`` over HTTP. Every request payload is kept in ``requests``.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from aworld_core.schemas import SamplingParams
from aworld_core.tokens.engine import LENGTH, LOGPROBS_MODE, STOP_TOKEN_IDS
from aworld_core.tokens.hf_engine import HFTokenEngine


class SGLangServer:
    def __init__(self, model_dir: Path | str):
        self.hf = HFTokenEngine.from_pretrained(model_dir, batch_window_s=0.005, logprobs_mode="scaled")
        self.requests: list[dict[str, Any]] = []
        self.outputs: list[tuple[dict[str, Any], Any]] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Any = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _generate(self, request: Any) -> Any:
        from aiohttp import web

        payload = await request.json()
        self.requests.append(payload)
        sp = payload["sampling_params"]
        vocab = self.hf.vocab_size
        top_k = sp.get("top_k") or -1
        sampling = SamplingParams(
            temperature=float(sp["temperature"]),
            top_p=float(sp.get("top_p", 1.0)),
            top_k=top_k if 0 < top_k < vocab else None,
            max_tokens=int(sp["max_new_tokens"]),
            stop=sp.get("stop"),
            extra={STOP_TOKEN_IDS: list(sp.get("stop_token_ids") or []), LOGPROBS_MODE: "scaled"},
        )
        out = await self.hf.generate(list(payload["input_ids"]), sampling, request_id=f"sgl-{len(self.requests)}")
        self.outputs.append((payload, out))  # what was sampled for each request (segment tests)
        logprobs = out.logprobs or [0.0] * len(out.token_ids)
        return web.json_response({
            "text": "",
            "meta_info": {
                "finish_reason": {"type": "length" if out.stop_reason == LENGTH else "stop"},
                "output_token_logprobs": [[lp, t, None] for lp, t in zip(logprobs, out.token_ids, strict=True)],
                "prompt_tokens": len(payload["input_ids"]),
                "completion_tokens": len(out.token_ids),
            },
        })

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"status": "ok"})

    def start(self) -> SGLangServer:
        from aiohttp import web

        started = threading.Event()

        async def serve() -> None:
            app = web.Application()
            app.router.add_get("/health", self._health)
            app.router.add_post("/generate", self._generate)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            started.set()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="sglang-standin", daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the SGLang stand-in did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None


def areal_engine(server: SGLangServer, **config: Any) -> Any:
    """AReaL's ``RemoteInfEngine`` with its SGLang backend, initialized against ``server``."""
    from areal.api.cli_args import InferenceEngineConfig
    from areal.engine.sglang_remote import SGLangBackend
    from areal.infra.remote_inf_engine import RemoteInfEngine

    options = {
        "max_concurrent_rollouts": 16,
        "consumer_batch_size": 4,
        "max_head_offpolicyness": 1000,
        "check_trajectory_format": True,
        "request_timeout": 120,
        "setup_timeout": 30,
        **config,
    }
    engine = RemoteInfEngine(InferenceEngineConfig(**options), SGLangBackend())
    engine.initialize(addr=server.address, train_data_parallel_size=1)
    return engine


def submit_all(engine: Any, rows: list[dict[str, Any]], kwargs: dict[str, Any], *, group_size: int = 1,
               timeout: float = 300) -> list[dict[str, Any] | None]:
    """Each row through ``engine.submit`` (the workflow by import path, as AReaL's trainer sends
    it), then each task's result, in submission order (``None``: rejected or failed)."""
    from aworld_areal.train import WORKFLOW

    ids = [engine.submit(dict(row), workflow=WORKFLOW, workflow_kwargs=kwargs, group_size=group_size) for row in rows]
    return [engine.wait_for_task(task_id, timeout=timeout) for task_id in ids]

