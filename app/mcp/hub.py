"""The process-wide side of MCP servers: tool lists (cached, fetched concurrently) and sessions.

- Tool lists: `McpHub.reachable_tools` connects to every server whose list is not cached, all at
  once, and keeps each list for MCP_TOOLS_CACHE_TTL_S; concurrent callers share one fetch per
  server.
- Sessions: `McpHub.session` opens one (with the server's outbound policy and the connect
  timeout); the sessions of one run are `McpSessions` (`app/mcp/sessions.py`), and MCP tools as
  typed tools are `app/mcp/tools.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types

from app.errors import AppError
from app.mcp.client import failure_reason, list_all_tools, open_session
from app.mcp.config import McpServer
from app.tools.netguard import OutboundPolicy

if TYPE_CHECKING:
    from app.mcp.sessions import McpSessions

logger = logging.getLogger(__name__)

CACHE_ENTRIES = 1024


class McpUnavailableError(AppError):
    """A selected MCP server could not be reached or did not list its tools."""

    status_code = 502


class McpTimeoutError(AppError):
    status_code = 504


@dataclass(frozen=True)
class McpLimits:
    connect_timeout_s: float
    cache_ttl_s: float


class McpHub:
    """The process-wide part: limits, the outbound policy, the tool-list cache, open sessions."""

    def __init__(self, *, policy: OutboundPolicy, limits: McpLimits) -> None:
        self._policy = policy
        self._limits = limits
        self._cache: OrderedDict[str, tuple[float, list[mcp_types.Tool]]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[list[mcp_types.Tool]]] = {}
        self.runs: set[McpSessions] = set()  # runs holding a session, closed at shutdown
        self.open_sessions = 0  # sessions open right now (tests and metrics read it)
        self.handshakes = 0  # sessions ever opened

    def policy_for(self, server: McpServer) -> OutboundPolicy | None:
        """Tenant servers are checked like external tools; the operator's own are trusted."""
        if server.source != "tenant":
            return None
        return server.policy or self._policy

    @contextlib.asynccontextmanager
    async def session(self, server: McpServer, headers: dict[str, str]) -> Any:
        self.handshakes += 1
        async with open_session(
            server,
            headers=headers,
            policy=self.policy_for(server),
            timeout_s=self._limits.connect_timeout_s,
        ) as session:
            self.open_sessions += 1
            try:
                yield session
            finally:
                self.open_sessions -= 1

    async def reachable_tools(
        self, servers: list[McpServer], context: dict[str, Any]
    ) -> tuple[list[tuple[McpServer, list[mcp_types.Tool]]], dict[str, AppError]]:
        """Each server's tools, fetched concurrently; a server that cannot be reached or times
        out is left out, with its error (by server name) in the second part."""
        lists = await asyncio.gather(
            *(self.server_tools(s, context) for s in servers), return_exceptions=True
        )
        found: list[tuple[McpServer, list[mcp_types.Tool]]] = []
        skipped: dict[str, AppError] = {}
        for server, result in zip(servers, lists, strict=True):
            if isinstance(result, McpUnavailableError | McpTimeoutError):
                skipped[server.name] = result
            elif isinstance(result, BaseException):
                raise result
            else:
                found.append((server, result))
        return found, skipped

    async def server_tools(
        self, server: McpServer, context: dict[str, Any]
    ) -> list[mcp_types.Tool]:
        headers = server.request_headers(context)
        key = _cache_key(server, headers)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return [t for t in cached[1] if server.offers(t.name)]
        pending = self._inflight.get(key)
        if pending is None:  # one fetch per server, however many chats start at once
            pending = asyncio.ensure_future(self._fetch(server, headers, key))
            self._inflight[key] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(key, None))
        return [t for t in await asyncio.shield(pending) if server.offers(t.name)]

    async def _fetch(
        self, server: McpServer, headers: dict[str, str], key: str
    ) -> list[mcp_types.Tool]:
        try:
            async with asyncio.timeout(self._limits.connect_timeout_s):
                async with self.session(server, headers) as session:
                    tools = await list_all_tools(session)
        except TimeoutError:
            raise McpTimeoutError(
                f"MCP server '{server.name}' did not list its tools within "
                f"{self._limits.connect_timeout_s:g} s."
            ) from None
        except Exception as exc:
            logger.warning(
                "MCP server %r: listing tools failed: %s", server.name, failure_reason(exc)
            )
            raise McpUnavailableError(
                f"MCP server '{server.name}' is unavailable: {failure_reason(exc)}"
            ) from None
        if self._limits.cache_ttl_s > 0:
            self._cache[key] = (time.monotonic() + self._limits.cache_ttl_s, tools)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return tools

    def forget(self, server: McpServer) -> None:
        """Drop cached lists of a server entry (it was deleted or replaced)."""
        prefix = f"{server.source}:{server.name}:{server.revision}:"
        for key in [k for k in self._cache if k.startswith(prefix)]:
            del self._cache[key]

    async def aclose(self) -> None:
        """At shutdown: close whatever a run still holds."""
        for run in list(self.runs):
            await run.aclose()


def _cache_key(server: McpServer, headers: dict[str, str]) -> str:
    # The policy's allow list too: a list fetched under a wider policy is not served under a
    # narrower one (a tenant's allow list cleared by the admin).
    allow = server.policy.allow if server.policy is not None else ()
    digest = hashlib.sha256(repr((sorted(headers.items()), allow)).encode()).hexdigest()[:16]
    return f"{server.source}:{server.name}:{server.revision}:{digest}"
