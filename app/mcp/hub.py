"""The process-wide side of MCP servers: tool lists (cached, fetched concurrently), pooled
sessions, and which servers are down.

- Tool lists: `McpHub.reachable_tools` (a listing: a chat's tools, `/mcp` `tools/list`) asks
  every server whose list is not cached at once and waits for each at most
  MCP_LIST_DEADLINE_S. A server that fails, or has not answered by then, is skipped and marked
  down: listings skip it at once (no connect) until its backoff has passed (5 s, doubling up to
  5 min); the listing that then asks it again waits at most RETRY_GRACE_S for it (a server that
  stays down costs a listing after each backoff a quarter of a second, not the deadline again).
  A fetch that outlived its wait goes on in the background (up to the connect timeout) and, if
  it succeeds, fills the cache and clears the mark. Lists are kept for MCP_TOOLS_CACHE_TTL_S;
  concurrent callers share one fetch per server; a server's `notifications/tools/list_changed`
  drops its cached lists at once.
- Sessions: `McpHub.session` opens one (with the server's outbound policy and the connect
  timeout); pooled sessions are `app/mcp/pool.py`, the sessions of one run `McpSessions`
  (`app/mcp/sessions.py`), and MCP tools as typed tools `app/mcp/tools.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types
from mcp import ClientSession

from app.errors import AppError
from app.http.netguard import OutboundPolicy
from app.mcp.client import failure_reason, list_all_tools, open_session
from app.mcp.config import McpServer
from app.mcp.pool import PoolKey, PoolLimits, SessionPool, hold
from app.mcp.tools import mcp_server_tool
from app.tools.typed import McpServerTool

if TYPE_CHECKING:
    from app.mcp.sessions import McpSessions

logger = logging.getLogger(__name__)

CACHE_ENTRIES = 1024
TYPED_ENTRIES = 20_000
CAPPED = "(MCP_MAX_"  # in the reason of a list left out for its size
OFF_LOOP_TOOLS = 32  # past this many tools to convert, a worker thread converts them
DOWN_ENTRIES = 4096
BACKOFF_FIRST_S = 5.0
# How long a listing waits for a server marked down once its backoff has passed.
RETRY_GRACE_S = 0.25
BACKOFF_MAX_S = 300.0
NO_POOL = PoolLimits(idle_s=0, per_tenant=1, total=1)


class McpUnavailableError(AppError):
    """A selected MCP server could not be reached or did not list its tools."""

    status_code = 502


class McpTimeoutError(AppError):
    status_code = 504


@dataclass(frozen=True)
class McpLimits:
    connect_timeout_s: float
    cache_ttl_s: float
    list_deadline_s: float = 2.0
    pool: PoolLimits = NO_POOL
    # A server's list: at most this many tools (past it the server is skipped, with why) and
    # this many bytes in one answer (read no further: the SDK parses it on the event loop).
    max_tools: int = 1000
    max_list_bytes: int = 524_288


@dataclass(frozen=True)
class _Down:
    until: float  # on the hub's clock
    failures: int
    error: AppError


# Told of every server a listing skipped: (the server's source, why: "timeout", "unavailable" or
# "down", the last meaning skipped without trying because of an earlier failure).
SkipListener = Callable[[str, str], None]
# Told of every tool call on an MCP session: (the server's label: an operator server's name, or
# "tenant" for any tenant's server, so labels stay few), seconds, the outcome ("ok", "error"
# for an `isError` result, "failed" when the call itself failed).
CallListener = Callable[[str, float, str], None]


class McpHub:
    """The process-wide part: limits, the outbound policy, the tool-list cache, the servers
    marked down, pooled sessions, and the runs holding sessions."""

    def __init__(
        self,
        *,
        policy: OutboundPolicy,
        limits: McpLimits,
        clock: Callable[[], float] = time.monotonic,
        on_skip: SkipListener | None = None,
        on_call: CallListener | None = None,
    ) -> None:
        self._policy = policy
        self._limits = limits
        self._clock = clock
        self._on_skip = on_skip
        self._on_call = on_call
        self._cache: OrderedDict[str, tuple[float, list[mcp_types.Tool]]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[list[mcp_types.Tool]]] = {}
        self._down: OrderedDict[str, _Down] = OrderedDict()
        # Typed tools by (server entry, the listed tool object they were made of).
        self._typed: OrderedDict[tuple[str, str, str, int], tuple[mcp_types.Tool, McpServerTool]]
        self._typed = OrderedDict()
        self.pool = SessionPool(limits=limits.pool, holder=self._hold, clock=clock)
        self.runs: set[McpSessions] = set()  # runs holding a session, closed at shutdown
        self.open_sessions = 0  # sessions open right now, pooled ones included
        self.handshakes = 0  # sessions ever opened

    def policy_for(self, server: McpServer) -> OutboundPolicy | None:
        """Tenant servers are checked like external tools; the operator's own are trusted."""
        if server.source != "tenant":
            return None
        return server.policy or self._policy

    @contextlib.asynccontextmanager
    async def session(self, server: McpServer, headers: dict[str, str]) -> AsyncIterator[Any]:
        self.handshakes += 1

        async def on_message(message: Any) -> None:
            if isinstance(message, mcp_types.ToolListChangedNotification):
                self.forget_lists(server)

        async with open_session(
            server,
            headers=headers,
            policy=self.policy_for(server),
            timeout_s=self._limits.connect_timeout_s,
            on_message=on_message,
            max_list_bytes=self._limits.max_list_bytes,
        ) as session:
            self.open_sessions += 1
            try:
                yield session
            finally:
                self.open_sessions -= 1

    async def _hold(
        self,
        server: McpServer,
        headers: dict[str, str],
        ready: asyncio.Future[ClientSession],
        stop: asyncio.Event,
    ) -> None:
        await hold(lambda: self.session(server, headers), server.name, ready, stop)

    def pool_key(self, tenant_id: str, server: McpServer, headers: dict[str, str]) -> PoolKey:
        return (tenant_id, server.source, server.name, server.revision, _digest(server, headers))

    async def reachable_tools(
        self, servers: list[McpServer], context: dict[str, Any], *, tenant_id: str | None = None
    ) -> tuple[list[tuple[McpServer, list[mcp_types.Tool]]], dict[str, AppError]]:
        """Each server's tools, asked concurrently, each within the listing deadline; a server
        that fails, times out or is marked down is left out, with its error (by server name)
        in the second part."""
        lists = await asyncio.gather(
            *(self._listed(s, context, tenant_id) for s in servers), return_exceptions=True
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

    async def _listed(
        self, server: McpServer, context: dict[str, Any], tenant_id: str | None
    ) -> list[mcp_types.Tool]:
        headers = server.request_headers(context)
        key = _cache_key(server, headers)
        cached = self._cached(server, key)
        if cached is not None:
            return cached
        down = self._down.get(key)
        if down is not None and down.until > self._clock():
            self._skipped(server, "down")
            raise down.error
        pending = self._fetching(server, headers, key, tenant_id)
        deadline = self._limits.list_deadline_s
        if down is not None:  # down before: asked again, but not waited for long
            deadline = min(deadline, RETRY_GRACE_S)
        try:
            tools = await asyncio.wait_for(asyncio.shield(pending), deadline)
        except TimeoutError:
            error = McpTimeoutError(
                f"MCP server '{server.name}' did not list its tools within {deadline:g} s."
            )
            self._mark_down(key, error)
            self._skipped(server, "timeout")
            raise error from None
        except (McpUnavailableError, McpTimeoutError):
            self._skipped(server, "unavailable")
            raise
        return [t for t in tools if server.offers(t.name)]

    async def server_tools(
        self, server: McpServer, context: dict[str, Any], *, tenant_id: str | None = None
    ) -> list[mcp_types.Tool]:
        """One server's tools, cached or asked now (a server marked down is asked too), within
        the connect timeout: for a caller that needs this one server's answer."""
        headers = server.request_headers(context)
        key = _cache_key(server, headers)
        cached = self._cached(server, key)
        if cached is not None:
            return cached
        tools = await asyncio.shield(self._fetching(server, headers, key, tenant_id))
        return [t for t in tools if server.offers(t.name)]

    def _cached(self, server: McpServer, key: str) -> list[mcp_types.Tool] | None:
        cached = self._cache.get(key)
        if cached is not None and cached[0] > self._clock():
            return [t for t in cached[1] if server.offers(t.name)]
        return None

    def _fetching(
        self, server: McpServer, headers: dict[str, str], key: str, tenant_id: str | None
    ) -> asyncio.Future[list[mcp_types.Tool]]:
        """The fetch of a server's list under way, or a new one: one per server, however many
        callers ask at once (it runs to its end even when they stop waiting)."""
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(server, headers, key, tenant_id))
            self._inflight[key] = pending
            pending.add_done_callback(lambda done: self._fetched(key, done))
        return pending

    def _fetched(self, key: str, done: asyncio.Future[list[mcp_types.Tool]]) -> None:
        self._inflight.pop(key, None)
        if not done.cancelled() and done.exception() is None:
            self._down.pop(key, None)

    async def _fetch(
        self, server: McpServer, headers: dict[str, str], key: str, tenant_id: str | None
    ) -> list[mcp_types.Tool]:
        try:
            async with asyncio.timeout(self._limits.connect_timeout_s):
                tools = await self._list_on_a_session(server, headers, tenant_id)
        except TimeoutError:
            error: AppError = McpTimeoutError(
                f"MCP server '{server.name}' did not list its tools within "
                f"{self._limits.connect_timeout_s:g} s."
            )
            self._mark_down(key, error)
            raise error from None
        except Exception as exc:
            # A list too long is left out whole: said at ERROR, as every drop is.
            reason = failure_reason(exc)
            logger.log(
                logging.ERROR if CAPPED in reason else logging.WARNING,
                "MCP server %r: listing tools failed: %s",
                server.name,
                reason,
            )
            error = McpUnavailableError(
                f"MCP server '{server.name}' is unavailable: {failure_reason(exc)}"
            )
            self._mark_down(key, error)
            raise error from None
        if self._limits.cache_ttl_s > 0:
            self._cache[key] = (self._clock() + self._limits.cache_ttl_s, tools)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return tools

    async def _list_on_a_session(
        self, server: McpServer, headers: dict[str, str], tenant_id: str | None
    ) -> list[mcp_types.Tool]:
        """On the tenant's pooled session when the server's sessions pool (the session a
        later call uses), else on one of its own."""
        if tenant_id is not None and self.pool.enabled_for(server):
            key = self.pool_key(tenant_id, server, headers)
            entry = await self.pool.acquire(key, server, headers)
            if entry is not None:
                try:
                    return await list_all_tools(entry.ready.result(), self._limits.max_tools)
                except Exception:
                    self.pool.discard(entry)
                    raise
                finally:
                    self.pool.release(entry)
        async with self.session(server, headers) as session:
            return await list_all_tools(session, self._limits.max_tools)

    async def typed_tools(
        self, server: McpServer, listed: list[mcp_types.Tool]
    ) -> list[McpServerTool]:
        """`listed` (a server's list, as `reachable_tools` gives it) as typed tools: each
        converted once per server entry and kept with the list it came from; a batch of new
        ones is converted off the event loop (a thousand tools' schemas took 0.1-0.2 s)."""
        prefix = (server.source, server.name, server.revision)
        found: list[McpServerTool | None] = []
        missing: list[int] = []
        for place, item in enumerate(listed):
            kept = self._typed.get((*prefix, id(item)))
            if kept is not None and kept[0] is item:
                found.append(kept[1])
            else:
                found.append(None)
                missing.append(place)
        if missing:
            items = [listed[place] for place in missing]

            def convert() -> list[McpServerTool]:
                return [mcp_server_tool(server, item) for item in items]

            made = await asyncio.to_thread(convert) if len(items) > OFF_LOOP_TOOLS else convert()
            for place, item, tool in zip(missing, items, made, strict=True):
                found[place] = tool
                self._typed[(*prefix, id(item))] = (item, tool)
            while len(self._typed) > TYPED_ENTRIES:
                self._typed.popitem(last=False)
        return [tool for tool in found if tool is not None]

    def _mark_down(self, key: str, error: AppError) -> None:
        """Listings skip the server until its backoff has passed (doubling per failure)."""
        earlier = self._down.get(key)
        failures = 1 if earlier is None else earlier.failures + 1
        backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (failures - 1))
        self._down[key] = _Down(self._clock() + backoff, failures, error)
        self._down.move_to_end(key)
        while len(self._down) > DOWN_ENTRIES:
            self._down.popitem(last=False)

    def _skipped(self, server: McpServer, reason: str) -> None:
        if self._on_skip is not None:
            self._on_skip(server.source, reason)

    def call_done(self, server: McpServer, seconds: float, outcome: str) -> None:
        if self._on_call is not None:
            label = server.name if server.source == "operator" else "tenant"
            self._on_call(label, seconds, outcome)

    def down_servers(self) -> int:
        """How many server entries are marked down now (a gauge)."""
        now = self._clock()
        return sum(1 for down in self._down.values() if down.until > now)

    def forget_lists(self, server: McpServer) -> None:
        """Drop a server's cached lists (it said its tools changed)."""
        prefix = f"{server.source}:{server.name}:{server.revision}:"
        for key in [k for k in self._cache if k.startswith(prefix)]:
            del self._cache[key]

    def forget(self, server: McpServer) -> None:
        """Drop everything known of a server entry (it was deleted or replaced)."""
        self.forget_lists(server)
        prefix = f"{server.source}:{server.name}:{server.revision}:"
        for key in [k for k in self._down if k.startswith(prefix)]:
            del self._down[key]
        self.pool.forget_server(server)

    async def aclose(self) -> None:
        """At shutdown: close whatever a run still holds, the pooled sessions, the fetches."""
        for run in list(self.runs):
            await run.aclose()
        await self.pool.aclose()
        for pending in list(self._inflight.values()):
            pending.cancel()


def _digest(server: McpServer, headers: dict[str, str]) -> str:
    # The policy's allow list too: what was fetched or opened under a wider policy is not used
    # under a narrower one (a tenant's allow list cleared by the admin).
    allow = server.policy.allow if server.policy is not None else ()
    return hashlib.sha256(repr((sorted(headers.items()), allow)).encode()).hexdigest()[:16]


def _cache_key(server: McpServer, headers: dict[str, str]) -> str:
    return f"{server.source}:{server.name}:{server.revision}:{_digest(server, headers)}"
