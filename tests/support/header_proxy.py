"""An HTTP pass-through on 127.0.0.1 that adds headers to every request (for clients that cannot).

The MCP conformance suite sends no bearer token, and the GAIA environment has no unauthenticated
mode (by design); ``HeaderProxy(upstream, {"Authorization": "Bearer T"})`` stands in between.
Everything else goes through as sent, ``Host`` and ``Origin`` included (the suite's DNS-rebinding
scenario must reach the server as it was sent), and responses stream back as they come (SSE).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class HeaderProxy:
    def __init__(self, upstream: str, headers: dict[str, str]):
        self.upstream = upstream.rstrip("/")  # scheme://host:port
        self.headers = dict(headers)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP | {"content-length"}}
        headers.update(self.headers)
        body = await request.read()
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body or None,
            allow_redirects=False, auto_decompress=False,
        ) as upstream:  # fmt: skip
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP | {"content-length"}:
                    response.headers.add(name, value)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientError):
                pass  # the client went away (it closed an SSE stream): so does the upstream request
            return response

    def start(self) -> HeaderProxy:
        ready = threading.Event()

        def serve() -> None:
            import aiohttp
            from aiohttp import web

            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)

            async def up() -> None:
                self._session = aiohttp.ClientSession(auto_decompress=False, skip_auto_headers={"User-Agent"})
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", self._handle)
                self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1, handler_cancellation=True)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = self._runner.addresses[0][1]

            loop.run_until_complete(up())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="header-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(15):
            raise RuntimeError("the header proxy did not start")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def down() -> None:
            await self._runner.cleanup()
            await self._session.close()

        try:  # streams still open (a client's SSE GET) are cut after a moment
            asyncio.run_coroutine_threadsafe(asyncio.wait_for(down(), 3), loop).result(5)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> HeaderProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
