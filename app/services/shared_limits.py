"""Limits counted in MongoDB: exact across every replica on the database (LIMITS=shared).

- **Rates** are token buckets in per-tenant documents (app/repositories/limits.py), each check
  one atomic `find_one_and_update`.
- **Concurrent runs** are leases: each replica keeps its count of runs held in the tenant's
  document and renews it every `lease_s / 3`; a replica that dies stops renewing, and its slots
  come back when its lease expires (CHAT_LEASE_S).
- **Object caps** are fenced: a create counts and inserts while holding a short per-tenant lease
  document, so creates racing on different replicas cannot overrun the cap.

What it costs, and how that is kept down (docs/replicas.md, "Shared limits"):
- The admissions waiting for one tenant in this process go to the database together: one update
  grants several, first come first served.
- A tenant whose limits are at least 100 (a minute, and at once) gets spares: an update sets
  aside up to 1% of the limit (SPARE_MAX at most) in tokens and slots for this replica, while at
  least HEADROOM times that many stay free for the others, and the next admissions take them
  without a round trip. A finished run's slot goes back to the spares. Spares not used within
  SPARE_IDLE_S go back to the database. Near a limit nothing is set aside and every admission is
  one exact update: the limits are never exceeded; at worst a replica refuses while another
  still holds a few spares (for at most SPARE_IDLE_S after that one's last run).
- Releases with no spares (limits of less than 100) are written at once, and the release's
  awaitable is done when they are: a caller that answers after `await release()` has its slot
  free on every replica before its client can ask again.

When the database does not answer a check (within LIMITS_CHECK_TIMEOUT_S), this process counts
on its own for LIMITS_FALLBACK_S without asking again: at most its share of each limit
(app/services/limit_shares.py), written into the shared counts when the database answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.errors import DatabaseError, DatabaseUnavailable, ServiceUnavailableError
from app.limits import WRITTEN, Fence, Release, TooManyRequestsError, once
from app.repositories.limits import Bucket, Grant, LimitRepository
from app.services.limit_shares import Alone, SeenTokens, ShareBucket, share_of
from app.services.shared_fence import shared_fence
from app.services.shared_writes import SharedWrites

logger = logging.getLogger(__name__)

SPARE_MAX = 128  # tokens and slots one update may set aside for this replica
SPARE_PER = 100  # ... one for each this many of the limit (none below it)
HEADROOM = 4  # ... while this many times as many stay free for the other replicas
SPARE_IDLE_S = 0.5  # spares unused this long go back
TICK_S = 0.25  # how often leases, idle spares and writes left behind are looked at
CLOSE_S = 3.0  # at shutdown, spares are given back within this
DOWN_S = 5.0  # after the database failed a check, count alone this long (LIMITS_FALLBACK_S)


@dataclass
class _Tenant:
    """One tenant's runs in this process. The database counts `held + spare_slots` for it."""

    held: int = 0  # runs in progress
    spare_slots: int = 0  # with no spares kept (limits under 100): releases not yet written
    spare_tokens: int = 0
    charge: int = 0  # tokens taken alone, not yet charged to the shared bucket
    alone: ShareBucket | None = None  # the tokens it may take alone
    waiting: list[asyncio.Future[Release]] = field(default_factory=list)
    unwritten: list[asyncio.Future[None]] = field(default_factory=list)  # awaited releases
    worker: asyncio.Task[None] | None = None
    sync: bool = False  # write the lease (renew it, write releases, give spares back)
    last_used: float = 0.0
    written_at: float = 0.0  # the last lease write that went through ...
    counted: int = 0  # ... and at least what the database counts for this replica since

    @property
    def empty(self) -> bool:
        return not (
            self.held
            or self.spare_slots
            or self.spare_tokens
            or self.charge
            or self.alone  # refilling while this replica counts alone
            or self.waiting
            or self.unwritten
        )


