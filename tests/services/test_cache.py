"""The request-path cache (app/cache.py): one read for many callers, refreshed before it
expires, never served past its TTL unless the database cannot be read (trust issue, item 11)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pymongo.errors import NetworkTimeout

from app.cache import LoadingCache
from app.repositories.tenants import KeyOwner
from app.services.tenants import TenantService
from tests.support.clock import FakeClock
from tests.support.waiting import within


class Source:
    """A database read that can be held open, made to fail, and counted."""

    def __init__(self) -> None:
        self.value = "v1"
        self.reads = 0
        self.done = 0  # reads that returned a value
        self.gate: asyncio.Event | None = None
        self.error: Exception | None = None

    async def load(self, key: str) -> str:
        self.reads += 1
        value = self.value
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        self.done += 1
        return f"{key}:{value}"


def cache(
    source: Source, ttl_s: float, stale_if_error_s: float = 0.0, clock: FakeClock | None = None
) -> LoadingCache[str, str]:
    return LoadingCache(
        source.load,
        ttl_s=ttl_s,
        stale_if_error_s=stale_if_error_s,
        max_entries=100,
        name="test",
        clock=clock or FakeClock(),
    )


async def test_concurrent_misses_share_one_read() -> None:
    source = Source()
    source.gate = asyncio.Event()
    keys = cache(source, ttl_s=60)
    callers = [asyncio.create_task(keys.get("k")) for _ in range(50)]
    await within(lambda: source.reads == 1, 1)
    source.gate.set()
    assert await asyncio.gather(*callers) == ["k:v1"] * 50
    assert source.reads == 1  # before: one read per caller in flight (the stampede)


async def test_a_used_entry_is_refreshed_before_it_expires_without_waiting() -> None:
    source, clock = Source(), FakeClock()
    keys = cache(source, ttl_s=1.0, clock=clock)
    assert await keys.get("k") == "k:v1"
    clock.advance(0.6)  # past half the TTL
    source.value, source.gate = "v2", asyncio.Event()
    # Answered at once from the entry, while one background read starts.
    assert await asyncio.wait_for(keys.get("k"), 0.05) == "k:v1"
    assert await asyncio.wait_for(keys.get("k"), 0.05) == "k:v1"
    assert source.reads == 2
    source.gate.set()
    await within(lambda: source.done == 2, 1)  # the refresh is stored
    clock.advance(0.5)  # past the first read's TTL: the refreshed entry is served
    assert await asyncio.wait_for(keys.get("k"), 0.05) == "k:v2"


async def test_never_served_past_its_ttl_while_the_database_answers() -> None:
    source, clock = Source(), FakeClock()
    keys = cache(source, ttl_s=0.2, stale_if_error_s=60, clock=clock)
    await keys.get("k")
    source.value, source.gate = "v2", asyncio.Event()
    clock.advance(0.25)
    waiting = asyncio.create_task(keys.get("k"))
    await within(lambda: source.reads == 2, 1)
    assert not waiting.done()  # a slow read is waited for: the old value is too old
    source.gate.set()
    assert await waiting == "k:v2"


async def test_a_failed_refresh_serves_the_last_value_for_the_grace_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, clock = Source(), FakeClock()
    keys = cache(source, ttl_s=0.4, stale_if_error_s=1.0, clock=clock)
    await keys.get("k")
    source.error = NetworkTimeout("timed out")
    clock.advance(0.25)
    with caplog.at_level(logging.WARNING, logger="app.cache"):
        assert await keys.get("k") == "k:v1"  # starts a refresh, which fails
        await within(lambda: "could not refresh" in caplog.text, 1)
    assert "test: could not refresh from the database (NetworkTimeout)" in caplog.text
    clock.advance(0.25)  # past the TTL, within the grace: no wait, no error
    assert await asyncio.wait_for(keys.get("k"), 0.05) == "k:v1"
    clock.advance(1.0)  # past TTL + grace: the error shows
    with pytest.raises(NetworkTimeout):
        await keys.get("k")
    source.error = None  # the database is back: reads resume
    assert await keys.get("k") == "k:v1"


async def test_without_a_grace_an_expired_entry_is_never_served() -> None:
    source, clock = Source(), FakeClock()
    keys = cache(source, ttl_s=0.1, clock=clock)
    await keys.get("k")
    source.error = NetworkTimeout("timed out")
    clock.advance(0.15)
    with pytest.raises(NetworkTimeout):
        await keys.get("k")


async def test_invalidate_detaches_a_read_in_flight() -> None:
    source = Source()
    source.gate = asyncio.Event()
    keys = cache(source, ttl_s=60)
    before = asyncio.create_task(keys.get("k"))  # reads "v1", held open
    await within(lambda: source.reads == 1, 1)
    source.value = "v2"  # a local write...
    keys.invalidate("k")  # ...invalidates: the read in flight is neither joined nor stored
    after = asyncio.create_task(keys.get("k"))
    await within(lambda: source.reads == 2, 1)
    source.gate.set()
    assert await before == "k:v1" and await after == "k:v2"
    assert await keys.get("k") == "k:v2" and source.reads == 2


async def test_a_stale_entry_is_read_again_and_served_only_if_that_read_fails() -> None:
    source = Source()
    keys = cache(source, ttl_s=60, stale_if_error_s=30)
    await keys.get("k")
    source.value = "v2"  # a tool edit...
    keys.mark_stale("k")  # ...marks the entry stale: the next get reads the new value
    assert await keys.get("k") == "k:v2" and source.reads == 2
    keys.mark_stale("k")
    source.error = NetworkTimeout("timed out")  # the database goes away right after an edit
    assert await keys.get("k") == "k:v2"  # the last value, as stale-if-error serves any entry
    keys.invalidate("k")  # a rotated key is dropped: never served stale
    with pytest.raises(NetworkTimeout):
        await keys.get("k")


async def test_a_caller_that_leaves_does_not_cancel_the_shared_read() -> None:
    source = Source()
    source.gate = asyncio.Event()
    keys = cache(source, ttl_s=60)
    leaving = asyncio.create_task(keys.get("k"))
    staying = asyncio.create_task(keys.get("k"))
    await within(lambda: source.reads == 1, 1)
    leaving.cancel()
    source.gate.set()
    assert await staying == "k:v1"
    assert leaving.cancelled() and source.reads == 1


async def test_ttl_zero_reads_every_time() -> None:
    source = Source()
    keys = cache(source, ttl_s=0)
    await keys.get("k")
    await keys.get("k")
    assert source.reads == 2


class KeyRepository:
    """The tenants repository seam for key lookups."""

    def __init__(self) -> None:
        self.owner: str | None = "acme"
        self.reads = 0
        self.gate = asyncio.Event()

    async def find_by_key_hash(self, key_hash: str) -> KeyOwner | None:
        self.reads += 1
        owner = self.owner
        await self.gate.wait()
        return None if owner is None else KeyOwner(owner, CURRENT)


CURRENT = "2|one_database|current"


class CurrentTenants:
    """The reconciler seam: every tenant is current."""

    def listen(self, reconciled: object) -> None:
        pass

    def purge_with(self, purge: object) -> None:
        pass

    async def ensure_current(self, tenant_id: str, stamp: str | None, *, known: bool) -> None:
        assert stamp == CURRENT


def tenant_service(keys: KeyRepository, ttl_s: float, clock: FakeClock) -> TenantService:
    return TenantService(
        tenants=keys,  # type: ignore[arg-type]
        tools=None,  # type: ignore[arg-type]
        reconciler=CurrentTenants(),  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
        runs=None,  # type: ignore[arg-type]
        mcp_servers=None,  # type: ignore[arg-type]
        secrets=None,  # type: ignore[arg-type]
        key_secret=b"k" * 32,
        admin_key="admin",
        auth_cache_ttl_s=ttl_s,
        stale_if_error_s=30,
        clock=clock,
    )


async def test_one_key_lookup_for_a_burst_and_a_key_revoked_elsewhere_stops_working() -> None:
    keys, clock = KeyRepository(), FakeClock()
    service = tenant_service(keys, ttl_s=0.2, clock=clock)
    key = "tg_" + "a" * 43
    burst = [asyncio.create_task(service.tenant_for_key(key)) for _ in range(40)]
    await within(lambda: keys.reads == 1, 1)
    keys.gate.set()
    assert await asyncio.gather(*burst) == ["acme"] * 40
    assert keys.reads == 1
    keys.owner = None  # rotated on another replica
    clock.advance(0.25)
    assert await service.tenant_for_key(key) is None  # within the TTL, not later
    await service.aclose()


def coherent_cache(
    source: Source, clock: FakeClock, covered: list[float], **bounds: float
) -> LoadingCache[str, str]:
    """A cache whose source's changes reach it for entries read at or after `covered[0]`."""
    return LoadingCache(
        source.load,
        ttl_s=1.0,
        stale_if_error_s=5.0,
        max_entries=int(bounds.get("max_entries", 100)),
        idle_s=bounds.get("idle_s", 0.0),
        coherent=lambda read_at: bool(covered) and read_at >= covered[0],
        name="test",
        clock=clock,
    )


