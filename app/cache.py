"""A per-process cache for what every request reads (API keys, tool snapshots) that keeps the
database off the request path.

Before it, each entry's expiry sent every request in flight at that moment to the database (a
stampede: dozens of identical reads per process), each of them waited for the answer, and
when the database was busy (with run records, under load on several workers) the few whose
read passed MONGODB_TIMEOUT_MS answered 503 (trust issue, item 11). Here:

- concurrent misses share one read (single flight);
- an entry past half its TTL is refreshed in the background while it is still served, so a
  steadily used entry never expires and a request never waits for the database;
- an entry is served past its TTL only when refreshing it failed (the database is slow or
  down), and then for at most `stale_if_error_s` more (CACHE_STALE_IF_ERROR_S; Kong's
  `db_resurrect_ttl` is the same idea), or, whatever its age, during the first
  `stale_if_error_s` of an outage the circuit knows of (app/repositories/circuit.py: the read
  fails at once); otherwise a change made elsewhere (another replica) is seen within the TTL,
  counted from when the entry's read started;
- `invalidate` drops an entry and detaches its read in flight, so a read that started before a
  local write is never stored; `mark_stale` detaches the read too but keeps the entry, expired,
  for stale-if-error (a tool edit: an outage right after it still serves the tenant; a rotated
  key or revoked token is dropped, never served stale).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.errors import DatabaseUnavailable

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

logger = logging.getLogger(__name__)
WARN_EVERY_S = 10.0  # at most one "refresh failed" warning per cache in this interval


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    read_at: float  # when the read that produced it started
    refresh_failed: bool = False


class LoadingCache(Generic[K, V]):
    def __init__(
        self,
        load: Callable[[K], Awaitable[V]],
        *,
        ttl_s: float,
        max_entries: int,
        name: str,
        stale_if_error_s: float = 0.0,
        keep: Callable[[V], bool] = lambda _value: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._clock = clock
        self._ttl_s = ttl_s
        self._stale_s = stale_if_error_s
        self._max_entries = max_entries
        self._name = name
        self._keep = keep
        self._entries: dict[K, _Entry[V]] = {}
        self._loading: dict[K, asyncio.Task[V]] = {}
        self._warned_at = -WARN_EVERY_S

    async def get(self, key: K) -> V:
        if self._ttl_s <= 0:  # caching off: every call reads
            return await self._load(key)
        entry = self._entries.get(key)
        if entry is None:
            return await self._read(key)
        age = self._clock() - entry.read_at
        if age < self._ttl_s or (entry.refresh_failed and age < self._ttl_s + self._stale_s):
            if age >= self._ttl_s / 2 and key not in self._loading:
                self._start(key)
            return entry.value
        try:
            return await self._read(key)
        except Exception as exc:
            # Within the grace, counted from the entry's expiry or from the outage's start:
            # the last value (an idle tenant's, too: the circuit answers at once).
            if age < self._ttl_s + self._stale_s or _early_in_outage(exc, self._stale_s):
                entry.refresh_failed = True
                return entry.value
            raise

    def invalidate(self, key: K) -> None:
        """Forget the entry; a read of it in flight is not stored and not joined any more."""
        self._entries.pop(key, None)
        self._loading.pop(key, None)

    def mark_stale(self, key: K) -> None:
        """The entry is out of date: the next get reads it again, but if that read fails (the
        database is away) the entry is served for `stale_if_error_s` from now, as an expired
        one would be. A read in flight is detached, as by `invalidate`."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.read_at = min(entry.read_at, self._clock() - self._ttl_s)
            entry.refresh_failed = False
        self._loading.pop(key, None)

    def invalidate_values(self, matches: Callable[[V], bool]) -> None:
        """Forget every entry whose value matches, and detach every read in flight (their
        values are not known yet)."""
        for key in [k for k, entry in self._entries.items() if matches(entry.value)]:
            del self._entries[key]
        self._loading.clear()

    async def aclose(self) -> None:
        """Cancel reads in flight (at shutdown)."""
        tasks = list(self._loading.values())
        self._loading.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self, key: K) -> V:
        task = self._loading.get(key) or self._start(key)
        # A caller that goes away (client disconnect) leaves the read to the others.
        return await asyncio.shield(task)

    def _start(self, key: K) -> asyncio.Task[V]:
        task = asyncio.create_task(self._fill(key), name=f"{self._name}: read")
        self._loading[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))
        return task

    async def _fill(self, key: K) -> V:
        started = self._clock()
        value = await self._load(key)
        # Stored only if no invalidation detached this read meanwhile.
        if self._loading.get(key) is asyncio.current_task():
            if not self._keep(value):
                self._entries.pop(key, None)
            else:
                if key not in self._entries and len(self._entries) >= self._max_entries:
                    self._entries.clear()
                self._entries[key] = _Entry(value, started)
        return value

    def _finished(self, key: K, task: asyncio.Task[V]) -> None:
        if self._loading.get(key) is task:
            del self._loading[key]
        if task.cancelled():
            return
        error = task.exception()  # retrieved here, so a refresh nobody awaited never warns
        if error is None:
            return
        entry = self._entries.get(key)
        if entry is not None:
            entry.refresh_failed = True
        now = self._clock()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "%s: could not refresh from the database (%s); cached entries are served for "
                "up to %g s past their TTL meanwhile",
                self._name,
                type(error).__name__,
                self._stale_s,
            )


def _early_in_outage(exc: BaseException, stale_s: float) -> bool:
    """The outage circuit (app/repositories/circuit.py) refused the read: the database has
    been down for less than `stale_s`, so whatever this process knew may still serve."""
    return (
        isinstance(exc, DatabaseUnavailable) and exc.outage_s is not None and exc.outage_s < stale_s
    )
