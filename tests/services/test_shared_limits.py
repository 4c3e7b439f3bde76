"""Shared limits on a real MongoDB-wire server: several SharedLimits on one database, as several
replicas, each on an injected clock (tests move time; nothing waits on the real clock)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from app.errors import DatabaseError, DatabaseUnavailable, ServiceUnavailableError
from app.limits import Release, TooManyRequestsError
from app.repositories.database import Database
from app.repositories.limits import Bucket, LimitRepository
from app.services.limit_shares import share_of
from app.services.shared_limits import SPARE_IDLE_S, SharedLimits
from tests.support.apps import make_settings
from tests.support.clock import FakeClock
from tests.support.secantus import SecantusServer, free_port
from tests.support.waiting import within


class CountingRepository(LimitRepository):
    """The real repository, counting its updates. `away`: the database cannot be reached
    ("down": nothing listens) or answers too late ("slow": past the check's timeout); `gate`
    holds lease writes until the test opens it."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.admits = 0
        self.syncs = 0
        self.away: str | None = None
        self.gate: asyncio.Event | None = None
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _answer(self) -> None:
        if self.away == "down":
            raise DatabaseUnavailable(unreachable=True)
        if self.away == "slow":
            raise DatabaseUnavailable(too_slow=True)

    async def admit(self, key: str, **kwargs: Any) -> Any:
        self.admits += 1
        self._answer()
        self.calls.append(("admit", kwargs))
        return await super().admit(key, **kwargs)

    async def sync_lease(self, key: str, **kwargs: Any) -> None:
        self.syncs += 1
        if self.gate is not None:
            await self.gate.wait()
        self._answer()
        self.calls.append(("sync", kwargs))
        await super().sync_lease(key, **kwargs)

    async def heartbeat(self, **kwargs: Any) -> list[str]:
        self._answer()
        return await super().heartbeat(**kwargs)


Replica = Callable[..., SharedLimits]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def replica(secantus_server: SecantusServer, clock: FakeClock) -> AsyncIterator[Replica]:
    """Makes replicas on one fresh database and one clock; all closed (and the database closed)
    after. Each has seen the others (its heartbeat) before it is handed out."""
    settings = make_settings(secantus_server.url, mongodb_database=f"t_{uuid.uuid4().hex[:10]}")
    made: list[tuple[SharedLimits, Database]] = []

    async def make(
        *, chats: int = 0, writes: int = 0, cap: int = 0, lease_s: float = 15.0
    ) -> SharedLimits:
        database = Database.from_settings(settings)
        limits = SharedLimits(
            CountingRepository(database),
            chats_per_minute=chats,
            writes_per_minute=writes,
            max_concurrent=cap,
            lease_s=lease_s,
            fallback_s=5.0,
            clock=clock,
        )
        made.append((limits, database))
        await limits.heartbeat()
        for earlier, _ in made:  # every replica sees every other
            await earlier.heartbeat()
        return limits

    yield make
    for limits, database in made:
        await limits.aclose()
        await database.close()


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
    a, b = await replica(chats=5), await replica(chats=5)
    granted = 0
    for attempt in range(12):  # interleaved, one at a time
        try:
            await (a if attempt % 2 else b).admit_run("acme")
            granted += 1
        except TooManyRequestsError as refused:
            assert refused.headers is not None
            assert refused.headers["Retry-After"] == "12"  # one token is 12 s; time stands still
    assert granted == 5
    await a.admit_run("globex")  # another tenant has its own bucket


async def test_concurrent_runs_are_capped_across_replicas_and_come_back(replica: Replica) -> None:
    a, b = await replica(cap=3), await replica(cap=3)
    granted, refused = await outcomes(*(x.admit_run("acme") for x in [a, b] * 5))
    assert (len(granted), len(refused)) == (3, 7)
    assert "3 chats running" in refused[0].message
    await granted[0]()  # done once the release is written
    await granted[0]()  # a release counts once
    again, _ = await outcomes(a.admit_run("acme"), b.admit_run("acme"))
    assert len(again) == 1


async def test_a_released_slot_is_free_on_every_replica_once_its_release_is_awaited(
    replica: Replica,
) -> None:
    """Issue 26, item 4: the client's next request, on another replica, right after the answer."""
    a, b = await replica(cap=1), await replica(cap=1)
    for turn in range(10):
        first, second = (a, b) if turn % 2 else (b, a)
        release = await first.admit_run("acme")
        await release()
        (await second.admit_run("acme"))()  # never "already has 1 chats running"
        await second.maintain()  # ... whose release is written by housekeeping here


async def test_a_release_waits_for_its_write_and_no_longer(replica: Replica) -> None:
    a = await replica(cap=2)
    release = await a.admit_run("acme")
    gate = repository_of(a).gate = asyncio.Event()
    written = asyncio.ensure_future(release())
    await asyncio.sleep(0)  # the write has started and waits at the gate
    assert not written.done()
    assert a.active_runs == 0  # the slot is free in this replica at once
    gate.set()
    await written
    lease = await repository_of(a)._collection.find_one({"_id": "chats:acme"})
    assert lease["l"] == []


async def test_waiting_admissions_share_one_update(replica: Replica) -> None:
    a = await replica(cap=5)
    granted, refused = await outcomes(*(a.admit_run("acme") for _ in range(40)))
    assert (len(granted), len(refused)) == (5, 35)
    assert repository_of(a).admits <= 3  # 40 admissions, one update (the first may go alone)
    await asyncio.gather(*(release() for release in granted))
    assert repository_of(a).syncs <= 2  # five releases, written together
    assert a.active_runs == 0


async def test_a_dead_replicas_slots_come_back_after_its_lease(
    replica: Replica, clock: FakeClock
) -> None:
    a, b = await replica(cap=2, lease_s=1.0), await replica(cap=2, lease_s=1.0)
    await a.admit_run("acme")
    await a.admit_run("acme")
    # `a` stops renewing, as a killed process would; the slots stay taken until its lease ends.
    with pytest.raises(TooManyRequestsError):
        await b.admit_run("acme")
    clock.advance(0.9)
    with pytest.raises(TooManyRequestsError):
        await b.admit_run("acme")
    clock.advance(0.2)
    await b.admit_run("acme")


async def test_a_live_replica_keeps_its_slots_past_the_lease(
    replica: Replica, clock: FakeClock
) -> None:
    a, b = await replica(cap=1, lease_s=1.0), await replica(cap=1, lease_s=1.0)
    release = await a.admit_run("acme")
    for _ in range(8):  # 2.5 s, housekeeping every 0.3 s renews every lease/3
        clock.advance(0.3)
        await a.maintain()
    with pytest.raises(TooManyRequestsError):
        await b.admit_run("acme")
    await release()
    await b.admit_run("acme")


async def test_a_caller_that_leaves_gives_its_slot_back(replica: Replica) -> None:
    a = await replica(cap=1)
    waiting = asyncio.create_task(a.admit_run("acme"))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await a.admit_run("acme")  # the slot the cancelled caller was granted (or not) is free


async def test_writes_have_their_own_shared_bucket(replica: Replica) -> None:
    a, b = await replica(chats=1, writes=3), await replica(chats=1, writes=3)
    for limits in (a, b, a):
        await limits.check_write("acme")
    with pytest.raises(TooManyRequestsError, match="3 a minute"):
        await b.check_write("acme")
    await a.admit_run("acme")  # chats are counted apart


async def test_a_fence_makes_count_then_insert_exact_across_replicas(replica: Replica) -> None:
    replicas = [await replica(), await replica(), await replica()]
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


async def test_far_from_its_limits_a_busy_tenant_rarely_waits_for_the_database(
    replica: Replica, clock: FakeClock
) -> None:
    a = await replica(chats=1_000_000, cap=10_000)
    for _ in range(20):
        releases = await asyncio.gather(*(a.admit_run("acme") for _ in range(16)))
        for release in releases:
            await release()
    assert a.round_trips <= 20  # 320 runs; without spares, one update or more per batch
    assert a.active_runs == 0
    leases = await repository_of(a)._collection.find_one({"_id": "chats:acme"})
    assert [lease["r"] for lease in leases["l"]] == [a.replica]  # holding spares
    clock.advance(SPARE_IDLE_S)  # idle: the spares go back
    await a.maintain()
    leases = await repository_of(a)._collection.find_one({"_id": "chats:acme"})
    assert leases["l"] == []


async def test_spares_never_take_a_cap_past_its_limit(replica: Replica, clock: FakeClock) -> None:
    a, b = await replica(cap=200), await replica(cap=200)  # two spares an update, eight kept free
    granted, _ = await outcomes(*(x.admit_run("acme") for x in [a, b] * 150))
    assert len(granted) <= 200
    assert len(granted) >= 200 - 2 * 2  # at most the other replica's spares stay unused
    await asyncio.gather(*(release() for release in granted))
    clock.advance(SPARE_IDLE_S)  # idle: spares and releases written back
    await a.maintain()
    await b.maintain()
    again, _ = await outcomes(*(x.admit_run("acme") for x in [a, b] * 150))
    assert 196 <= len(again) <= 200


async def test_spare_tokens_never_take_a_rate_past_its_limit(replica: Replica) -> None:
    a, b = await replica(chats=1000), await replica(chats=1000)  # ten spares an update
    granted = 0
    for attempt in range(1300):
        try:
            await (await (a if attempt % 2 else b).admit_run("acme"))()
            granted += 1
        except TooManyRequestsError:
            pass
    assert 1000 - 2 * 10 <= granted <= 1000  # time stands still: nothing refills


# Issue 26, item 3: while the database does not answer, a replica admits at most its share.


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 4, 7, 8, 60, 1000])
@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_the_shares_add_up_to_the_limit(limit: int, count: int) -> None:
    replicas = [f"r{n}" for n in range(count)]
    shares = [share_of(limit, replicas, replica) for replica in replicas]
    assert sum(shares) == limit
    assert max(shares) - min(shares) <= 1
    assert share_of(limit, [], "alone") == limit  # never more than the whole