async def test_a_coherent_entry_is_kept_until_its_source_changes() -> None:
    source, clock = Source(), FakeClock()
    keys = coherent_cache(source, clock, [clock()])
    assert await keys.get("k") == "k:v1"
    clock.advance(3600)  # an hour past the TTL: no read, no background refresh
    source.value = "v2"
    assert await keys.get("k") == "k:v1"
    await asyncio.sleep(0)
    assert source.reads == 1
    keys.mark_stale("k")  # a change stamp moved
    assert await keys.get("k") == "k:v2" and source.reads == 2


async def test_the_ttl_bounds_entries_while_changes_cannot_reach_the_cache() -> None:
    source, clock = Source(), FakeClock()
    covered: list[float] = []  # the change stamps are not read (yet)
    keys = coherent_cache(source, clock, covered)
    await keys.get("k")
    source.value = "v2"
    clock.advance(1.5)
    assert await keys.get("k") == "k:v2"  # past the TTL: read again
    covered.append(clock() + 10)  # watching began after this entry's read: still the TTL
    source.value = "v3"
    clock.advance(1.5)
    assert await keys.get("k") == "k:v3"
    clock.advance(10)
    source.value = "v4"
    assert await keys.get("k") == "k:v4"  # read after the watch began: now it is kept
    clock.advance(100)
    source.value = "v5"
    assert await keys.get("k") == "k:v4"


