"""Shared limits on a real MongoDB-wire server: two SharedLimits on one database, two replicas."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pymongo.errors import PyMongoError

from app.limits import ConcurrencyLimiter, RateLimiter, Release, TenantLimits, TooManyRequestsError
from app.repositories.database import Database
from app.repositories.limits import LimitRepository
from app.services.shared_limits import SPARE_IDLE_S, SharedLimits
from tests.support.apps import make_settings
from tests.support.secantus import SecantusServer, free_port


class CountingRepository(LimitRepository):
    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.admits = 0
        self.syncs = 0

    async def admit(self, key: str, **kwargs: Any) -> Any:
        self.admits += 1
        return await super().admit(key, **kwargs)

    async def sync_lease(self, key: str, **kwargs: Any) -> None:
        self.syncs += 1
        await super().sync_lease(key, **kwargs)


Replica = Callable[..., SharedLimits]


@pytest.fixture
async def replica(secantus_server: SecantusServer) -> AsyncIterator[Replica]:
    """Makes replicas on one fresh database; all closed (and the database closed) after."""
    settings = make_settings(secantus_server.url, mongodb_database=f"t_{uuid.uuid4().hex[:10]}")
    made: list[tuple[SharedLimits, Database]] = []

    def make(
        *, chats: int = 0, writes: int = 0, cap: int = 0, lease_s: float = 15.0
    ) -> SharedLimits:
        database = Database.from_settings(settings)
        limits = SharedLimits(
            CountingRepository(database),
            chats_per_minute=chats,
            writes_per_minute=writes,
            max_concurrent=cap,
            lease_s=lease_s,
            fallback=local_limits(chats=chats, writes=writes, cap=cap),
        )
        limits.start()
        made.append((limits, database))
        return limits

    yield make
    for limits, database in made:
        await limits.aclose()
        await database.close()


def local_limits(*, chats: int, writes: int, cap: int) -> TenantLimits:
    return TenantLimits(
        chats=RateLimiter(chats, what="chats"),
        writes=RateLimiter(writes, what="writes"),
        concurrent_chats=ConcurrencyLimiter(cap),
    )


async def outcomes(*admissions: Any) -> tuple[list[Release], list[TooManyRequestsError]]:
    results = await asyncio.gather(*admissions, return_exceptions=True)
    granted = [r for r in results if callable(r)]
    refused = [r for r in results if isinstance(r, TooManyRequestsError)]
    assert len(granted) + len(refused) == len(results), results
    return granted, refused


def repository_of(limits: SharedLimits) -> CountingRepository:
    repository = limits._repository
    assert isinstance(repository, CountingRepository)
    return repository


async def test_a_rate_is_one_bucket_across_replicas(replica: Replica) -> None:
    a, b = replica(chats=5), replica(chats=5)
    granted = 0
    for attempt in range(12):  # interleaved, one at a time
        try:
            await (a if attempt % 2 else b).admit_run("acme")
            granted += 1
        except TooManyRequestsError as refused:
            assert refused.headers is not None
            assert 1 <= int(refused.headers["Retry-After"]) <= 12  # one token is 12 s
    assert granted == 5
    await a.admit_run("globex")  # another tenant has its own bucket


async def test_concurrent_runs_are_capped_across_replicas_and_come_back(replica: Replica) -> None:
    a, b = replica(cap=3), replica(cap=3)
    granted, refused = await outcomes(*(x.admit_run("acme") for x in [a, b] * 5))
    assert (len(granted), len(refused)) == (3, 7)
    assert "3 chats running" in refused[0].message
    granted[0]()
    granted[0]()  # a release counts once
    await asyncio.sleep(0.1)  # the release is written in the background
    again, _ = await outcomes(a.admit_run("acme"), b.admit_run("acme"))
    assert len(again) == 1


async def test_waiting_admissions_share_one_update(replica: Replica) -> None:
    a = replica(cap=5)
    granted, refused = await outcomes(*(a.admit_run("acme") for _ in range(40)))
    assert (len(granted), len(refused)) == (5, 35)
    assert repository_of(a).admits <= 3  # 40 admissions, one update (the first may go alone)
    for release in granted:
        release()
    await asyncio.sleep(0.1)
    assert repository_of(a).syncs <= 2  # five releases, written together
    assert a.active_runs == 0


async def test_a_dead_replicas_slots_come_back_after_its_lease(replica: Replica) -> None:
    a, b = replica(cap=2, lease_s=1.0), replica(cap=2, lease_s=1.0)
    await a.admit_run("acme")
    await a.admit_run("acme")
    await a.aclose()  # it stops renewing, as a killed process would; the slots stay taken
    with pytest.raises(TooManyRequestsError):
        await b.admit_run("acme")
    await asyncio.sleep(1.3)
    await b.admit_run("acme")


async def test_a_live_replica_keeps_its_slots_past_the_lease(replica: Replica) -> None:
    a, b = replica(cap=1, lease_s=1.0), replica(cap=1, lease_s=1.0)
    release = await a.admit_run("acme")
    await asyncio.sleep(2.5)  # renewed every lease/3
    with pytest.raises(TooManyRequestsError):
        await b.admit_run("acme")
    release()
    await asyncio.sleep(0.1)
    await b.admit_run("acme")


async def test_a_caller_that_leaves_gives_its_slot_back(replica: Replica) -> None:
    a = replica(cap=1)
    waiting = asyncio.create_task(a.admit_run("acme"))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await asyncio.sleep(0.1)
    await a.admit_run("acme")  # the slot the cancelled caller was granted (or not) is free


async def test_writes_have_their_own_shared_bucket(replica: Replica) -> None:
    a, b = replica(chats=1, writes=3), replica(chats=1, writes=3)
    for limits in (a, b, a):
        await limits.check_write("acme")
    with pytest.raises(TooManyRequestsError, match="3 a minute"):
        await b.check_write("acme")
    await a.admit_run("acme")  # chats are counted apart


async def test_a_fence_makes_count_then_insert_exact_across_replicas(replica: Replica) -> None:
    replicas = [replica(), replica(), replica()]
    stored: list[int] = []
    refused = 0

    async def create(limits: SharedLimits, number: int) -> None:
        nonlocal refused
        async with limits.fence("acme", "tools"):
            count = len(stored)
            await asyncio.sleep(0.005)  # the race window a count-then-insert has
            if count >= 4:
                refused += 1
                return
            stored.append(number)

    await asyncio.gather(*(create(replicas[n % 3], n) for n in range(15)))
    assert (len(stored), refused) == (4, 11)


async def test_without_the_database_a_replica_counts_on_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings(f"mongodb://127.0.0.1:{free_port()}/", mongodb_timeout_ms=200)
    database = Database.from_settings(settings)
    limits = SharedLimits(
        LimitRepository(database),
        chats_per_minute=2,
        writes_per_minute=1,
        max_concurrent=5,
        lease_s=15,
        fallback=local_limits(chats=2, writes=1, cap=5),
    )
    try:
        release = await limits.admit_run("acme")  # waits for the driver's timeout, once
        started = time.monotonic()
        await limits.admit_run("acme")
        assert time.monotonic() - started < 0.1  # then counts locally without waiting
        with pytest.raises(TooManyRequestsError):
            await limits.admit_run("acme")  # the local bucket of 2
        await limits.check_write("acme")
        with pytest.raises(TooManyRequestsError):
            await limits.check_write("acme")
        release()
        assert "counts on its own" in caplog.text
        with pytest.raises(PyMongoError):  # a create needs the database: 503 at the route
            async with limits.fence("acme", "tools"):
                pass
    finally:
        await limits.aclose()
        await database.close()


async def test_far_from_its_limits_a_busy_tenant_rarely_waits_for_the_database(
    replica: Replica,
) -> None:
    a = replica(chats=1_000_000, cap=10_000)
    for _ in range(20):
        releases = await asyncio.gather(*(a.admit_run("acme") for _ in range(16)))
        for release in releases:
            release()
    assert a.round_trips <= 20  # 320 runs; without spares, one update or more per batch
    assert a.active_runs == 0
    leases = await repository_of(a)._collection.find_one({"_id": "chats:acme"})
    assert [lease["r"] for lease in leases["l"]] == [a.replica]  # holding spares
    await asyncio.sleep(SPARE_IDLE_S + 0.3)  # idle: the spares go back
    leases = await repository_of(a)._collection.find_one({"_id": "chats:acme"})
    assert leases["l"] == []


async def test_spares_never_take_a_cap_past_its_limit(replica: Replica) -> None:
    a, b = replica(cap=200), replica(cap=200)  # two spares an update, eight kept free
    granted, _ = await outcomes(*(x.admit_run("acme") for x in [a, b] * 150))
    assert len(granted) <= 200
    assert len(granted) >= 200 - 2 * 2  # at most the other replica's spares stay unused
    for release in granted:
        release()
    await asyncio.sleep(SPARE_IDLE_S + 0.3)  # idle: spares and releases written back
    again, _ = await outcomes(*(x.admit_run("acme") for x in [a, b] * 150))
    assert 196 <= len(again) <= 200


async def test_spare_tokens_never_take_a_rate_past_its_limit(replica: Replica) -> None:
    a, b = replica(chats=1000), replica(chats=1000)  # ten spares an update
    started = time.monotonic()
    granted = 0
    for attempt in range(1300):
        try:
            (await (a if attempt % 2 else b).admit_run("acme"))()
            granted += 1
        except TooManyRequestsError:
            pass
    refilled = (time.monotonic() - started) * 1000 / 60 + 1
    assert 1000 - 2 * 10 <= granted <= 1000 + refilled