async def renewals_written(limits: SharedLimits) -> None:
    """The lease writes `maintain` started while alone have reached the database: one yield
    is not enough on a busy machine (b's admissions then overtook a's renewal)."""
    workers = [t.worker for t in limits._tenants.values() if t.worker is not None]
    assert workers, "no renewal was started"
    await asyncio.wait(workers)


async def away(*replicas: SharedLimits, how: str = "down") -> None:
    for limits in replicas:
        repository_of(limits).away = how


async def back(clock: FakeClock, *replicas: SharedLimits) -> None:
    """The database answers again; past the fallback window each replica writes what it did."""
    clock.advance(5.0)
    for limits in replicas:
        repository_of(limits).away = None
        await limits.maintain()


@pytest.mark.parametrize(("cap", "expected"), [(4, [2, 1, 1]), (2, [1, 1, 0]), (9, [3, 3, 3])])
async def test_replicas_alone_admit_their_shares_of_a_cap_and_no_more(
    replica: Replica, cap: int, expected: list[int]
) -> None:
    replicas = [await replica(cap=cap) for _ in range(3)]
    await away(*replicas)
    admitted = []
    for limits in sorted(replicas, key=lambda limits: limits.replica):
        granted, refused = await outcomes(*(limits.admit_run("acme") for _ in range(5)))
        admitted.append(len(granted))
        assert all("its share" in refusal.message for refusal in refused)
    assert admitted == expected  # the first in id order take the rest of the division


