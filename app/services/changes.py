"""Cache coherence across replicas: per-tenant change stamps in MongoDB, polled by every replica.

A write that changes what replicas cache for a tenant (its tools, keys, client tokens, outbound
allow list, the tenant itself) bumps the tenant's stamp in the `changes` collection: a version
and the database server's time. Every replica reads the stamps changed since its last read once
per CACHE_SYNC_INTERVAL_S, in one query whatever the number of tenants, and forgets what it
caches for each tenant whose stamp moved. So a change made on one replica is seen on every other
within about the interval, and requests never wait for the database. A replica's own bump is not
signalled back to it (the write already updated what it caches), unless another replica's change
may hide behind it: what a replica knew of a tenant stays known, through an outage too.

Change streams would push the same signal, but need a replica set (a standalone server refuses
them) and hold a cursor per replica; the poll works on every deployment, is one indexed query a
second, and the TTLs stay the bound when it cannot run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from app.errors import DatabaseError
from app.repositories.changes import ChangeStampRepository

logger = logging.getLogger(__name__)

# A stamp written just before a read may become visible just after it: every read looks this far
# back past the newest stamp seen (versions already seen are not signalled twice).
OVERLAP = timedelta(seconds=5)
PUBLISH_RETRIES_S = (0.2, 1.0, 3.0)
WARN_EVERY_S = 10.0
CLOSE_S = 3.0
# The stamps count as read (`covers`) while the last good read is at most this many intervals
# (plus the slack) old: a slow read or two does not send every cache back to its TTL.
STALE_AFTER_INTERVALS = 3
STALE_SLACK_S = 1.0
MAX_OWN = 10_000  # this replica's bumps remembered until a read of the stamps meets them

# publish(tenant_id): tell the other replicas that what they cache for the tenant changed.
Publish = Callable[[str], Awaitable[None]]


async def unpublished(tenant_id: str) -> None:
    """The in-memory store's publish: there are no other replicas."""


class ChangeFeed:
    def __init__(
        self,
        stamps: ChangeStampRepository,
        *,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stamps = stamps
        self._interval_s = interval_s
        self._clock = clock
        # On `clock`: when the first read of the stamps started (changes after it are all
        # signalled) and when the last read that succeeded started.
        self._watching_since: float | None = None
        self._last_read: float | None = None
        self._listeners: list[Callable[[str], None]] = []
        self._seen: dict[str, tuple[int, datetime]] = {}  # tenant -> (version, stamped at)
        # tenant -> (version, stamped at) of this replica's last bump, until a read meets it
        self._own: dict[str, tuple[int, datetime]] = {}
        self._newest: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self._retries: set[asyncio.Task[None]] = set()
        self._warned_at = -WARN_EVERY_S
        self._closing = False

    def covers(self, read_at: float) -> bool:
        """Whether every change made after `read_at` (on `clock`) reaches the listeners: the
        stamps have been read since before it, and were read successfully within the last
        intervals. Caches whose entries are covered keep them until a change says otherwise
        (app/kit/cache.py); otherwise their TTLs bound the staleness."""
        since, last = self._watching_since, self._last_read
        if since is None or last is None or read_at < since:
            return False
        return self._clock() - last <= STALE_AFTER_INTERVALS * self._interval_s + STALE_SLACK_S

    def listen(self, forget: Callable[[str], None]) -> None:
        """Call `forget(tenant_id)` for each tenant another replica changed."""
        self._listeners.append(forget)

    def start(self) -> None:
        if self._interval_s > 0:
            self._task = asyncio.create_task(self._poll_forever(), name="changes: poll")

    async def aclose(self) -> None:
        # The loops also stop on this flag (a database call is never cancelled halfway: its
        # task goes on to the driver's timeout), and the wait is bounded.
        self._closing = True
        tasks = [*self._retries, *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_S)

    async def publish(self, tenant_id: str) -> None:
        """Tell the other replicas (call after the write). If the database does not take the
        stamp now, it is retried in the background; meanwhile the TTLs bound the staleness."""
        try:
            self._bumped(tenant_id, await self._stamps.stamp(tenant_id=tenant_id))
        except DatabaseError as exc:
            self._warn("could not publish a change", exc)
            task = asyncio.create_task(self._retry(tenant_id), name="changes: publish")
            self._retries.add(task)
            task.add_done_callback(self._retries.discard)

    async def _retry(self, tenant_id: str) -> None:
        for delay in PUBLISH_RETRIES_S:
            await asyncio.sleep(delay)
            try:
                self._bumped(tenant_id, await self._stamps.stamp(tenant_id=tenant_id))
                return
            except DatabaseError:
                if self._closing:
                    return
        logger.warning(
            "changes: a change of tenant %s was not published; other replicas see it within "
            "their cache TTL",
            tenant_id,
        )

    def _bumped(self, tenant_id: str, stamp: tuple[int, datetime]) -> None:
        """Remember this replica's bump until a read of the stamps meets it."""
        self._own.pop(tenant_id, None)
        self._own[tenant_id] = stamp
        while len(self._own) > MAX_OWN:  # bumps no read met (none polls, or reads fail)
            del self._own[next(iter(self._own))]

    @staticmethod
    def _ours(
        own: tuple[int, datetime] | None,
        known: tuple[int, datetime] | None,
        read: tuple[int, datetime],
    ) -> bool:
        """Whether the stamp read is this replica's bump (the same version and time) and hides
        no other: it was the tenant's first stamp, or the one before it is the one seen here."""
        if own is None or own != read:
            return False
        return read[0] == 1 or (known is not None and known[0] == read[0] - 1)

    async def _poll_forever(self) -> None:
        while not self._closing:
            started = time.monotonic()
            try:
                await self.poll()
            except DatabaseError as exc:
                if self._closing:
                    return
                self._warn("could not read the change stamps", exc)
            await asyncio.sleep(max(0.0, self._interval_s - (time.monotonic() - started)))

    async def poll(self) -> list[str]:
        """One read of the stamps; forgets, and returns, the tenants that changed since the last.
        The first read only learns where the stamps stand (nothing is cached before it)."""
        started = self._clock()
        first = self._newest is None
        if first:
            newest = await self._stamps.newest_time()
            self._newest = newest or datetime(1970, 1, 1, tzinfo=UTC)
        assert self._newest is not None
        since = self._newest - OVERLAP
        changed = []
        for tenant_id, version, at in await self._stamps.since(since):
            known, own = self._seen.get(tenant_id), self._own.pop(tenant_id, None)
            if known != (version, at):  # a stamp recreated after its TTL has a new time
                self._seen[tenant_id] = (version, at)
                if not first and not self._ours(own, known, (version, at)):
                    changed.append(tenant_id)
            self._newest = max(self._newest, at)
        cutoff = self._newest - OVERLAP
        for tenant_id in [t for t, (_, at) in self._seen.items() if at < cutoff]:
            del self._seen[tenant_id]
        for tenant_id in changed:
            for forget in self._listeners:
                forget(tenant_id)
        if not first and self._watching_since is None:
            # The first read records versions without signalling them: a change made while it
            # ran may be among them. From the second read's start, every change is signalled.
            self._watching_since = started
        self._last_read = started
        return changed

    def _warn(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "changes: %s (%s); other replicas' changes are seen within the cache TTLs "
                "meanwhile",
                what,
                type(exc).__name__,
            )
