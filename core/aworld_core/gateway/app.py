"""The OpenAI-compatible gateway: an agent written against the OpenAI API, trainable unchanged.

A Starlette app in front of a ``TokenLLM`` (so in front of any ``TokenEngine``):

* ``POST /v1/chat/completions`` (session from the ``X-Session-Id`` header, else stateless) and
  ``POST /sessions/{episode_id}/v1/chat/completions`` (point an agent's ``base_url`` at
  ``http://host:port/sessions/{episode_id}/v1`` and every call lands in that episode);
* ``POST /v1/responses`` (and under ``/sessions/{episode_id}``): the Responses API on the same
  token path (``aworld_core.gateway.responses``); ``GET .../v1/responses/{id}`` a stored one;
* ``GET /v1/models`` (and under ``/sessions/{episode_id}``);
* ``GET /sessions/{episode_id}/training``: the episode's training view so far (debugging);
  ``DELETE /sessions/{episode_id}``: finish it and return the view (for non-Python backends);
* ``GET /health``.

The backend takes an episode's tokens with ``gateway.finish_session(episode_id)``. Each session
records the exact token sequence with masks and logprobs.

Every request field is applied or refused with a 400 naming it (``aworld_core.gateway.fields``).
Client mistakes are answered with codes the OpenAI SDK does not retry (a retry would turn a client
bug into a rewritten episode): a second call while one is in flight in the session is ``409`` with
``x-should-retry: false``, a call after the session was finished ``410``, an unknown session
``404``; every 4xx carries ``x-should-retry: false``. An engine failure stays ``502`` (nothing was
recorded, so a retry is safe); a prompt over the token client's ``max_prompt_tokens`` is ``400``
with code ``context_length_exceeded`` (as OpenAI answers, and not retried); anything else that
fails on the server side is ``500``.

Failed calls are recorded per session (``aworld_core.gateway.failures``): every 5xx and the
context-length 400 fail the episode even when the client swallows the error (smolagents returns it
as its answer); ``finish(episode_id)`` returns them with the view, ``finish_session`` answers
``None`` for such a session (nothing of it may train), and the JSON views carry
``gateway_failures``.

Malformed tool calls: an OpenAI response cannot carry a call that did not parse, so the message
holds only the valid calls, and the failed ones are listed in the extension field
``invalid_tool_calls`` (``id``, ``name``, ``arguments`` as written, ``error``). The tokens the
model wrote stay in the episode, so a reward that scores the outcome teaches it to stop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from aworld_core.errors import LLMError, UsageError
from aworld_core.gateway import responses as rs
from aworld_core.gateway.failures import (
    CONTEXT_LENGTH_EXCEEDED,
    CallFailure,
    FinishedSession,
    GatewayFailures,
    clean_message,
    fails_episode,
    failures_of,
    finished_session,
    request_key,
)
from aworld_core.gateway.fields import GatewayRequestError, parse_chat, sampling_from_body
from aworld_core.gateway.streaming import TextStream, TurnStream
from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import SamplingParams, TrainingView
from aworld_core.secrets import mask
from aworld_core.tokens.llm import PromptTooLongError, SessionBusyError, SessionFinishedError, TokenLLM
from aworld_core.tokens.turn import TurnRefused, TurnRequest

log = logging.getLogger(__name__)

SESSION_HEADER = "X-Session-Id"
NO_RETRY = {"x-should-retry": "false"}  # the OpenAI SDKs honour it before their status-code rules
#: sessions whose default sampling is kept (one never finished is forgotten after as many newer)
MAX_SESSION_SAMPLING = 10_000

__all__ = ["SESSION_HEADER", "Gateway", "GatewayRequestError", "sampling_from_body"]


def _error(
    status: int, message: str, kind: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
        headers=NO_RETRY if status < 500 else None,
    )


def _error_of(exc: BaseException) -> tuple[int, str, str | None, str | None]:
    """``(status, type, param, code)`` of the OpenAI error answering an exception of the token path."""
    if isinstance(exc, (GatewayRequestError, TurnRefused)):
        return getattr(exc, "status", 400), "invalid_request_error", exc.param, None
    if isinstance(exc, SessionBusyError):
        return 409, "invalid_request_error", None, "session_busy"
    if isinstance(exc, SessionFinishedError):
        return 410, "invalid_request_error", None, "session_finished"
    if isinstance(exc, UsageError):
        return 400, "invalid_request_error", None, None
    if isinstance(exc, PromptTooLongError):
        return 400, "invalid_request_error", "messages", CONTEXT_LENGTH_EXCEEDED
    if isinstance(exc, LLMError):
        return 502, "server_error", None, None
    return 500, "server_error", None, None


class Gateway:
    """An OpenAI-compatible HTTP front for one ``TokenLLM``; ``app`` is the ASGI app."""

    def __init__(self, llm: TokenLLM, *, model_name: str | None = None):
        self.llm = llm
        self.model_name = model_name or llm.model_name
        self.created = int(time.time())
        self.responses = rs.ResponseStore()
        self.failed_calls: GatewayFailures = failures_of(llm)  # shared by every gateway over llm
        self._session_sampling: OrderedDict[str, SamplingParams] = OrderedDict()
        self._puts = 0
        # a template without a developer role of its own renders 'developer' as its system role
        self.developer_as_system = "developer" not in (llm.renderer.template or "")
        routes = []
        for prefix in ("", "/sessions/{episode_id}"):
            routes += [
                Route(f"{prefix}/v1/models", self._models, methods=["GET"]),
                Route(f"{prefix}/v1/chat/completions", self._chat, methods=["POST"]),
                Route(f"{prefix}/v1/responses", self._responses, methods=["POST"]),
                Route(f"{prefix}/v1/responses/{{response_id}}", self._stored_response, methods=["GET"]),
            ]
        self.app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                *routes,
                Route("/sessions/{episode_id}/training", self._training, methods=["GET"]),
                Route("/sessions/{episode_id}", self._finish, methods=["DELETE"]),
            ]
        )

    # -- the backend's Python API -------------------------------------------------------------

    def finish(self, episode_id: str) -> FinishedSession:
        """The episode's training view and the calls the gateway failed in it, dropping the session.
        ``.error()`` is not ``None`` when a failure stands: the episode failed, nothing of it trains."""
        self.responses.forget_session(episode_id)
        self._session_sampling.pop(episode_id, None)
        return finished_session(self.llm, episode_id, self.llm.finish_session(episode_id))

    def finish_session(self, episode_id: str) -> TrainingView | None:
        """The episode's training view, dropping its session (``None`` if it never called, or when
        the gateway failed one of its calls: see :meth:`finish`)."""
        finished = self.finish(episode_id)
        error = finished.error()
        if error is not None:
            log.warning("gateway: session %s is not trained: %s", episode_id, error)
            return None
        return finished.view

    def training_view(self, episode_id: str) -> TrainingView | None:
        return self.llm.training_view(episode_id)

    def set_session_sampling(self, episode_id: str, sampling: SamplingParams | None) -> None:
        """The sampling of the session's calls where a request sets no value of its own (a backend's
        validation settings, e.g. verl's greedy ``val_kwargs``, reach an OpenAI-API agent this way:
        its client sends what it sends, not the episode's settings). A request's own fields win;
        under both, the token client's defaults; :meth:`finish` forgets it."""
        if sampling is None:
            self._session_sampling.pop(episode_id, None)
            return
        self._session_sampling[episode_id] = sampling
        self._session_sampling.move_to_end(episode_id)
        while len(self._session_sampling) > MAX_SESSION_SAMPLING:
            self._session_sampling.popitem(last=False)

    def _sampling(self, session_id: str | None, sampling: SamplingParams) -> SamplingParams:
        """A request's sampling over its session's defaults (:meth:`set_session_sampling`)."""
        default = self._session_sampling.get(session_id) if session_id else None
        return sampling if default is None else default.merged(sampling)

    def failures(self, episode_id: str) -> list[CallFailure]:
        """The calls the gateway failed in the session so far (``retried`` ones included)."""
        return self.failed_calls.of(episode_id)

    def _failure(
        self, exc: BaseException, session_id: str | None, api: str, key: str | None
    ) -> JSONResponse:
        """The OpenAI error answering ``exc``, recorded first when it fails the episode."""
        status, kind, param, code = _error_of(exc)
        message = mask(str(exc)) or type(exc).__name__
        self._record(status, kind, code, message, session_id, api, key)
        return _error(status, message, kind, param, code)

    def _record(
        self, status: int, kind: str, code: str | None, message: str, session_id: str | None, api: str,
        key: str | None,
    ) -> None:
        if not fails_episode(status, code):
            return
        log.warning("gateway: session %s: %s call failed (%d): %s", session_id, api, status, message)
        if session_id:  # a stateless call belongs to no episode
            failure = CallFailure(status=status, message=clean_message(message), type=kind, code=code, api=api)
            self.failed_calls.record(session_id, failure, key)

    def _answered(self, session_id: str | None, key: str) -> None:
        if session_id:
            self.failed_calls.answered(session_id, key)

    def _failure_stream(self, exc: BaseException, session_id: str | None, api: str, key: str) -> str:
        """An error inside a stream that began (the HTTP status was already 200): recorded as the
        status it would have had; the message for the stream's error event."""
        status, kind, _, code = _error_of(exc)
        message = mask(str(exc)) or type(exc).__name__
        self._record(status, kind, code, message, session_id, api, key)
        return message

    # -- handlers -----------------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "sessions": len(self.llm.session_ids())})

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "aworld"}
                ],
            }
        )

    async def _training(self, request: Request) -> Response:
        episode_id = request.path_params["episode_id"]
        return _view_answer(episode_id, self.llm.training_view(episode_id), self.failures(episode_id))

    async def _finish(self, request: Request) -> Response:
        episode_id = request.path_params["episode_id"]
        finished = self.finish(episode_id)
        return _view_answer(episode_id, finished.view, finished.failures, finished.error())

    async def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise GatewayRequestError(f"the request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise GatewayRequestError("the request body must be a JSON object")
        return body

    def _messages(self, messages: list[Any]) -> list[Any]:
        """'developer' messages as the template's system role, where the template has no developer role."""
        if not self.developer_as_system:
            return messages
        return [
            {**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer" else m
            for m in messages
        ]

    # -- chat completions ----------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        session_id = request.path_params.get("episode_id") or request.headers.get(SESSION_HEADER)
        key = request_key("chat.completions", await request.body())
        try:
            chat = parse_chat(await self._body(request))
            chat.sampling = self._sampling(session_id, chat.sampling)
            messages = self._messages(chat.messages)

            def run(turn: TurnRequest) -> Any:
                return self.llm.chat(messages, chat.tools, chat.sampling, session_id=session_id, turn=turn)

            if chat.stream:
                stream = TurnStream(run, chat.turn)
                await stream.first()
                return StreamingResponse(
                    self._chat_events(chat, stream, session_id, key), media_type="text/event-stream"
                )
            response = await run(chat.turn)
        except Exception as exc:  # every failure of the token path is an OpenAI error response
            return self._failure(exc, session_id, "chat.completions", key)
        self._answered(session_id, key)
        return JSONResponse(self._completion(response, chat.turn, chat.logprobs))

    def _token_logprobs(
        self,
        ids: list[int],
        logprobs: list[float] | None,
        tops: list[dict[int, float]] | None,
        want_top: bool,
    ) -> list[dict[str, Any]]:
        decode = self.llm.renderer.decode
        out = []
        for i, (token, logprob) in enumerate(zip(ids, logprobs or [0.0] * len(ids), strict=True)):
            text = decode([token])
            entry: dict[str, Any] = {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [],
            }
            if want_top and tops is not None:
                entry["top_logprobs"] = [
                    {"token": decode([t]), "logprob": lp, "bytes": list(decode([t]).encode())}
                    for t, lp in sorted(tops[i].items(), key=lambda kv: -kv[1])
                ]
            out.append(entry)
        return out

    def _response_logprobs(self, response: LLMResponse, turn: TurnRequest) -> list[dict[str, Any]] | None:
        data = response.token_data
        if data is None or data.response_logprobs is None:
            return None
        output = turn.output
        tops = output.top_logprobs if output is not None and output.token_ids == data.response_ids else None
        return self._token_logprobs(data.response_ids, data.response_logprobs, tops, tops is not None)

    def _completion(self, response: LLMResponse, turn: TurnRequest, want_logprobs: bool) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "message": _message(response),
            "finish_reason": response.finish_reason,
            "logprobs": None,
        }
        if want_logprobs:
            content = self._response_logprobs(response, turn)
            if content is not None:
                choice["logprobs"] = {"content": content, "refusal": None}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": response.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    async def _chat_events(
        self, chat: Any, stream: TurnStream, session_id: str | None, key: str
    ) -> AsyncIterator[bytes]:
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model_name,
        }
        want_top = chat.top_logprobs is not None
        wants_logprobs = chat.logprobs

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            if chat.logprobs and logprobs is not None:
                choice["logprobs"] = {"content": logprobs, "refusal": None}
            data = base | {"choices": [choice]}
            if chat.include_usage:
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n".encode()

        text = TextStream(self.llm, chat.sampling)
        pending: list[dict[str, Any]] = []  # logprobs of sampled tokens not sent yet
        try:
            yield chunk({"role": "assistant", "content": ""})
            fed_forced = False
            async for piece, _ in stream.pieces():
                if not fed_forced:
                    text.feed(list(chat.turn.forced_ids))
                    fed_forced = True
                reasoning, content = text.feed(piece.token_ids)
                if wants_logprobs:
                    pending += self._token_logprobs(
                        piece.token_ids, piece.logprobs, piece.top_logprobs, want_top
                    )
                if reasoning:
                    yield chunk({"reasoning_content": reasoning})
                if content:
                    yield chunk({"content": content}, logprobs=pending)
                    pending = []
            response = await stream.task
        except asyncio.CancelledError:
            stream.cancel()
            raise
        except Exception as exc:  # the stream has begun: the error goes in it, as OpenAI's do
            message = self._failure_stream(exc, session_id, "chat.completions", key)
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error'}})}\n\n".encode()
            yield b"data: [DONE]\n\n"
            return
        finally:
            stream.cancel()
        reasoning, content = text.rest(response)
        if reasoning:
            yield chunk({"reasoning_content": reasoning})
        if content or pending:
            yield chunk({"content": content}, logprobs=pending)
        message = _message(response)
        for i, call in enumerate(message.get("tool_calls") or []):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            yield chunk(
                {"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}
            )
        if message.get("invalid_tool_calls"):
            yield chunk({"invalid_tool_calls": message["invalid_tool_calls"]})
        yield chunk({}, finish=response.finish_reason)
        if chat.include_usage:
            usage = response.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            yield f"data: {json.dumps(base | {'choices': [], 'usage': usage})}\n\n".encode()
        self._answered(session_id, key)
        yield b"data: [DONE]\n\n"

    # -- responses -----------------------------------------------------------------------------

    async def _stored_response(self, request: Request) -> Response:
        held = self.responses.get(request.path_params["response_id"])
        session_id = request.path_params.get("episode_id") or request.headers.get(SESSION_HEADER)
        if held is None or held.session_id != session_id:
            return _error(
                404, f"no stored response {request.path_params['response_id']!r}", "not_found_error"
            )
        return JSONResponse(held.data)

    async def _responses(self, request: Request) -> Response:
        session_id = request.path_params.get("episode_id") or request.headers.get(SESSION_HEADER)
        key = request_key("responses", await request.body())
        try:
            req = rs.parse_responses(await self._body(request), self.responses, session_id)
            req.sampling = self._sampling(session_id, req.sampling)
            messages = self._messages(req.messages)

            def run(turn: TurnRequest) -> Any:
                return self.llm.chat(messages, req.tools, req.sampling, session_id=session_id, turn=turn)

            if req.stream:
                stream = TurnStream(run, req.turn)
                await stream.first()
                return StreamingResponse(
                    self._response_events(req, stream, session_id, key), media_type="text/event-stream"
                )
            response = await run(req.turn)
        except Exception as exc:  # every failure of the token path is an OpenAI error response
            if isinstance(exc, TurnRefused) and exc.param == "response_format":
                exc.param = "text"  # the Responses API asks for structured output in text.format
            return self._failure(exc, session_id, "responses", key)
        self._answered(session_id, key)
        response_id = rs.new_id("resp")
        logprobs = self._response_logprobs(response, req.turn) if req.logprobs else None
        data = self._response_object(
            req, response_id, response, rs.output_items(response, logprobs), rs.now()
        )
        self._keep(req, response_id, response, data, session_id)
        return JSONResponse(data)

    def _response_object(
        self,
        req: rs.ResponsesRequest,
        response_id: str,
        response: LLMResponse,
        output: list[dict[str, Any]],
        created: float,
    ) -> dict[str, Any]:
        incomplete = "max_output_tokens" if response.finish_reason == "length" else None
        data = rs.response_object(
            req,
            response_id,
            self.model_name,
            status="incomplete" if incomplete else "completed",
            output=output,
            usage=rs.usage_of(response),
            created_at=created,
            incomplete=incomplete,
        )
        invalid = [c for c in response.tool_calls if c.error is not None]
        if invalid:
            data["invalid_tool_calls"] = [
                {"call_id": c.id, "name": c.name, "arguments": c.arguments, "error": c.error} for c in invalid
            ]
        return data

    def _keep(
        self,
        req: rs.ResponsesRequest,
        response_id: str,
        response: LLMResponse,
        data: dict[str, Any],
        session_id: str | None,
    ) -> None:
        if req.store:
            self.responses.put(
                response_id, rs.StoredResponse(session_id, rs.conversation_after(req, response), data)
            )
            self._puts += 1
            if self._puts % 256 == 0:  # a backend may finish sessions on the TokenLLM, not here
                live = set(self.llm.session_ids())
                self.responses.forget_sessions_except(live)

    async def _response_events(
        self, req: rs.ResponsesRequest, stream: TurnStream, session_id: str | None, key: str
    ) -> AsyncIterator[bytes]:
        response_id, created = rs.new_id("resp"), rs.now()
        sequence = 0
        want_top = req.top_logprobs is not None
        wants_logprobs = req.logprobs

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal sequence
            data = {"type": kind, "sequence_number": sequence, **fields}
            sequence += 1
            return rs.sse(data)

        shell = rs.response_object(
            req, response_id, self.model_name, status="in_progress", output=[], usage=None, created_at=created
        )
        yield event("response.created", response=shell)
        yield event("response.in_progress", response=shell)
        text = TextStream(self.llm, req.sampling)
        index = 0  # output index of the next item
        reasoning_item: dict[str, Any] | None = None
        message_item: dict[str, Any] | None = None
        reasoning_text, message_text = "", ""
        message_logprobs: list[dict[str, Any]] = []
        pending: list[dict[str, Any]] = []
        done_items: list[dict[str, Any]] = []

        def close_reasoning() -> list[bytes]:
            nonlocal reasoning_item, index
            if reasoning_item is None:
                return []
            item = rs.reasoning_item(reasoning_item["id"], reasoning_text)
            out = [
                event(
                    "response.reasoning_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=reasoning_text,
                ),
                event("response.output_item.done", output_index=index, item=item),
            ]
            done_items.append(item)
            reasoning_item, index = None, index + 1
            return out

        def reasoning_delta(delta: str) -> list[bytes]:
            nonlocal reasoning_item, reasoning_text
            out = []
            if reasoning_item is None:
                reasoning_item = {"type": "reasoning", "id": rs.new_id("rs"), "summary": [], "content": []}
                out.append(event("response.output_item.added", output_index=index, item=reasoning_item))
            reasoning_text += delta
            out.append(
                event(
                    "response.reasoning_text.delta",
                    item_id=reasoning_item["id"],
                    output_index=index,
                    content_index=0,
                    delta=delta,
                )
            )
            return out

        def text_delta(delta: str, logprobs: list[dict[str, Any]]) -> list[bytes]:
            nonlocal message_item, message_text
            out = close_reasoning()
            if message_item is None:
                message_item = rs.message_item(rs.new_id("msg"), "", None, status="in_progress")
                message_item["content"] = []
                out.append(event("response.output_item.added", output_index=index, item=message_item))
                out.append(
                    event(
                        "response.content_part.added",
                        item_id=message_item["id"],
                        output_index=index,
                        content_index=0,
                        part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                    )
                )
            message_text += delta
            message_logprobs.extend(logprobs)
            out.append(
                event(
                    "response.output_text.delta",
                    item_id=message_item["id"],
                    output_index=index,
                    content_index=0,
                    delta=delta,
                    logprobs=logprobs if req.logprobs else [],
                )
            )
            return out

        try:
            fed_forced = False
            async for piece, _ in stream.pieces():
                if not fed_forced:
                    text.feed(list(req.turn.forced_ids))
                    fed_forced = True
                reasoning, content = text.feed(piece.token_ids)
                if wants_logprobs:
                    pending += self._token_logprobs(
                        piece.token_ids, piece.logprobs, piece.top_logprobs, want_top
                    )
                for chunk in reasoning_delta(reasoning) if reasoning else []:
                    yield chunk
                if content:
                    for chunk in text_delta(content, pending):
                        yield chunk
                    pending = []
            response = await stream.task
        except asyncio.CancelledError:
            stream.cancel()
            raise
        except Exception as exc:
            message = self._failure_stream(exc, session_id, "responses", key)
            failed = rs.response_object(
                req,
                response_id,
                self.model_name,
                status="failed",
                output=done_items,
                usage=None,
                created_at=created,
            )
            failed["error"] = {"code": "server_error", "message": message}
            yield event("response.failed", response=failed)
            return
        finally:
            stream.cancel()
        reasoning, content = text.rest(response)
        if reasoning:
            for chunk in reasoning_delta(reasoning):
                yield chunk
        if content or (pending and message_item is not None):
            for chunk in text_delta(content, pending):
                yield chunk
            pending = []
        for chunk in close_reasoning():
            yield chunk
        if message_item is not None:
            final_logprobs = message_logprobs if req.logprobs else None
            item = rs.message_item(message_item["id"], message_text, final_logprobs)
            part = item["content"][0]
            yield event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=message_text,
                logprobs=part["logprobs"],
            )
            yield event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
            yield event("response.output_item.done", output_index=index, item=item)
            done_items.append(item)
            index += 1
        for call in response.tool_calls:
            if call.error is not None:
                continue
            item_id = rs.new_id("fc")
            yield event(
                "response.output_item.added",
                output_index=index,
                item=rs.call_item(item_id, call.id, call.name, "", status="in_progress"),
            )
            yield event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=call.arguments,
            )
            yield event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=call.name,
                arguments=call.arguments,
            )
            item = rs.call_item(item_id, call.id, call.name, call.arguments)
            yield event("response.output_item.done", output_index=index, item=item)
            done_items.append(item)
            index += 1
        data = self._response_object(req, response_id, response, done_items, created)
        self._keep(req, response_id, response, data, session_id)
        kind = "response.incomplete" if data["status"] == "incomplete" else "response.completed"
        self._answered(session_id, key)
        yield event(kind, response=data)