class SharedLimits:
    def __init__(
        self,
        repository: LimitRepository,
        *,
        chats_per_minute: int,
        writes_per_minute: int,
        max_concurrent: int,
        lease_s: float,
        fallback_s: float = DOWN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: seconds since the epoch, the same on every replica (NTP)."""
        self._repository = repository
        self._chats = Bucket.per_minute(chats_per_minute)
        self._writes = Bucket.per_minute(writes_per_minute)
        self._cap = max_concurrent
        self._lease_s = lease_s
        self._clock = clock
        self.replica = uuid.uuid4().hex[:16]  # a new one each start: a dead process's lease
        self._spare = min(
            SPARE_MAX,
            chats_per_minute // SPARE_PER if chats_per_minute else SPARE_MAX,
            max_concurrent // SPARE_PER if max_concurrent else SPARE_MAX,
        )
        self._tenants: dict[str, _Tenant] = {}
        self._alone = Alone(window_s=fallback_s, clock=clock, unreachable=unreachable)
        self._seen = SeenTokens()
        self.replicas: tuple[str, ...] = ()  # the live replicas last seen (shares)
        self._heartbeat_at = float("-inf")
        self._writes_rate = SharedWrites(
            repository,
            bucket=self._writes,
            replica=self.replica,
            alone=self._alone,
            share=self._share,
            clock=clock,
        )
        self.fence: Fence = shared_fence(repository, failed=self._alone.failed, clock=clock)
        self._ticker: asyncio.Task[None] | None = None
        self._closing = False
        self.round_trips = 0  # admission and lease updates (tests, the benchmark)
        self._writes_sent = 0  # numbers each lease write: a late, stale one changes nothing

    @property
    def active_runs(self) -> int:
        return sum(t.held for t in self._tenants.values())

    @property
    def _lease_ms(self) -> float:
        return self._lease_s * 1000

    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_forever(), name="limits: housekeeping")

    async def aclose(self) -> None:
        logger.info("shared limits: %d database round trips", self.round_trips)
        # The loops also stop on this flag, and every wait here is bounded; a database call is
        # never cancelled halfway (its task goes on to the driver's timeout).
        self._closing = True
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.wait([self._ticker], timeout=CLOSE_S)
        workers = [t.worker for t in self._tenants.values() if t.worker is not None]
        if workers:
            await asyncio.wait(workers, timeout=CLOSE_S)
        spares = [
            self._sync(tenant_id, tenant)
            for tenant_id, tenant in list(self._tenants.items())
            if tenant.spare_slots or tenant.spare_tokens or tenant.charge
        ]
        # Give the spares back: one try, bounded; what is left expires with the lease.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*spares, return_exceptions=True), CLOSE_S)

    # Housekeeping.

    async def _tick_forever(self) -> None:
        while not self._closing:
            await self.maintain()
            await asyncio.sleep(TICK_S)

    async def maintain(self) -> None:
        """One round of housekeeping (every TICK_S): this replica's heartbeat; leases to renew,
        idle spares to give back and what was admitted alone, written (not while alone)."""
        if self._chats.interval_ms <= 0 and self._cap <= 0 and self._writes.interval_ms <= 0:
            return
        now = self._clock()
        if self._alone.active:
            if self._alone.slow:  # still counting for the others: keep held runs counted
                self._renew_held(now)
            return
        if now - self._heartbeat_at >= self._lease_s / 3:
            await self.heartbeat()
        for tenant_id, tenant in list(self._tenants.items()):
            if tenant.empty and tenant.worker is None:  # refused alone: nothing to keep
                del self._tenants[tenant_id]
            elif self._due(tenant, now):
                tenant.sync = True
                self._wake(tenant_id, tenant)
        workers = [t.worker for t in self._tenants.values() if t.worker is not None]
        if workers:  # a busy tenant's worker may go on: wait a bounded time
            await asyncio.wait(workers, timeout=CLOSE_S)
        await self._writes_rate.charge_pending()

    def _renew_held(self, now: float) -> None:
        """While the database is slow for this replica: renew the leases of runs in progress,
        so they do not lapse there (and go to another replica) while they still run."""
        for tenant_id, tenant in list(self._tenants.items()):
            if (
                tenant.held
                and tenant.worker is None
                and now - tenant.written_at >= self._lease_s / 3
            ):
                tenant.sync = True
                self._wake(tenant_id, tenant)

    def _due(self, tenant: _Tenant, now: float) -> bool:
        if tenant.sync or tenant.charge or tenant.alone:  # a failure, or counted alone
            return True
        if (tenant.held or tenant.spare_slots) and now - tenant.written_at >= self._lease_s / 3:
            return True  # renew the lease
        spares = tenant.spare_slots or tenant.spare_tokens
        return bool(spares) and now - tenant.last_used >= SPARE_IDLE_S

    async def heartbeat(self) -> None:
        """Renew this replica's entry in the replicas document and see the live replicas."""
        now = self._heartbeat_at = self._clock()
        try:
            live = await self._repository.heartbeat(
                replica=self.replica, now_ms=now * 1000, lease_ms=self._lease_ms
            )
        except DatabaseError as exc:
            # Before its first answer (start-up's own work can hold the loop past the check's
            # timeout) the replica does not count alone for it: the next tick asks again, and
            # a chat meanwhile checks the database itself.
            if self.replicas:
                self._alone.failed(exc)
            return
        self.replicas = tuple(sorted(live))
        self._alone.answered()

    # Runs: a rate token and a slot.

    async def admit_run(self, tenant_id: str) -> Release:
        if self._chats.interval_ms <= 0 and self._cap <= 0:
            return _nothing
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = self._tenants[tenant_id] = _Tenant()
        if self._take_spare(tenant):
            return self._release_for(tenant_id, tenant)
        if self._alone.active:
            return self._admit_alone(tenant_id, tenant)
        waiter: asyncio.Future[Release] = asyncio.get_running_loop().create_future()
        tenant.waiting.append(waiter)
        self._wake(tenant_id, tenant)
        return await waiter

    def _take_spare(self, tenant: _Tenant, *, queued: bool = False) -> bool:
        """Admit from this replica's spares, without a round trip (first come: a new caller
        only when nobody is waiting)."""
        if (tenant.waiting and not queued) or self._spare == 0:
            return False
        if self._chats.interval_ms > 0 and tenant.spare_tokens < 1:
            return False
        if self._cap > 0 and tenant.spare_slots < 1:
            return False
        tenant.spare_tokens -= 1 if self._chats.interval_ms > 0 else 0
        tenant.spare_slots -= 1 if self._cap > 0 else 0
        tenant.held += 1
        tenant.last_used = self._clock()
        return True

    def _alone_cap(self, tenant: _Tenant) -> int:
        """The runs this replica may hold alone: its share of the cap; while a slow database
        still counts for the others, only the slots its live lease there holds for it."""
        share = self._share(self._cap)
        if not self._alone.slow:
            return share
        # A run taken near the lease's end would outlive it there: keep a third in hand.
        live = self._clock() < tenant.written_at + self._lease_s * 2 / 3
        return min(share, tenant.counted if live else 0)

    def _admit_alone(self, tenant_id: str, tenant: _Tenant) -> Release:
        """Admit on this replica's share of the cap and the rate (the database away): its runs
        count in its lease, its tokens are charged to the shared bucket once it answers."""
        if self._cap > 0 and tenant.held >= self._alone_cap(tenant):
            raise TooManyRequestsError(
                f"This tenant already has {tenant.held} chats running on this replica: while "
                "the shared limits cannot be checked, it admits only its share of the "
                f"{self._cap} (MAX_CONCURRENT_CHATS_PER_TENANT); retry when one has finished.",
                retry_after_s=1,
            )
        if self._chats.interval_ms > 0:
            if self._alone.slow:  # the others are still granted tokens: take none
                raise TooManyRequestsError(
                    "Too many chats for this tenant right now: the database answers too slowly "
                    "to check the shared limit of "
                    f"{self._chats.burst} a minute, and this replica takes no chat it was not "
                    "granted. Retry after the time in Retry-After.",
                    retry_after_s=1,
                )
            now = self._clock()
            if tenant.alone is None:
                tenant.alone = self._seen.bucket(tenant_id, self._chats.burst, self._share, now)
            if not tenant.alone.take(now):
                raise TooManyRequestsError(
                    f"Too many chats for this tenant: this replica's share of the limit of "
                    f"{self._chats.burst} a minute while the shared limits cannot be checked is "
                    f"{tenant.alone.per_minute}. Retry after the time in Retry-After.",
                    retry_after_s=tenant.alone.retry_after_s(),
                )
            tenant.charge += 1
        tenant.held += 1
        tenant.sync = True  # its lease is written when the database answers
        self._alone.admitted += 1
        return self._release_for(tenant_id, tenant)

    def _next_write(self) -> int:
        self._writes_sent += 1
        return self._writes_sent

    def _share(self, limit: int) -> int:
        return share_of(limit, self.replicas, self.replica)

    def _wake(self, tenant_id: str, tenant: _Tenant) -> None:
        if tenant.worker is None:
            tenant.worker = asyncio.create_task(
                self._work(tenant_id, tenant), name="limits: tenant"
            )

    async def _work(self, tenant_id: str, tenant: _Tenant) -> None:
        """One tenant's updates, one at a time: the waiting admissions in one update, else a
        lease write (releases, renewal, spares given back, charges)."""
        failed = False  # a lease write failed: housekeeping tries again, admissions go on
        try:
            while True:
                if tenant.waiting:
                    # Those who queued while an update was in flight: its spares first.
                    while tenant.waiting and self._take_spare(tenant, queued=True):
                        self._grant(tenant_id, tenant, tenant.waiting.pop(0))
                    if tenant.waiting:
                        batch, tenant.waiting = tenant.waiting, []
                        await self._admit(tenant_id, tenant, batch)
                elif tenant.sync and not failed:
                    tenant.sync = False
                    failed = not await self._sync(tenant_id, tenant)
                else:
                    return
        finally:
            tenant.worker = None
            _written(tenant.unwritten)  # not written: their callers wait no longer
            tenant.unwritten = []
            if tenant.empty and self._tenants.get(tenant_id) is tenant:
                del self._tenants[tenant_id]

    async def _admit(
        self, tenant_id: str, tenant: _Tenant, batch: list[asyncio.Future[Release]]
    ) -> None:
        held, returned, spare_slots = self._writing(tenant)
        charge, pending, tenant.unwritten = tenant.charge, tenant.unwritten, []
        now = self._clock()
        try:
            self.round_trips += 1
            grant = await self._repository.admit(
                f"chats:{tenant_id}",
                want=len(batch),
                bucket=self._chats,
                cap=self._cap,
                replica=self.replica,
                held=held,
                now_ms=now * 1000,
                lease_ms=self._lease_ms,
                spare=self._spare,
                headroom=HEADROOM * self._spare,
                returned=returned,
                charged=charge,
                write=self._next_write(),
            )
        except DatabaseError as exc:
            self._alone.failed(exc)
            tenant.spare_tokens += returned  # not given back after all
            tenant.spare_slots += spare_slots
            tenant.sync = True  # the next write sets the lease to what is true
            for waiter in batch:
                self._settle_alone(tenant_id, tenant, waiter)
            return
        except BaseException as exc:  # cancelled at shutdown: nobody is admitted
            for waiter in batch:
                if not waiter.done():
                    waiter.set_exception(ServiceUnavailableError("The service is stopping."))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            _written(pending)
        self._answered(tenant, now, charge)
        self._seen.remember(tenant_id, grant.tokens_left(self._chats, now * 1000))
        tenant.counted = held + grant.granted + grant.spare
        self._hand_out(tenant_id, tenant, batch, grant, now)

    @staticmethod
    def _writing(tenant: _Tenant) -> tuple[int, int, int]:
        """A lease write starts: it gives the spares back and sets the lease to the runs held
        now, so from here the database counts no more than these for this replica (a run
        admitted alone on the older, larger count while the write is in flight would not be
        counted once it lands: measured, 5 in flight against a cap of 4)."""
        held, returned, spare_slots = tenant.held, tenant.spare_tokens, tenant.spare_slots
        tenant.spare_tokens = tenant.spare_slots = 0
        tenant.counted = min(tenant.counted, held)
        return held, returned, spare_slots

    def _hand_out(
        self,
        tenant_id: str,
        tenant: _Tenant,
        batch: list[asyncio.Future[Release]],
        grant: Grant,
        now: float,
    ) -> None:
        """The granted runs to the first in the batch, refusals to the rest."""
        # Slots released while the update was in flight are still counted: they are spares.
        tenant.held += grant.granted
        tenant.spare_slots += grant.spare
        tenant.spare_tokens = grant.spare
        if self._spare == 0 and tenant.spare_slots:
            tenant.sync = True  # no spares kept at these limits: write the releases
        refusal = None if grant.granted >= len(batch) else self._refusal(grant, now * 1000)
        granted = grant.granted
        for waiter in batch:
            if granted > 0:
                granted -= 1
                tenant.last_used = now
                self._grant(tenant_id, tenant, waiter)
            elif not waiter.done():
                assert refusal is not None
                waiter.set_exception(refusal)

    def _answered(self, tenant: _Tenant, now: float, charged: int) -> None:
        """A write of this tenant's lease went through: what it charged is in the shared bucket."""
        self._alone.answered()
        tenant.written_at = now
        tenant.charge -= charged
        if not tenant.charge:
            tenant.alone = None  # the next stretch alone starts from nothing again

    def _grant(self, tenant_id: str, tenant: _Tenant, waiter: asyncio.Future[Release]) -> None:
        release = self._release_for(tenant_id, tenant)
        if waiter.done():  # its caller left: give the slot back
            release()
        else:
            waiter.set_result(release)

    def _settle_alone(
        self, tenant_id: str, tenant: _Tenant, waiter: asyncio.Future[Release]
    ) -> None:
        if waiter.done():
            return
        try:
            waiter.set_result(self._admit_alone(tenant_id, tenant))
        except TooManyRequestsError as refused:
            waiter.set_exception(refused)

    def _refusal(self, grant: Grant, now_ms: float) -> TooManyRequestsError:
        if grant.tokens_left(self._chats, now_ms) < 1:
            wait_ms = grant.tat_ms + self._chats.interval_ms - self._chats.tolerance_ms - now_ms
            return TooManyRequestsError(
                f"Too many chats for this tenant: the limit is {self._chats.burst} a minute. "
                "Retry after the time in Retry-After.",
                retry_after_s=wait_ms / 1000,
            )
        return TooManyRequestsError(
            f"This tenant already has {self._cap} chats running "
            "(MAX_CONCURRENT_CHATS_PER_TENANT); retry when one has finished.",
            retry_after_s=1,
        )

    def _release_for(self, tenant_id: str, tenant: _Tenant) -> Release:
        def release() -> Awaitable[None]:
            tenant.held -= 1
            tenant.spare_slots += 1  # still counted by the database until written
            if self._spare:
                return WRITTEN  # a spare: this replica reuses it, gives it back when idle
            tenant.sync = True
            if self._alone.active:
                return WRITTEN  # written when the database answers again
            try:
                written = asyncio.get_running_loop().create_future()
            except RuntimeError:  # a finalizer outside the loop: housekeeping writes it
                return WRITTEN
            tenant.unwritten.append(written)
            self._wake(tenant_id, tenant)
            return written

        return once(release)

    async def _sync(self, tenant_id: str, tenant: _Tenant) -> bool:
        """Write the lease as the runs in progress (spares go back, charges in) and renew it."""
        held, returned, spare_slots = self._writing(tenant)
        charge, pending, tenant.unwritten = tenant.charge, tenant.unwritten, []
        now = self._clock()
        try:
            self.round_trips += 1
            await self._repository.sync_lease(
                f"chats:{tenant_id}",
                replica=self.replica,
                held=held,
                now_ms=now * 1000,
                lease_ms=self._lease_ms,
                returned_ms=returned * self._chats.interval_ms,
                charged_ms=charge * self._chats.interval_ms,
                write=self._next_write(),
            )
        except DatabaseError as exc:
            self._alone.failed(exc)
            # Not written: the database still counts them; housekeeping tries again.
            tenant.spare_tokens += returned
            tenant.spare_slots += spare_slots
            tenant.sync = True
            return False
        finally:
            _written(pending)
        self._answered(tenant, now, charge)
        tenant.counted = held
        # Slots released while the update was in flight are still counted: they are spares.
        if tenant.spare_slots and self._spare == 0:
            tenant.sync = True
        return True

    # Writes and object caps.

    async def check_write(self, tenant_id: str) -> None:
        await self._writes_rate.check(tenant_id)


def unreachable(exc: BaseException) -> bool:
    """No server could be reached at all (not merely too slowly): the shares apply."""
    return isinstance(exc, DatabaseUnavailable) and exc.unreachable


def _written(releases: list[asyncio.Future[None]]) -> None:
    for written in releases:
        if not written.done():
            written.set_result(None)


def _nothing() -> Awaitable[None]:
    return WRITTEN