async def test_entries_are_evicted_one_by_one_least_recently_used_first() -> None:
    source, clock = Source(), FakeClock()
    keys = coherent_cache(source, clock, [clock()], max_entries=3)
    for key in ("a", "b", "c"):
        await keys.get(key)
    await keys.get("a")  # used again: "b" is now the least recently used
    await keys.get("d")
    assert len(keys) == 3 and keys.evicted == 1
    assert keys.peek("b") is None and keys.peek("a") == "a:v1"
    reads = source.reads
    await keys.get("c")
    await keys.get("a")
    assert source.reads == reads  # the others stayed: no cold storm


async def test_entries_unused_for_the_idle_bound_are_dropped() -> None:
    source, clock = Source(), FakeClock()
    keys = coherent_cache(source, clock, [clock()], idle_s=60)
    await keys.get("old")
    clock.advance(50)
    await keys.get("recent")
    clock.advance(20)  # "old" unused for 70 s, "recent" for 20 s
    await keys.get("recent")
    assert keys.peek("old") is None and keys.peek("recent") == "recent:v1"
    assert keys.evicted == 1


async def test_a_stale_coherent_entry_serves_through_an_outage_for_the_grace_only() -> None:
    source, clock = Source(), FakeClock()
    keys = coherent_cache(source, clock, [clock()])
    await keys.get("k")
    keys.mark_stale("k")
    source.error = NetworkTimeout("timed out")
    assert await keys.get("k") == "k:v1"  # the read failed: the last value, within the grace
    clock.advance(3)
    assert await asyncio.wait_for(keys.get("k"), 0.05) == "k:v1"  # no wait for the database
    clock.advance(3)  # past the grace
    with pytest.raises(NetworkTimeout):
        await keys.get("k")
