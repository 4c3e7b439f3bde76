"""Per-tenant rate limits and concurrent-chat caps, held in this process.

With several replicas each keeps its own counts, so a tenant gets up to N times the rate and the
concurrency (README, "Limits"); exact global limits need a shared store (Redis, MongoDB).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

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
        self, per_minute: int, *, clock: Callable[[], float] = time.monotonic, what: str
    ) -> None:
        self._capacity = float(per_minute)
        self._refill_per_s = per_minute / 60.0
        self._clock = clock
        self._what = what
        self._buckets: dict[str, _Bucket] = {}

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
                self._buckets.clear()  # only reachable with that many tenants: forget, not grow
            bucket = self._buckets[key] = _Bucket(self._capacity, now)
        else:
            bucket.tokens = min(
                self._capacity, bucket.tokens + (now - bucket.updated) * self._refill_per_s
            )
            bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return
        raise TooManyRequestsError(
            f"Too many {self._what} for this tenant: the limit is {int(self._capacity)} "
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

    def acquire(self, key: str) -> Callable[[], None]:
        """Take a slot, or raise 429; returns the release function (idempotent)."""
        if self._limit > 0 and self._active.get(key, 0) >= self._limit:
            raise TooManyRequestsError(
                f"This tenant already has {self._limit} chats running "
                "(MAX_CONCURRENT_CHATS_PER_TENANT); retry when one has finished.",
                retry_after_s=1,
            )
        self._active[key] = self._active.get(key, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            remaining = self._active[key] - 1
            if remaining:
                self._active[key] = remaining
            else:
                del self._active[key]

        return release


class TenantLocks:
    """One lock per tenant: a count-then-insert cap holds exactly within this process."""

    def __init__(self) -> None:
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def __call__(self, tenant_id: str) -> asyncio.Lock:
        return self._locks[tenant_id]


@dataclass(frozen=True)
class TenantLimits:
    chats: RateLimiter
    writes: RateLimiter
    concurrent_chats: ConcurrencyLimiter

    def admit_run(self, tenant_id: str) -> Callable[[], None]:
        """A chat or a tool invocation: one of the tenant's run tokens and one of its run slots
        (429 otherwise); returns the slot's release function."""
        self.chats.check(tenant_id)
        return self.concurrent_chats.acquire(tenant_id)
