"""Per-tenant rate limits, concurrent-run caps and object-cap fences.

`TenantLimits` holds them in this process: the in-memory store's, or `LIMITS=local` (with N
replicas a tenant then gets up to N times the rates and the concurrency). `SharedLimits`
(app/limits/shared.py) holds them in MongoDB, exact across replicas. Services see
`Limits`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, defaultdict
from collections.abc import Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from app.errors import AppError

MAX_TRACKED_KEYS = 100_000


class TooManyRequestsError(AppError):
    status_code = 429

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message, headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))})


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """A token bucket per key: `per_minute` requests a minute, bursts up to `per_minute`."""

    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        what: str,
        per: str = "this tenant",
    ) -> None:
        self._per = per  # whose limit it is, as the 429 says
        self._capacity = float(per_minute)
        self._refill_per_s = per_minute / 60.0
        self._clock = clock
        self._what = what
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()  # least recently used first

    @property
    def enabled(self) -> bool:
        return self._capacity > 0

    def check(self, key: str) -> None:
        """Take one token for `key`, or raise 429 with the seconds until one is back."""
        if not self.enabled:
            return
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_TRACKED_KEYS:
                # Only reachable with that many tenants: the bucket used least recently goes
                # (one idle a minute or more is full again anyway), never all of them at once.
                self._buckets.popitem(last=False)
            bucket = self._buckets[key] = _Bucket(self._capacity, now)
        else:
            self._buckets.move_to_end(key)
            bucket.tokens = min(
                self._capacity, bucket.tokens + (now - bucket.updated) * self._refill_per_s
            )
            bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return
        raise TooManyRequestsError(
            f"Too many {self._what} for {self._per}: the limit is {int(self._capacity)} "
            "a minute. Retry after the time in Retry-After.",
            retry_after_s=(1 - bucket.tokens) / self._refill_per_s,
        )


class ConcurrencyLimiter:
    """At most `limit` chats at once per tenant; a slot is released exactly once."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._active: dict[str, int] = {}

    def active(self, key: str) -> int:
        return self._active.get(key, 0)

    @property
    def total(self) -> int:
        return sum(self._active.values())

    def acquire(self, key: str) -> Release:
        """Take a slot, or raise 429; returns the release function (idempotent)."""
        if self._limit > 0 and self._active.get(key, 0) >= self._limit:
            raise TooManyRequestsError(
                f"This tenant already has {self._limit} chats running "
                "(MAX_CONCURRENT_CHATS_PER_TENANT); retry when one has finished.",
                retry_after_s=1,
            )
        self._active[key] = self._active.get(key, 0) + 1

        def release() -> Awaitable[None]:
            remaining = self._active[key] - 1
            if remaining:
                self._active[key] = remaining
            else:
                del self._active[key]
            return WRITTEN

        return once(release)


# A slot's release function. Calling it frees the slot at once; awaiting what it returns waits
# until every replica can see the slot free (with shared limits: until the release is written,
# bounded by the check timeout), so a caller that answers only after `await release()` never
# sees its client's next request refused for a slot it has given back. Not awaiting it (a
# finalizer) still frees the slot; the write then happens in the background.
Release = Callable[[], Awaitable[None]]


class _Written:
    """An awaitable that is already done: a release with nothing left to write."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield


WRITTEN: Awaitable[None] = _Written()


def once(action: Release) -> Release:
    """`action` as a release function: it runs on the first call only."""
    done = False

    def release() -> Awaitable[None]:
        nonlocal done
        if done:
            return WRITTEN
        done = True
        return action()

    return release


# fence(tenant_id, what): held while counting and inserting `what`, so a cap holds exactly.
Fence = Callable[[str, str], AbstractAsyncContextManager[None]]


class Limits(Protocol):
    """What services ask of the limits, wherever they are counted."""

    async def admit_run(self, tenant_id: str) -> Release:
        """A chat or a tool invocation: one of the tenant's run tokens and one of its run slots
        (429 otherwise); returns the slot's release function (idempotent; `await release()`
        before answering the client, see `Release`)."""

    async def check_write(self, tenant_id: str) -> None:
        """One of the tenant's write tokens (429 otherwise)."""

    @property
    def fence(self) -> Fence:
        """Held while counting and inserting `what` (tools, secrets...): a cap holds exactly."""

    @property
    def active_runs(self) -> int:
        """Runs this process holds slots for."""


class TenantLocks:
    """One lock per key: a count-then-insert cap holds exactly within this process."""

    def __init__(self) -> None:
        self._locks: defaultdict[object, asyncio.Lock] = defaultdict(asyncio.Lock)

    def __call__(self, key: object) -> asyncio.Lock:
        return self._locks[key]


def local_fence() -> Fence:
    """A fence that holds within this process (the in-memory store, LIMITS=local)."""
    locks = TenantLocks()

    def fence(tenant_id: str, what: str) -> AbstractAsyncContextManager[None]:
        return locks((what, tenant_id))

    return fence


@dataclass(frozen=True)
class TenantLimits:
    """The limits counted in this process."""

    chats: RateLimiter
    writes: RateLimiter
    concurrent_chats: ConcurrencyLimiter
    fence: Fence = field(default_factory=local_fence)

    def admit_run_now(self, tenant_id: str) -> Release:
        self.chats.check(tenant_id)
        return self.concurrent_chats.acquire(tenant_id)

    async def admit_run(self, tenant_id: str) -> Release:
        return self.admit_run_now(tenant_id)

    async def check_write(self, tenant_id: str) -> None:
        self.writes.check(tenant_id)

    @property
    def active_runs(self) -> int:
        return self.concurrent_chats.total