def _view_answer(
    episode_id: str, view: TrainingView | None, failures: list[CallFailure], error: str | None = None
) -> Response:
    """A session's view as JSON with the calls the gateway failed in it (``gateway_failures``;
    one not ``retried`` means the episode failed: do not train it) and that verdict at the top,
    ``failed`` (``true`` with the ``error``), so a consumer that skips the list is told too; 404
    when there is no view."""
    if view is None:
        why = f"; {error}" if error else ""
        return _error(404, f"no session {episode_id!r}{why}", "not_found_error")
    if error is None and any(not f.retried for f in failures):
        error = FinishedSession(view, failures).error()
    answer: dict[str, Any] = {
        **view.model_dump(mode="json"),
        "failed": error is not None,
        "gateway_failures": [f.model_dump(mode="json") for f in failures],
    }
    if error is not None:
        answer["error"] = error
    return JSONResponse(answer)


def _message(response: LLMResponse) -> dict[str, Any]:
    """The chat completion message of an answer (calls that failed to parse in the extension
    field ``invalid_tool_calls``: an OpenAI message cannot carry them)."""
    message: dict[str, Any] = {"role": "assistant", "content": response.content}
    valid = [c for c in response.tool_calls if c.error is None]
    invalid = [c for c in response.tool_calls if c.error is not None]
    if valid:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in valid
        ]
    if response.reasoning:
        message["reasoning_content"] = response.reasoning
    if invalid:
        message["invalid_tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "error": c.error} for c in invalid
        ]
    return message
