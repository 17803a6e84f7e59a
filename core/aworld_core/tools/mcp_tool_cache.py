"""MCP tool lists kept across episodes (``TOOL_LIST_CACHE``, one per process).

A server's tool list rarely changes, and listing it costs a round trip and ~2 ms of SDK CPU.
Episodes on their own sessions reuse a listing another session made; a shared session
(``mcp_shared``) re-lists through the same cache when an entry expires or is dropped.

Why not the SDK's ``mcp.client.caching`` (``Client(cache=CacheConfig(store=<shared store>))``),
measured by ``benchmarks/mcp_tool_cache.py`` (docs/performance.md): it honours a server's
``ttlMs: 0`` -- what SDK servers, the GAIA environment included, send unless configured -- as
"do not cache", so it lists in every episode (client CPU per episode 1.00x of no cache, ours
0.84-0.88x); with a server-side TTL hint it stops listing but still costs 0.97x (it deep-copies
the listing on every hit and each session compiles the output-schema validators again).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aworld_core.tools.mcp_config import MCPServerConfig

logger = logging.getLogger("aworld_core.tools.mcp_client")


@dataclass(eq=False)
class CachedToolList:
    """One server's tool list as a session negotiated at ``protocol_version`` saw it."""

    tools: list[Any]
    protocol_version: str | None
    expires_at: float
    # output-schema validators the SDK compiled for these tools (compiling one costs more than
    # the tools/call it checks); only ever filled for the exact schema objects in ``tools``
    validators: dict[str, Any] = field(default_factory=dict)
    valid: bool = True

    def install(self, session: Any) -> bool:
        """Give a new session this listing as if it had listed the tools itself.

        The SDK derives per-tool state from a listing (output schemas to validate results
        against, ``x-mcp-header`` maps); a session that never listed re-lists at its first
        result. Its own response cache re-applies a cached listing the same way
        (``ClientSession._absorb_tool_listing``). False when this SDK lacks that hook: the
        caller then lists.
        """
        absorb = getattr(session, "_absorb_tool_listing", None)
        if absorb is None:
            return False
        import mcp_types

        absorb(mcp_types.ListToolsResult(tools=list(self.tools)), complete=True)
        compiled = getattr(session, "_tool_output_validators", None)
        if isinstance(compiled, dict):
            for name, validator in self.validators.copy().items():  # copy: other threads' loops add
                compiled.setdefault(name, validator)
        return True

    def learn_validators(self, session: Any) -> None:
        """Keep the validators a session compiled for schemas of this listing."""
        if not self.valid:
            return
        compiled = getattr(session, "_tool_output_validators", None)
        schemas = getattr(session, "_tool_output_schemas", None)
        if not compiled or not isinstance(schemas, dict):
            return
        ours = {tool.name: tool.output_schema for tool in self.tools}
        for name, validator in compiled.items():
            if name not in self.validators and name in ours and schemas.get(name) is ours[name]:
                self.validators[name] = validator


class ToolListCache:
    """Each MCP server's tool list, kept across episodes (one per process: ``TOOL_LIST_CACHE``).

    Why: every episode opens its own MCP session, and listing the tools in each costs a round
    trip and ~2 ms of SDK CPU per episode for an answer that rarely changes. An entry is keyed
    on the server (URL, or stdio command) and the config's *static* headers (so a different
    token or ``MCP_SERVERS`` selection is a different entry; the per-episode ``X-Episode-Id`` /
    ``X-Task-Id`` are not part of it), and on the negotiated protocol version. It lives for the
    server's ``tools_cache_ttl`` seconds, or the server's own positive ``ttlMs`` if shorter
    (``ttlMs: 0`` -- what the SDK's servers send when they set nothing -- leaves the client's
    policy in charge, as a long-lived session keeps its listing). An entry is dropped when
    the server says the list changed: a call to a tool it does not know, a
    ``notifications/tools/list_changed``, or the SDK re-listing mid-session (a changed schema).
    """

    def __init__(self, *, max_entries: int = 256, clock: Any = time.monotonic):
        self.max_entries = max_entries
        self.clock = clock
        self.hits = 0
        self.misses = 0
        self._entries: dict[tuple[Any, ...], CachedToolList] = {}

    def get(self, key: tuple[Any, ...], protocol_version: str | None) -> CachedToolList | None:
        entry = self._entries.get(key)
        if entry is None or entry.protocol_version != protocol_version or entry.expires_at <= self.clock():
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def put(
        self, key: tuple[Any, ...], protocol_version: str | None, tools: list[Any], ttl_s: float
    ) -> CachedToolList:
        entry = CachedToolList(list(tools), protocol_version, self.clock() + ttl_s)
        old = self._entries.pop(key, None)
        if old is not None:
            old.valid = False
        self._entries[key] = entry
        while len(self._entries) > self.max_entries:
            self._entries.pop(next(iter(self._entries))).valid = False
        return entry

    def invalidate(self, key: tuple[Any, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.valid = False
            logger.info("MCP tool list cache: dropped the entry for %s (the server's tools changed)", key[1])

    def clear(self) -> None:
        for entry in self._entries.values():
            entry.valid = False
        self._entries.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


TOOL_LIST_CACHE = ToolListCache()


def tool_list_key(config: MCPServerConfig) -> tuple[Any, ...]:
    """The cache key of a server: where it is and the static headers we send it."""
    if config.type == "stdio":
        env = tuple(sorted((config.env or {}).items()))
        return ("stdio", config.command, tuple(config.args), env, config.cwd)
    headers = tuple(sorted((k.lower(), v) for k, v in config.headers.items()))
    return (config.type, config.url, headers)


