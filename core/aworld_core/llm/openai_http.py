"""An ``LLMClient`` for any OpenAI-compatible chat endpoint (vLLM, SGLang, a hosted API, the gateway).

Built on aiohttp rather than the ``openai`` SDK: one ``ClientSession`` per client (per event loop)
keeps connections alive, and a call costs about 0.3 ms of CPU instead of 1.7 ms, which matters
when hundreds of episodes share a rollout worker's CPU.

``base_url`` follows the OpenAI SDK's convention: it already ends in ``/v1`` (``http://host:8000/v1``)
and requests go to ``{base_url}/chat/completions``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import aiohttp

from aworld_core.errors import LLMError, UsageError
from aworld_core.llm.base import LLMResponse
from aworld_core.schemas import Message, SamplingParams, ToolCall

_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
_BODY_EXCERPT = 500


class _HTTPFailure(Exception):
    """One failed attempt: kept to build the final ``LLMError``."""

    def __init__(self, status: int | None, detail: str, retryable: bool, retry_after: float | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retryable = retryable
        self.retry_after = retry_after


class OpenAICompatibleLLM:
    """``LLMClient`` over ``POST {base_url}/chat/completions``.

    Retries connection errors, timeouts, 5xx and 429 (honouring ``Retry-After``) with exponential
    backoff; any other status fails at once. When it gives up it raises ``LLMError`` naming the
    URL, the HTTP status and an excerpt of the body, so a wrong URL or key is obvious.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        sampling: SamplingParams | None = None,
        headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise UsageError(
                f"LLM base_url {base_url!r} is not an http(s) URL; pass the endpoint's OpenAI base URL, "
                f"e.g. http://127.0.0.1:8000/v1"
            )
        if not model:
            raise UsageError(f"no model name given for the LLM at {base_url}; set llm_model_name")
        if timeout_s <= 0:
            raise UsageError(f"LLM timeout_s must be > 0, got {timeout_s}")
        if retries < 0:
            raise UsageError(f"LLM retries must be >= 0, got {retries}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.sampling = sampling or SamplingParams()
        self.extra_body = dict(extra_body or {})
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r})"

    # -- connection --------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # a session belongs to one loop; a client reused from another loop gets a new one
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            )
            self._session_loop = loop
        return self._session

    async def aclose(self) -> None:
        """Close the connection pool. Safe to call twice."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                await session.close()
            except RuntimeError:  # its loop is gone; nothing left to release
                pass

    # -- the call ----------------------------------------------------------------------------

    def request_body(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> dict[str, Any]:
        """The JSON body sent for one call (public so tests and adapters can inspect it)."""
        params = self.sampling.merged(sampling)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        for key in ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed"):
            value = getattr(params, key)
            if value is not None:
                body[key] = value  # top_k is not OpenAI's, but vLLM and SGLang accept it
        body.update(self.extra_body)
        body.update(params.extra)
        return body

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
        *,
        session_id: str | None = None,
    ) -> LLMResponse:
        data = json.dumps(self.request_body(messages, tools, sampling), ensure_ascii=False).encode()
        headers = {"X-Session-Id": session_id} if session_id else None
        started = time.perf_counter()
        failures: list[_HTTPFailure] = []
        for attempt in range(self.retries + 1):
            try:
                payload = await self._post(data, headers)
            except _HTTPFailure as failure:
                failures.append(failure)
                if not failure.retryable or attempt == self.retries:
                    break
                await asyncio.sleep(self._delay(attempt, failure.retry_after))
                continue
            response = self._parse(payload)
            response.duration_s = time.perf_counter() - started
            return response
        raise self._give_up(failures)

    async def _post(self, data: bytes, headers: dict[str, str] | None) -> dict[str, Any]:
        session = self._get_session()
        try:
            async with session.post(self.url, data=data, headers=headers) as resp:
                text = await resp.text()
                if resp.status != 200:
                    retry_after = _parse_retry_after(resp.headers.get("Retry-After"))
                    raise _HTTPFailure(
                        resp.status, _excerpt(text), resp.status in _RETRY_STATUSES, retry_after
                    )
        except _HTTPFailure:
            raise
        except TimeoutError:
            raise _HTTPFailure(None, f"no response within {self.timeout_s:g} s", True) from None
        except aiohttp.ClientError as exc:
            raise _HTTPFailure(None, f"{type(exc).__name__}: {exc}", True) from None
        try:
            payload = json.loads(text)
        except ValueError:
            raise _HTTPFailure(200, f"response is not JSON: {_excerpt(text)}", False) from None
        if not isinstance(payload, dict):
            raise _HTTPFailure(200, f"response is not a JSON object: {_excerpt(text)}", False)
        return payload

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        base = min(self.backoff_s * (2**attempt), self.max_backoff_s)
        return base * (0.5 + random.random() / 2)

    def _give_up(self, failures: list[_HTTPFailure]) -> LLMError:
        last = failures[-1]
        status = f"HTTP {last.status}" if last.status is not None else "no HTTP response"
        tries = len(failures)
        hint = ""
        if last.status in (401, 403):
            hint = " (check llm_api_key / LLM_API_KEY)"
        elif last.status == 404:
            hint = " (check llm_base_url: it should end in /v1, and llm_model_name)"
        elif last.status is None:
            hint = " (is the server running and is llm_base_url right?)"
        return LLMError(
            f"LLM request to {self.url} (model {self.model!r}) failed after {tries} attempt"
            f"{'s' if tries != 1 else ''}: {status}: {last.detail}{hint}"
        )

    # -- parsing -----------------------------------------------------------------------------

    def _parse(self, payload: dict[str, Any]) -> LLMResponse:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LLMError(
                f"LLM response from {self.url} has no choices: {_excerpt(json.dumps(payload))}"
            )
        choice = choices[0]
        message = choice.get("message") or {}
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            content = _content_text(content)
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        calls = [parse_tool_call(raw, i) for i, raw in enumerate(message.get("tool_calls") or [])]
        usage = payload.get("usage")
        if isinstance(usage, dict):
            usage = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        else:
            usage = None
        return LLMResponse(
            content=content,
            tool_calls=calls,
            reasoning=reasoning if isinstance(reasoning, str) else None,
            finish_reason=choice.get("finish_reason"),
            usage=usage,
            model=payload.get("model") or self.model,
        )


def parse_tool_call(raw: Any, index: int = 0) -> ToolCall:
    """An OpenAI-format tool call as a ``ToolCall``; what cannot be used is kept with ``error`` set."""
    if not isinstance(raw, dict):
        return ToolCall(id=f"call_{index}", name="", arguments=str(raw), error="tool call is not an object")
    call_id = raw.get("id") or f"call_{index}"
    function = raw.get("function")
    if not isinstance(function, dict):
        return ToolCall(id=str(call_id), name="", arguments="{}", error="tool call has no 'function' object")
    name = function.get("name")
    arguments = function.get("arguments")
    if isinstance(arguments, dict):  # some servers send an object instead of JSON text
        arguments = json.dumps(arguments, ensure_ascii=False)
    elif arguments is None or arguments == "":
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = str(arguments)
    error = None
    if not isinstance(name, str) or not name:
        error = "tool call has no function name"
        name = name if isinstance(name, str) else ""
    else:
        try:
            parsed = json.loads(arguments)
        except ValueError as exc:
            error = f"arguments are not valid JSON ({exc}): {_excerpt(arguments, 200)}"
        else:
            if not isinstance(parsed, dict):
                error = f"arguments must be a JSON object, got {type(parsed).__name__}"
    return ToolCall(id=str(call_id), name=name, arguments=arguments, error=error)


def _content_text(content: Any) -> str:
    """Content given as a list of parts: join the text parts."""
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return str(content)


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _excerpt(text: str, limit: int = _BODY_EXCERPT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
