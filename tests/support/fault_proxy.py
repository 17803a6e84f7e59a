"""A TCP proxy on 127.0.0.1 that cuts the connection of chosen requests (network faults for tests).

``FaultProxy(upstream_port, drop=b"x-episode-id: drop")`` forwards bytes both ways and, when a
request's bytes from the client contain ``drop`` (case-insensitive), closes both sides of that
connection before anything reaches the server: the client sees its connection reset with no
response, as with a crashed load balancer or a dropped keep-alive connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


class FaultProxy:
    def __init__(self, upstream_port: int, *, drop: bytes):
        self.upstream_port = upstream_port
        self.drop = drop.lower()
        self.port = 0
        self.dropped = 0
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def upstream() -> None:
            while data := await reader.read(65536):
                if self.drop in data.lower():
                    self.dropped += 1
                    _reset(writer)
                    _reset(up_writer)
                    return
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        with contextlib.suppress(Exception):
            await asyncio.gather(upstream(), downstream())
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), not FIN: the peer's next read fails at once."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.transport.abort()
