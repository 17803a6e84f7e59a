#!/usr/bin/env python3
"""Forward TCP ports on 127.0.0.1 to unix sockets (stdlib only; started by offline-run.sh).

Why: ``scripts/offline-run.sh`` runs a test suite in a network namespace of its own, whose
127.0.0.1 is not the host's. A server started before the suite on the host's loopback -- the
PostgreSQL server of ``scripts/postgres-for-tests.sh`` -- is unreachable there by TCP, but its unix
socket (a file) crosses network namespaces. This bridge listens on 127.0.0.1:PORT *inside* the
namespace and relays every connection to the unix socket, so the URL the tests read
(``postgresql://...@127.0.0.1:PORT/...``) keeps working, and no packet touches an interface other
than the namespace's ``lo``.

    loopback_bridge.py PORT=/path/to/unix.socket [PORT=...]

Prints ``ready`` on stdout once every port listens; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


def _handler(path: str):
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_unix_connection(path)
        except OSError as exc:
            print(f"loopback_bridge: {path} does not answer: {exc}", file=sys.stderr, flush=True)
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    return handle


async def main(pairs: list[tuple[int, str]]) -> None:
    servers = [await asyncio.start_server(_handler(path), "127.0.0.1", port) for port, path in pairs]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def parse(args: list[str]) -> list[tuple[int, str]]:
    pairs = []
    for arg in args:
        port, sep, path = arg.partition("=")
        if not sep or not port.isdigit() or not path:
            raise SystemExit(f"loopback_bridge: expected PORT=/path/to/unix.socket, got {arg!r}")
        pairs.append((int(port), path))
    return pairs


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
