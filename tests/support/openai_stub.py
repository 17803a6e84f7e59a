"""A deterministic OpenAI-compatible server on 127.0.0.1 that tests script turn by turn.

It speaks the real wire format (``POST /v1/chat/completions``, ``GET /v1/models``), so the code
under test uses its real HTTP client. It runs in a background thread with its own event loop,
so sync tests, async tests and other processes can all call it.

Script it with a list of replies (consumed in order) or a callable that receives the request
JSON and returns a reply. A reply is a string (the assistant's content), a dict with
``content`` / ``tool_calls`` / ``finish_reason`` / ``reasoning``, a full response dict (one with
``choices``), or a ``StubReply`` (which can also set an HTTP status or a delay)::

    with OpenAIStub([reply(tool_calls=[tool_call("add", {"a": 1, "b": 2})]), "3"]) as llm:
        agent = Agent("a", conf=AgentConfig(llm_base_url=llm.base_url, llm_model_name=llm.model))
        ...
        assert llm.requests[1]["messages"][-1]["role"] == "tool"

``requests`` holds every chat request body in arrival order; ``calls`` adds path, headers and
the client's address (``peer``, to see connection reuse).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aworld_core.vllm_server import free_port  # the tests' free port is the core's: below the ephemeral range

__all__ = ["OpenAIStub", "SessionRecordingLLM", "StubReply", "free_port", "reply", "tool_call"]


@dataclass
class StubReply:
    """One scripted answer. ``status`` other than 200 answers with ``body`` (or an error JSON)."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    reasoning: str | None = None
    usage: dict[str, int] | None = None
    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def reply(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    reasoning: str | None = None,
    status: int = 200,
    body: Any = None,
    delay_s: float = 0.0,
    headers: dict[str, str] | None = None,
) -> StubReply:
    return StubReply(content, tool_calls, finish_reason, reasoning, None, status, body, delay_s, headers or {})


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, id: str | None = None) -> dict[str, Any]:
    """A tool call entry for ``reply(tool_calls=[...])``; a ``str`` argument is sent verbatim
    (use it to send invalid JSON)."""
    return {"name": name, "arguments": {} if arguments is None else arguments, "id": id}


Script = list[Any] | Callable[[dict[str, Any]], Any]