async def test_a_replica_alone_holds_its_share_of_the_tokens_it_last_saw_and_refills_at_its_share(
    replica: Replica, clock: FakeClock
) -> None:
    a, b, c = [await replica(chats=30) for _ in range(3)]  # 10 a minute each, alone
    for _ in range(3):
        await a.admit_run("acme")  # a last saw 27 tokens left; b and c never saw the tenant
    await away(a, b, c)
    first, _ = await outcomes(*(a.admit_run("acme") for _ in range(20)))
    assert len(first) == 9  # its share of 27: the bucket does not start full
    for limits in (b, c):
        with pytest.raises(TooManyRequestsError, match="share") as refused:
            await limits.admit_run("acme")  # nothing seen: nothing to share
        assert refused.value.headers == {"Retry-After": "6"}
    clock.advance(6.0)
    for limits in (a, b, c):
        await limits.admit_run("acme")  # one token each in 6 s
    clock.advance(600.0)  # a bucket holds at most its share
    granted = [len((await outcomes(*(x.admit_run("acme") for _ in range(20))))[0]) for x in (a,)]
    assert granted == [10]


async def test_what_a_replica_admitted_alone_goes_into_the_shared_counts(
    replica: Replica, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await replica(chats=60, cap=4), await replica(chats=60, cap=4)
    await away(a)
    with pytest.raises(TooManyRequestsError):
        await a.admit_run("acme")  # alone from here, with no tokens yet
    clock.advance(4.0)  # a's share: 30 a minute, two slots; two tokens refilled in 4 s
    alone, _ = await outcomes(*(a.admit_run("acme") for _ in range(3)))
    assert len(alone) == 2
    await back(clock, a)
    assert "counted on its own for 9.0 s" in caplog.text
    assert "admitted 2 run(s)" in caplog.text
    # b sees a's two runs in the lease: two slots of four are left.
    shared, _ = await outcomes(*(b.admit_run("acme") for _ in range(4)))
    assert len(shared) == 2
    # And a's two tokens were charged: the bucket of 60 (full again) gives 58 more, minus b's 2.
    await asyncio.gather(*(release() for release in [*alone, *shared]))
    tokens = 0
    for _ in range(70):
        try:
            await (await b.admit_run("acme"))()
            tokens += 1
        except TooManyRequestsError:
            break
    assert tokens == 60 - 2 - 2


async def test_writes_alone_are_a_share_and_are_charged_when_it_answers(
    replica: Replica, clock: FakeClock
) -> None:
    a, b = await replica(writes=6), await replica(writes=6)  # 3 a minute each alone
    await away(a)
    with pytest.raises(ServiceUnavailableError, match="share") as refused:
        await a.check_write("acme")  # a write needs the database, which is away: 503
    assert refused.value.headers == {"Retry-After": "20"}
    clock.advance(40.0)  # two tokens of a's share
    await a.check_write("acme")
    await a.check_write("acme")
    with pytest.raises(ServiceUnavailableError):
        await a.check_write("acme")
    await back(clock, a)  # charged: the shared bucket (full) gives 6 - 2
    for _ in range(4):
        await b.check_write("acme")
    with pytest.raises(TooManyRequestsError, match="6 a minute"):
        await b.check_write("acme")


async def test_alone_a_release_does_not_wait_for_the_database(replica: Replica) -> None:
    a = await replica(cap=2)
    release = await a.admit_run("acme")
    await away(a)
    await a.admit_run("other")  # its check fails: alone for the fallback window
    syncs = repository_of(a).syncs
    await release()  # does not wait on the database
    assert repository_of(a).syncs == syncs


async def test_a_replica_that_never_reached_the_database_is_its_own_share() -> None:
    settings = make_settings(f"mongodb://127.0.0.1:{free_port()}/", mongodb_timeout_ms=200)
    database = Database.from_settings(settings)
    limits = SharedLimits(
        LimitRepository(database, check_timeout_s=0.2),
        chats_per_minute=0,
        writes_per_minute=0,
        max_concurrent=2,
        lease_s=15,
    )
    try:
        await limits.admit_run("acme")  # waits for the check's timeout, once
        await limits.admit_run("acme")  # then counts alone, without waiting
        with pytest.raises(TooManyRequestsError):
            await limits.admit_run("acme")
        with pytest.raises(DatabaseError):  # a create needs the database: 503 at the route
            async with limits.fence("acme", "tools"):
                pass
    finally:
        await limits.aclose()
        await database.close()


async def test_a_slow_database_still_counts_for_the_others_so_a_slow_replica_takes_only_its_own(
    replica: Replica, clock: FakeClock
) -> None:
    """The check timed out, but the database answers the other replicas: a slow replica reuses
    only the slots its live lease there holds for it (at most its share), and none once that
    lease has run out, however long it stays slow (before: its share on top of the others')."""
    a, b = await replica(cap=4, lease_s=15.0), await replica(cap=4, lease_s=15.0)
    first = [await a.admit_run("acme") for _ in range(3)]  # the database counts 3 for a
    await away(a, how="slow")
    await first[0]()  # not written: the database still counts it for a
    await first[1]()
    reused, refused = await outcomes(*(a.admit_run("acme") for _ in range(3)))
    assert len(reused) == 1  # its share is 2 (of 4, two replicas): 1 held + 1 reused
    assert "its share" in refused[0].message
    new, _ = await outcomes(*(a.admit_run("globex") for _ in range(3)))
    assert new == []  # nothing counted for it there: b may be granting all four
    shared, _ = await outcomes(*(b.admit_run("acme") for _ in range(4)))
    assert len(shared) == 1  # a's three still count: never more than 4 in flight
    clock.advance(15.0)  # a's lease has run out there: b may grant all four again
    later, _ = await outcomes(*(a.admit_run("globex") for _ in range(3)))
    assert later == []
    assert len((await outcomes(*(b.admit_run("globex") for _ in range(5))))[0]) == 4


async def test_a_slow_replica_takes_no_token_it_was_not_granted(
    replica: Replica, clock: FakeClock
) -> None:
    """A rate while the database is slow for one replica: the others are still granted the
    whole bucket, so the slow one admits nothing of its own (before: its share on top)."""
    a, b = await replica(chats=30), await replica(chats=30)
    await a.admit_run("acme")  # a has seen the bucket: 29 left
    await away(a, how="slow")
    (refused,) = (await outcomes(a.admit_run("acme")))[1]
    assert "too slowly" in refused.message and refused.headers == {"Retry-After": "1"}
    clock.advance(10.0)  # still slow, tokens refilled: still none taken alone
    assert (await outcomes(*(a.admit_run("acme") for _ in range(5))))[0] == []
    granted, _ = await outcomes(*(b.admit_run("acme") for _ in range(40)))
    assert len(granted) == 30  # the bucket is b's alone: a took one, 10 s refilled it to full


async def test_a_lease_write_applied_late_never_overwrites_a_newer_one(
    replica: Replica, clock: FakeClock
) -> None:
    """A write that timed out can still reach the database after the replica's next one (the
    server had it queued): it matches nothing, so the newer, larger count stands (before: the
    stale count replaced it, and the other replicas granted those slots again)."""
    a, b = await replica(cap=4), await replica(cap=4)
    repository = repository_of(a)
    key, now_ms = "chats:acme", clock() * 1000
    common = {"replica": a.replica, "now_ms": now_ms, "lease_ms": 15_000.0}
    await repository.sync_lease(key, held=3, write=2, **common)  # the newer write: 3 held
    with pytest.raises(DatabaseError):
        await repository.sync_lease(key, held=0, write=1, **common)  # the stale one, late
    with pytest.raises(DatabaseError):
        await repository.admit(key, want=4, bucket=Bucket(0.0, 0), cap=4, held=0, write=1, **common)
    granted, _ = await outcomes(*(b.admit_run("acme") for _ in range(4)))
    assert len(granted) == 1  # a's three still count


async def test_a_slow_replica_keeps_renewing_the_leases_of_its_runs_in_progress(
    replica: Replica, clock: FakeClock
) -> None:
    """Slow for one replica, the database still counts for the others: a replica alone keeps
    trying to renew the leases of the runs it holds at every round of housekeeping, so one
    answer in time keeps them counted (before: no try while alone, one every fallback window,
    and a lease could lapse under runs still in flight, their slots granted again)."""
    a, b = await replica(cap=4, lease_s=15.0), await replica(cap=4, lease_s=15.0)
    held = [await a.admit_run("acme") for _ in range(3)]  # a's lease there: 3, until t + 15
    await away(a, how="slow")
    clock.advance(8.0)
    await a.maintain()  # its heartbeat times out: alone until t + 13
    clock.advance(4.0)  # t + 12: the database answers a again, while a is still alone
    repository_of(a).away = None
    await a.maintain()
    await renewals_written(a)
    clock.advance(4.0)  # t + 16: past the first lease
    shared, _ = await outcomes(*(b.admit_run("acme") for _ in range(4)))
    assert len(shared) == 1  # a's three runs are still counted
    await asyncio.gather(*(release() for release in [*held, *shared]))


async def test_while_a_lease_write_is_in_flight_a_slow_replica_admits_only_what_it_will_count(
    replica: Replica,
) -> None:
    """A lease write sets the lease to the runs held when it was sent: a replica that turned
    slow (another tenant's check timed out) while one is in flight admits nothing on the older,
    larger count, or the write lands and leaves those runs uncounted (before: one admitted here,
    then b granted four: 5 in flight against a cap of 4, as measured with three replicas and
    database writers in tests/test_limit_processes.py)."""
    a, b = await replica(cap=4), await replica(cap=4)
    first = [await a.admit_run("acme") for _ in range(2)]  # a's lease there: 2
    repository = repository_of(a)
    repository.gate = asyncio.Event()
    written = [release() for release in first]  # the lease write (0 held) waits at the gate
    await within(lambda: repository.syncs == 1, 5)
    await away(a, how="slow")
    assert (await outcomes(a.admit_run("globex")))[0] == []  # timed out: a is alone, slow
    repository.away = None
    while_in_flight, refused = await outcomes(*(a.admit_run("acme") for _ in range(2)))
    assert while_in_flight == [] and "its share" in refused[0].message
    repository.gate.set()  # the write lands: the database counts 0 runs for a
    await asyncio.wait_for(asyncio.gather(*written), 5)
    shared, _ = await outcomes(*(b.admit_run("acme") for _ in range(5)))
    assert len(shared) == 4
