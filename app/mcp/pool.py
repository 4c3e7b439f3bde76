"""Pooled MCP sessions: one open session per (tenant, server, headers), shared by that tenant's
runs, so a stdio server is started once per idle period rather than once per call.

- Never across tenants: the tenant is part of the key, even for an operator's server.
- Never for a server whose headers carry per-run context values (`poolable`): such a session
  belongs to one run's values, so those runs open their own (`app/mcp/sessions.py`).
- An entry unused for MCP_SESSION_IDLE_S is closed (`sweep`, run by a background task and on
  every acquire); at most MCP_POOL_PER_TENANT entries per tenant and MCP_POOL_TOTAL in all (the
  least recently used idle entry makes room; with none idle the run opens its own session).
- A session that dies (its process exits, its connection closes) is dropped; the next acquire
  opens a new one. One idle for PING_AFTER_IDLE_S or more is pinged before it is lent again
  (within PING_TIMEOUT_S): a stdio server that died or hung while idle is found then, dropped
  and started again, once, rather than failing the call (or the listing) it was lent for.

Each session lives in a task of its own: the SDK's transports use anyio scopes that must be
exited by the task that entered them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mcp import ClientSession

from app.mcp.client import failure_reason
from app.mcp.config import McpServer

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0
PING_AFTER_IDLE_S = 1.0  # a session used more recently is lent without a ping
PING_TIMEOUT_S = 2.0
PoolKey = tuple[str, str, str, str, str]
# Opens a session and holds it until the event is set (`McpHub._hold`, through `hold`).
Holder = Callable[
    [McpServer, dict[str, str], "asyncio.Future[ClientSession]", asyncio.Event], Awaitable[None]
]


@dataclass(frozen=True)
class PoolLimits:
    idle_s: float  # 0: no pooling
    per_tenant: int
    total: int


@dataclass(eq=False)
class PooledSession:
    key: PoolKey
    server: McpServer
    ready: asyncio.Future[ClientSession]
    stop: asyncio.Event
    last_used: float
    owner: asyncio.Task[None] | None = None
    leases: int = 0
    dead: bool = field(default=False)
    check: asyncio.Future[bool] | None = None  # the ping before reuse, shared by its callers
    checked_at: float | None = None  # `last_used` when it was pinged

    @property
    def tenant_id(self) -> str:
        return self.key[0]

    def alive(self) -> bool:
        return not self.dead and self.owner is not None and not self.owner.done()


def poolable(server: McpServer) -> bool:
    """A server whose session is the same for every run of a tenant: no header takes a
    per-run context value (argument mappings are per call, so they do not matter)."""
    return not any("header" in mapping for mapping in server.context.values())


class SessionPool:
    """The process's pooled sessions (see the module doc)."""

    def __init__(self, *, limits: PoolLimits, holder: Holder, clock: Callable[[], float]) -> None:
        self.limits = limits
        self._holder = holder
        self._clock = clock
        self._entries: OrderedDict[PoolKey, PooledSession] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def enabled_for(self, server: McpServer) -> bool:
        return self.limits.idle_s > 0 and poolable(server)

    async def acquire(
        self, key: PoolKey, server: McpServer, headers: dict[str, str]
    ) -> PooledSession | None:
        """A lease on the pooled session of `key` (opened now if there is none); None when the
        pool is full of sessions in use. Release it with `release`."""
        self.sweep()
        entry = self._entries.get(key)
        if entry is not None and entry.alive() and not await self._healthy(entry):
            logger.warning(
                "MCP server %r: its pooled session did not answer a ping: started again",
                server.name,
            )
            self.discard(entry)
        entry = self._entries.get(key)  # another caller may have opened one meanwhile
        if entry is None or not entry.alive():
            if entry is not None:
                self.discard(entry)
            if not self._make_room(key[0]):
                return None
            entry = self._open(key, server, headers)
        self._entries.move_to_end(key)
        entry.leases += 1
        try:
            await asyncio.shield(entry.ready)
        except BaseException:
            self.release(entry)
            # It failed to open, or the last one waiting for it gave up: nobody will use it.
            ready = entry.ready
            failed = ready.done() and (ready.cancelled() or ready.exception() is not None)
            if failed or (entry.leases == 0 and not ready.done()):
                self.discard(entry)
            raise
        return entry

    async def _healthy(self, entry: PooledSession) -> bool:
        """Whether an open entry may be lent: in use, used lately or still opening, or it
        answers a ping (one ping for every caller that asks meanwhile)."""
        idle = entry.leases == 0 and self._clock() - entry.last_used >= PING_AFTER_IDLE_S
        ready = entry.ready
        if not idle or not ready.done() or ready.cancelled() or ready.exception() is not None:
            return True  # in use, or not open (yet): nothing to ping
        if entry.check is None or (entry.check.done() and entry.checked_at != entry.last_used):
            entry.checked_at = entry.last_used
            entry.check = asyncio.ensure_future(_answers_ping(ready.result()))
        return await asyncio.shield(entry.check)

    def release(self, entry: PooledSession) -> None:
        entry.leases = max(0, entry.leases - 1)
        entry.last_used = self._clock()

    def discard(self, entry: PooledSession) -> None:
        """Drop an entry (its session died or failed): closed in the background."""
        entry.dead = True
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        entry.stop.set()
        if entry.owner is not None and not entry.owner.done():
            if not entry.ready.done():  # still connecting: nobody will use it
                entry.owner.cancel()
            self._closing.add(entry.owner)
            entry.owner.add_done_callback(self._closing.discard)

    def forget_server(self, server: McpServer) -> None:
        """Close the pooled sessions of a server entry that was deleted or replaced."""
        for entry in list(self._entries.values()):
            # The revision too: tenants' servers may share a name, never a revision.
            if (entry.server.source, entry.server.name, entry.server.revision) == (
                server.source,
                server.name,
                server.revision,
            ):
                if entry.leases == 0:
                    self.discard(entry)
                else:
                    entry.dead = True  # no new leases; closed when its runs are done

    def sweep(self) -> int:
        """Close entries idle past the idle timeout (and dead ones no run holds); how many."""
        now = self._clock()
        closed = 0
        for entry in list(self._entries.values()):
            idle = entry.leases == 0 and now - entry.last_used >= self.limits.idle_s
            if idle or (entry.leases == 0 and not entry.alive() and entry.ready.done()):
                self.discard(entry)
                closed += 1
        return closed

    def _make_room(self, tenant_id: str) -> bool:
        """Evict the least recently used idle entries past the caps; False if none can go."""
        while True:
            mine = [e for e in self._entries.values() if e.tenant_id == tenant_id]
            if len(mine) < self.limits.per_tenant and len(self._entries) < self.limits.total:
                return True
            pool = mine if len(mine) >= self.limits.per_tenant else list(self._entries.values())
            idle = [e for e in pool if e.leases == 0]
            if not idle:
                return False
            self.discard(idle[0])  # the entries are kept in least recently used order

    def _open(self, key: PoolKey, server: McpServer, headers: dict[str, str]) -> PooledSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        entry = PooledSession(key, server, ready, asyncio.Event(), self._clock())
        entry.owner = asyncio.create_task(self._own(entry, headers), name=f"mcp-pool:{server.name}")
        self._entries[key] = entry
        self._start_sweeper()
        return entry

    async def _own(self, entry: PooledSession, headers: dict[str, str]) -> None:
        try:
            await self._holder(entry.server, headers, entry.ready, entry.stop)
        finally:
            entry.dead = True
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_now_and_then(), name="mcp-pool-sweep")

    async def _sweep_now_and_then(self) -> None:
        interval = max(1.0, min(60.0, self.limits.idle_s / 4))
        while self._entries:
            await asyncio.sleep(interval)
            self.sweep()

    async def close_idle(self) -> None:
        """Close every entry no run holds now, and wait until they are closed."""
        for entry in list(self._entries.values()):
            if entry.leases == 0:
                self.discard(entry)
        await self._closed()

    async def aclose(self) -> None:
        """At shutdown: close every pooled session (a bounded wait, then cancel)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        for entry in list(self._entries.values()):
            self.discard(entry)
        await self._closed()

    async def _closed(self) -> None:
        owners = [t for t in self._closing if not t.done()]
        if not owners:
            return
        _, pending = await asyncio.wait(owners, timeout=CLOSE_TIMEOUT_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_TIMEOUT_S)


async def _answers_ping(session: ClientSession) -> bool:
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            await session.send_ping()
    except Exception as exc:
        logger.info("pooled MCP session failed its ping: %s", failure_reason(exc))
        return False
    return True


async def hold(
    opener: Callable[[], contextlib.AbstractAsyncContextManager[ClientSession]],
    name: str,
    ready: asyncio.Future[ClientSession],
    stop: asyncio.Event,
) -> None:
    """Open a session, hand it over through `ready`, keep it open until `stop` (or until it
    fails); a failure to open is given to whoever waits on `ready`."""
    try:
        async with opener() as session:
            ready.set_result(session)
            await stop.wait()
    except BaseException as exc:
        if not ready.done():
            closed = RuntimeError("the session was closed before it was ready")
            ready.set_exception(exc if isinstance(exc, Exception) else closed)
            ready.exception()  # retrieved here: a waiter may be gone already
        if not isinstance(exc, Exception):
            raise
        logger.warning("MCP server %r: session ended: %s", name, failure_reason(exc))