class OpenAIStub:
    def __init__(
        self,
        script: Script | None = None,
        *,
        model: str = "stub-model",
        latency_s: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.model = model
        self.latency_s = latency_s
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._script: Script = []
        self._served = 0
        self.set_script(script if script is not None else [])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    # -- script --------------------------------------------------------------------------------

    def set_script(self, script: Script) -> None:
        with self._lock:
            self._script = script if callable(script) else list(script)

    def add(self, *replies: Any) -> None:
        with self._lock:
            if callable(self._script):
                raise TypeError("the stub is scripted by a callable; use set_script")
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        return 0 if callable(self._script) else len(self._script)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> OpenAIStub:
        if self._thread is not None:
            return self
        if not self.port:
            self.port = free_port(self.host)
        self._thread = threading.Thread(target=self._serve, name="openai-stub", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the OpenAI stub did not start within 10 s")
        if self._error is not None:
            raise RuntimeError(f"the OpenAI stub failed to start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            future.result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            self._thread = None
            self._loop = None
            self._started.clear()

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> OpenAIStub:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.to_thread(self.stop)

    def _serve(self) -> None:
        from aiohttp import web

        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # handler_cancellation: a client that gave up (timeout tests) must not keep a scripted
        # delay running; shutdown_timeout: stopping never waits long for one
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        try:
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
            loop.run_until_complete(site.start())
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._started.set()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- handlers ------------------------------------------------------------------------------

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "stub"}]})

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "request body is not JSON"}}, status=400)
        with self._lock:
            self.requests.append(body)
            peer = request.transport.get_extra_info("peername") if request.transport else None
            self.calls.append(
                {"path": request.path, "headers": dict(request.headers), "json": body, "time": time.time(), "peer": peer}
            )
            index = self._served
            self._served += 1
            script = self._script
            if callable(script):
                item: Any = script
            elif script:
                item = script.pop(0)
            else:
                item = None
        if item is None:
            return web.json_response(
                {"error": {"message": f"openai stub: script exhausted after {index} replies", "type": "stub"}},
                status=400,
            )
        if callable(item) and not isinstance(item, StubReply):
            item = item(body)
            if inspect.isawaitable(item):
                item = await item
        stub = _as_reply(item)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if stub.delay_s:
            await asyncio.sleep(stub.delay_s)
        if stub.status != 200:
            payload = stub.body if stub.body is not None else {"error": {"message": f"stub error {stub.status}"}}
            if isinstance(payload, str):
                return web.Response(text=payload, status=stub.status, headers=stub.headers)
            return web.json_response(payload, status=stub.status, headers=stub.headers)
        if isinstance(stub.body, str):  # sent verbatim (e.g. a broken body)
            return web.Response(text=stub.body, headers=stub.headers)
        if stub.body is not None:
            return web.json_response(stub.body, headers=stub.headers)
        return web.json_response(self._completion(stub, body, index), headers=stub.headers)

    def _completion(self, stub: StubReply, request: dict[str, Any], index: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": stub.content}
        if stub.reasoning is not None:
            message["reasoning_content"] = stub.reasoning
        calls = []
        for i, call in enumerate(stub.tool_calls or []):
            if "function" in call:
                calls.append(call)
                continue
            arguments = call.get("arguments")
            calls.append(
                {
                    "id": call.get("id") or f"call_{index}_{i}",
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
                    },
                }
            )
        if calls:
            message["tool_calls"] = calls
        finish = stub.finish_reason or ("tool_calls" if calls else "stop")
        prompt_chars = sum(len(str(m.get("content") or "")) for m in request.get("messages", []))
        usage = stub.usage or {
            "prompt_tokens": prompt_chars // 4,
            "completion_tokens": len(stub.content or "") // 4,
            "total_tokens": prompt_chars // 4 + len(stub.content or "") // 4,
        }
        return {
            "id": f"chatcmpl-stub-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }


def _as_reply(item: Any) -> StubReply:
    if isinstance(item, StubReply):
        return item
    if isinstance(item, str):
        return StubReply(content=item)
    if isinstance(item, dict):
        if "choices" in item:
            return StubReply(body=item)
        return StubReply(
            content=item.get("content"),
            tool_calls=item.get("tool_calls"),
            finish_reason=item.get("finish_reason"),
            reasoning=item.get("reasoning"),
            usage=item.get("usage"),
        )
    raise TypeError(f"cannot use {item!r} as a stub reply; give a str, a dict or a StubReply")


class SessionRecordingLLM:
    """An ``LLMClient`` with the token-level client's session contract, over real HTTP.

    Text comes from an OpenAI-compatible server (usually an ``OpenAIStub``); each ``chat`` is
    recorded under its ``session_id`` and ``finish_session`` returns a ``TrainingView`` with one
    (fake) sampled token per turn, then drops the session, as ``aworld_core.tokens.TokenLLM``
    does. Tests of the runtime and of backends use it to check who calls what with which session.
    """

    def __init__(self, base_url: str, model: str = "policy"):
        from aworld_core.llm.openai_http import OpenAICompatibleLLM

        self.inner = OpenAICompatibleLLM(base_url, model, retries=0)
        self.sessions: dict[str | None, list[list[dict[str, Any]]]] = {}
        self.samplings: list[Any] = []
        self.finished: list[str] = []

    async def chat(self, messages, tools=None, sampling=None, *, session_id=None):  # type: ignore[no-untyped-def]
        self.sessions.setdefault(session_id, []).append(list(messages))
        self.samplings.append(sampling)
        return await self.inner.chat(messages, tools, sampling, session_id=session_id)

    def finish_session(self, session_id: str) -> Any:
        from aworld_core.schemas import TrainingView

        self.finished.append(session_id)
        turns = len(self.sessions.pop(session_id, []))
        if not turns:
            return None
        return TrainingView(
            prompt_ids=[1, 2],
            response_ids=[7] * turns,
            response_mask=[1] * turns,
            response_logprobs=[-0.5] * turns,
            response_versions=[0] * turns,
            num_turns=turns,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
