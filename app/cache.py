"""A per-process cache for what every request reads (API keys, tool snapshots) that keeps the
database off the request path.

Before it, each entry's expiry sent every request in flight at that moment to the database (a
stampede: dozens of identical reads per process), each of them waited for the answer, and
when the database was busy (with run records, under load on several workers) the few whose
read passed MONGODB_TIMEOUT_MS answered 503 (trust issue, item 11). Here:

- concurrent misses share one read (single flight);
- **coherent entries** (`coherent`, given by caches whose source publishes change stamps: the
  tool catalog) change only when their source changes: while the stamps are being read
  (app/services/changes.py), an entry read after the watch began is fresh until `mark_stale`
  says otherwise, however old it is. A steadily used 2,000-tool catalog was rebuilt about once
  a second on the TTL alone (issue 49);
- otherwise, and for coherent caches whenever the stamps cannot be read, the TTL bounds how
  stale an entry may be: an entry past half its TTL is refreshed in the background while it is
  still served, so a steadily used entry never expires and a request never waits for the
  database; a change made elsewhere (another replica) is seen within the TTL, counted from
  when the entry's read started;
- an entry is served past its freshness only when refreshing it failed (the database is slow
  or down), and then for at most `stale_if_error_s` more (CACHE_STALE_IF_ERROR_S; Kong's
  `db_resurrect_ttl` is the same idea), or, whatever its age, during the first
  `stale_if_error_s` of an outage the circuit knows of (app/repositories/circuit.py: the read
  fails at once, and an idle tenant's entry still serves): the decision is `_serves_stale`,
  one method;
- `invalidate` drops an entry and detaches its read in flight, so a read that started before a
  local write is never stored; `mark_stale` detaches the read too but keeps the entry, expired,
  for stale-if-error (a tool edit: an outage right after it still serves the tenant; a rotated
  key or revoked token is dropped, never served stale);
- **bounded by age and size**: entries are kept in order of last use; one unused for `idle_s`
  is dropped, and past `max_entries` the least recently used one is, one at a time (a full
  cache used to be cleared whole: a cold storm for every tenant at once). Each drop is counted
  (`evicted`).
- `previous(key)` hands a read the value it replaces, so a reader can reuse what did not change
  (the catalog re-parses only the tools whose content changed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.errors import DatabaseUnavailable

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

logger = logging.getLogger(__name__)
WARN_EVERY_S = 10.0  # at most one "refresh failed" warning per cache in this interval
NEVER = float("inf")

# coherent(read_at): whether a change of the source made after `read_at` (the cache's clock)
# would be signalled to this cache (`mark_stale`), so an entry read then needs no TTL.
Coherence = Callable[[float], bool]


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    read_at: float  # when the read that produced it started
    used_at: float  # when a get last returned it
    stale_since: float = NEVER  # marked stale (a change) at this time
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
        idle_s: float = 0.0,
        coherent: Coherence | None = None,
        keep: Callable[[V], bool] = lambda _value: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`idle_s` > 0: an entry unused that long is dropped. `coherent`: see the module doc."""
        self._load = load
        self._clock = clock
        self._ttl_s = ttl_s
        self._stale_s = stale_if_error_s
        self._idle_s = idle_s
        self._coherent = coherent
        self._max_entries = max_entries
        self._name = name
        self._keep = keep
        self._entries: OrderedDict[K, _Entry[V]] = OrderedDict()  # least recently used first
        self._loading: dict[K, asyncio.Task[V]] = {}
        self._warned_at = -WARN_EVERY_S
        self.evicted = 0  # entries dropped for their age or the size bound

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: K) -> V:
        if self._ttl_s <= 0:  # caching off: every call reads
            return await self._load(key)
        now = self._clock()
        self._drop_idle(now)
        entry = self._entries.get(key)
        if entry is None:
            return await self._read(key)
        entry.used_at = now
        self._entries.move_to_end(key)
        expires = self._expiry(entry)
        if now < expires:
            if entry.refresh_failed or self._refresh_early(entry, now):
                self._refresh(key)
            return entry.value
        if entry.refresh_failed and self._serves_stale(entry, now):
            self._refresh(key)  # answered at once; the database is asked in the background
            return entry.value
        try:
            return await self._read(key)
        except Exception as exc:
            if self._serves_stale(entry, now, exc):  # the last value, within the grace
                entry.refresh_failed = True
                return entry.value
            raise

    def peek(self, key: K) -> V | None:
        """The value held for `key`, fresh or not, without reading or touching it."""
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def _expiry(self, entry: _Entry[V]) -> float:
        """When the entry stops being fresh: when it was marked stale, or, unless the source's
        changes reach this cache, its TTL after its read."""
        if self._coherent is not None and self._coherent(entry.read_at):
            return entry.stale_since
        return min(entry.stale_since, entry.read_at + self._ttl_s)

    def _refresh_early(self, entry: _Entry[V], now: float) -> bool:
        """A fresh entry past half its TTL is read again in the background (TTL-bound only)."""
        if entry.stale_since != NEVER:
            return False
        if self._coherent is not None and self._coherent(entry.read_at):
            return False
        return now - entry.read_at >= self._ttl_s / 2

    def _serves_stale(
        self, entry: _Entry[V], now: float, error: BaseException | None = None
    ) -> bool:
        """Whether an entry that is no longer fresh, and could not be read again (`error`), is
        served: for `stale_if_error_s` past the moment it stopped being fresh, or, whatever its
        age, while the outage circuit says the database went away less than that ago. The one
        decision of serving stale values."""
        early = error is not None and _early_in_outage(error, self._stale_s)
        return early or now < self._expiry(entry) + self._stale_s

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
            entry.stale_since = min(entry.stale_since, self._clock())
            entry.refresh_failed = False
        self._loading.pop(key, None)

    def previous(self, key: K) -> V | None:
        """The value a read of `key` replaces (for a loader that reuses what did not change)."""
        return self.peek(key)

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

    def _drop_idle(self, now: float) -> None:
        """Drop the least recently used entries unused for `idle_s` (oldest first: each get
        looks at the front only, so the cost follows the drops, not the size)."""
        if self._idle_s <= 0:
            return
        cutoff = now - self._idle_s
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.used_at >= cutoff:
                return
            del self._entries[key]
            self.evicted += 1

    async def _read(self, key: K) -> V:
        task = self._loading.get(key) or self._start(key)
        # A caller that goes away (client disconnect) leaves the read to the others.
        return await asyncio.shield(task)

    def _refresh(self, key: K) -> None:
        if key not in self._loading:
            self._start(key)

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
                self._store(key, value, started)
        return value

    def _store(self, key: K, value: V, started: float) -> None:
        old = self._entries.pop(key, None)
        used = old.used_at if old is not None else self._clock()
        self._entries[key] = _Entry(value, started, used)
        while len(self._entries) > self._max_entries:  # the least recently used goes
            self._entries.popitem(last=False)
            self.evicted += 1

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
                "up to %g s past their freshness meanwhile",
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
