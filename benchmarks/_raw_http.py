"""A minimal HTTP/1.1 client on plain asyncio (keep-alive, ``Content-Length`` and chunked bodies),
for ``rollout_overhead.py``'s second floor: what sending, waiting for and reading the episode's
requests costs without aiohttp's per-request machinery. A benchmark's yardstick, not a client
for anything else (no TLS, no redirects, no proxies, no timeouts)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit


class _Conn(asyncio.Protocol):
    """One keep-alive connection: one request at a time, the answer parsed as bytes arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        fields = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        start = end + 4
        if "content-length" in fields:
            stop = start + int(fields["content-length"])
            if len(self.buffer) < stop:
                return
            body = bytes(self.buffer[start:stop])
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            parts, at = [], start
            while True:
                line_end = self.buffer.find(b"\r\n", at)
                if line_end < 0:
                    return
                size = int(bytes(self.buffer[at:line_end]).split(b";")[0], 16)
                if len(self.buffer) < line_end + 2 + size + 2:
                    return
                if size == 0:
                    stop = line_end + 4
                    break
                parts.append(bytes(self.buffer[line_end + 2:line_end + 2 + size]))
                at = line_end + 2 + size + 2
            body = b"".join(parts)
        else:
            raise ValueError("the raw floor client reads Content-Length or chunked answers only")
        del self.buffer[:stop]
        self.waiter.set_result((status, body))


class RawClient:
    """``await client.post(url, body, headers) -> (status, body)`` over pooled keep-alive connections."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], list[_Conn]] = {}

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        parts = urlsplit(url)
        key = (parts.hostname or "127.0.0.1", parts.port or 80)
        pool = self.idle.setdefault(key, [])
        conn = None
        while pool and conn is None:
            candidate = pool.pop()
            conn = None if candidate.closed else candidate
        if conn is None:
            _, conn = await asyncio.get_running_loop().create_connection(_Conn, *key)
        head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {key[0]}:{key[1]}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        conn.waiter = asyncio.get_running_loop().create_future()
        assert conn.transport is not None
        conn.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        try:
            answer = await conn.waiter
        finally:
            conn.waiter = None
        pool.append(conn)
        return answer

    def close(self) -> None:
        for pool in self.idle.values():
            for conn in pool:
                if conn.transport is not None:
                    conn.transport.close()
        self.idle.clear()
