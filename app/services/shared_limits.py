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
- Releases with no spares (limits of less than 100) are written by the next update of that
  tenant, or by an update the release starts.

When the database does not answer a check (within CHECK_TIMEOUT_S), this process counts on its
own for DOWN_S without asking again (and says so in the log): the service keeps serving with
per-replica limits rather than refusing every chat or making each wait for the timeout; the
shared counts resume when the database answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from pymongo.errors import PyMongoError

from app.errors import ServiceUnavailableError
from app.limits import Release, TenantLimits, TenantLocks, TooManyRequestsError, once
from app.repositories.limits import Bucket, Grant, LimitRepository

logger = logging.getLogger(__name__)

FENCE_TTL_MS = 15_000.0  # a holder that dies frees the fence after this
FENCE_WAIT_S = 10.0  # a create waits at most this long for another replica's create
WARN_EVERY_S = 10.0
SPARE_MAX = 128  # tokens and slots one update may set aside for this replica
SPARE_PER = 100  # ... one for each this many of the limit (none below it)
HEADROOM = 4  # ... while this many times as many stay free for the other replicas
SPARE_IDLE_S = 0.5  # spares unused this long go back
CLOSE_S = 3.0  # at shutdown, spares are given back within this
DOWN_S = 5.0  # after the database failed a check, checks count locally this long


def _now_ms() -> float:
    return time.time() * 1000


@dataclass
class _Tenant:
    """One tenant's runs in this process. The database counts `held + spare_slots` for it."""

    held: int = 0  # runs in progress
    spare_slots: int = 0
    spare_tokens: int = 0
    waiting: list[asyncio.Future[Release]] = field(default_factory=list)
    worker: asyncio.Task[None] | None = None
    sync: bool = False  # write the lease (renew it, give spares back)
    last_used: float = 0.0
    idle_timer: asyncio.TimerHandle | None = None

    @property
    def empty(self) -> bool:
        return not (self.held or self.spare_slots or self.spare_tokens or self.waiting)


class SharedLimits:
    def __init__(
        self,
        repository: LimitRepository,
        *,
        chats_per_minute: int,
        writes_per_minute: int,
        max_concurrent: int,
        lease_s: float,
        fallback: TenantLimits,
    ) -> None:
        self._repository = repository
        self._chats = Bucket.per_minute(chats_per_minute)
        self._writes = Bucket.per_minute(writes_per_minute)
        self._cap = max_concurrent
        self._lease_ms = lease_s * 1000
        self._fallback = fallback
        self.replica = uuid.uuid4().hex[:16]  # a new one each start: a dead process's lease
        self._spare = min(
            SPARE_MAX,
            chats_per_minute // SPARE_PER if chats_per_minute else SPARE_MAX,
            max_concurrent // SPARE_PER if max_concurrent else SPARE_MAX,
        )
        self._tenants: dict[str, _Tenant] = {}
        self._locks = TenantLocks()
        self._renewer: asyncio.Task[None] | None = None
        self._warned_at = -WARN_EVERY_S
        self._closing = False
        self._down_until = 0.0
        self.round_trips = 0  # admission and lease updates (tests, the benchmark)

    @property
    def active_runs(self) -> int:
        return sum(t.held for t in self._tenants.values()) + self._fallback.active_runs

    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_forever(), name="limits: leases")

    async def aclose(self) -> None:
        logger.info("shared limits: %d database round trips", self.round_trips)
        # PyMongo may turn a cancellation inside an operation into a PyMongoError, which the
        # loops catch: they also stop on this flag, and every wait here is bounded.
        self._closing = True
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.wait([self._renewer], timeout=CLOSE_S)
        workers = [t.worker for t in self._tenants.values() if t.worker is not None]
        if workers:
            await asyncio.wait(workers, timeout=CLOSE_S)
        spares = []
        for tenant_id, tenant in list(self._tenants.items()):
            if tenant.idle_timer is not None:
                tenant.idle_timer.cancel()
            if tenant.spare_slots or tenant.spare_tokens:
                spares.append(self._sync(tenant_id, tenant))
        # Give the spares back: one try, bounded; what is left expires with the lease.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*spares, return_exceptions=True), CLOSE_S)

    # Runs: a rate token and a slot.

    @property
    def _down(self) -> bool:
        """The database failed a check moments ago: count locally, without waiting on it."""
        return time.monotonic() < self._down_until

    async def admit_run(self, tenant_id: str) -> Release:
        if self._chats.interval_ms <= 0 and self._cap <= 0:
            return _nothing
        if self._down:
            return self._fallback.admit_run_now(tenant_id)
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = self._tenants[tenant_id] = _Tenant()
        if self._take_spare(tenant):
            return self._release_for(tenant_id, tenant)
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
        tenant.last_used = time.monotonic()
        return True

    def _wake(self, tenant_id: str, tenant: _Tenant) -> None:
        if tenant.worker is None:
            tenant.worker = asyncio.create_task(
                self._work(tenant_id, tenant), name="limits: tenant"
            )

    async def _work(self, tenant_id: str, tenant: _Tenant) -> None:
        """One tenant's updates, one at a time: the waiting admissions in one update, else a
        lease write (releases, renewal, spares given back)."""
        failed = False  # a lease write failed: the renewer tries again, admissions go on
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
            if tenant.empty and self._tenants.get(tenant_id) is tenant:
                del self._tenants[tenant_id]

    async def _admit(
        self, tenant_id: str, tenant: _Tenant, batch: list[asyncio.Future[Release]]
    ) -> None:
        held, returned, spare_slots = tenant.held, tenant.spare_tokens, tenant.spare_slots
        tenant.spare_tokens = tenant.spare_slots = 0  # given back by this update
        now = _now_ms()
        try:
            self.round_trips += 1
            grant = await self._repository.admit(
                f"chats:{tenant_id}",
                want=len(batch),
                bucket=self._chats,
                cap=self._cap,
                replica=self.replica,
                held=held,
                now_ms=now,
                lease_ms=self._lease_ms,
                spare=self._spare,
                headroom=HEADROOM * self._spare,
                returned=returned,
            )
        except PyMongoError as exc:
            self._warn(exc)
            tenant.spare_tokens += returned  # not given back after all
            tenant.spare_slots += spare_slots
            tenant.sync = True  # the next write sets the lease to what is true
            for waiter in batch:
                self._settle_locally(tenant_id, waiter)
            return
        except BaseException as exc:  # cancelled at shutdown: nobody is admitted
            for waiter in batch:
                if not waiter.done():
                    waiter.set_exception(ServiceUnavailableError("The service is stopping."))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        # Slots released while the update was in flight are still counted: they are spares.
        tenant.held += grant.granted
        tenant.spare_slots += grant.spare
        tenant.spare_tokens = grant.spare
        if self._spare == 0 and tenant.spare_slots:
            tenant.sync = True  # no spares kept at these limits: write the releases
        if grant.spare or tenant.spare_slots:
            self._watch_idle(tenant_id, tenant)
        refusal = None if grant.granted >= len(batch) else self._refusal(grant, now)
        granted = grant.granted
        for waiter in batch:
            if granted > 0:
                granted -= 1
                tenant.last_used = time.monotonic()
                self._grant(tenant_id, tenant, waiter)
            elif not waiter.done():
                assert refusal is not None
                waiter.set_exception(refusal)

    def _grant(self, tenant_id: str, tenant: _Tenant, waiter: asyncio.Future[Release]) -> None:
        release = self._release_for(tenant_id, tenant)
        if waiter.done():  # its caller left: give the slot back
            release()
        else:
            waiter.set_result(release)

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
        def release() -> None:
            tenant.held -= 1
            tenant.spare_slots += 1  # still counted by the database until written
            if self._spare == 0:
                tenant.sync = True
                self._wake(tenant_id, tenant)
            else:
                self._watch_idle(tenant_id, tenant)

        return once(release)

    def _watch_idle(self, tenant_id: str, tenant: _Tenant) -> None:
        """Give the spares back once the tenant has been idle here for SPARE_IDLE_S."""
        if tenant.idle_timer is not None:
            return

        def check() -> None:
            tenant.idle_timer = None
            if not (tenant.spare_slots or tenant.spare_tokens):
                return
            idle = time.monotonic() - tenant.last_used
            if idle < SPARE_IDLE_S:
                tenant.idle_timer = loop.call_later(SPARE_IDLE_S - idle, check)
                return
            tenant.sync = True
            self._wake(tenant_id, tenant)

        loop = asyncio.get_running_loop()
        tenant.idle_timer = loop.call_later(SPARE_IDLE_S, check)

    def _settle_locally(self, tenant_id: str, waiter: asyncio.Future[Release]) -> None:
        if waiter.done():
            return
        try:
            waiter.set_result(self._fallback.admit_run_now(tenant_id))
        except TooManyRequestsError as refused:
            waiter.set_exception(refused)

    async def _sync(self, tenant_id: str, tenant: _Tenant) -> bool:
        """Write the lease as the runs in progress (spares go back) and renew it."""
        held, returned, spare_slots = tenant.held, tenant.spare_tokens, tenant.spare_slots
        tenant.spare_tokens = tenant.spare_slots = 0
        try:
            self.round_trips += 1
            await self._repository.sync_lease(
                f"chats:{tenant_id}",
                replica=self.replica,
                held=held,
                now_ms=_now_ms(),
                lease_ms=self._lease_ms,
                returned_ms=returned * self._chats.interval_ms,
            )
        except PyMongoError as exc:
            self._warn(exc)
            # Not written: the database still counts them; the renewer tries again.
            tenant.spare_tokens += returned
            tenant.spare_slots += spare_slots
            tenant.sync = True
            return False
        # Slots released while the update was in flight are still counted: they are spares.
        if tenant.spare_slots and self._spare == 0:
            tenant.sync = True
        elif tenant.spare_slots:
            self._watch_idle(tenant_id, tenant)
        return True

    async def _renew_forever(self) -> None:
        """Renew this replica's leases (and write what a failed update left behind)."""
        try:
            await self._repository.ensure_indexes()  # the TTL index that clears idle documents
        except PyMongoError as exc:
            logger.warning("shared limits: could not create the TTL index (%s)", exc)
        while self._cap > 0 and not self._closing:
            await asyncio.sleep(self._lease_ms / 3000)
            for tenant_id, tenant in list(self._tenants.items()):
                if tenant.held or tenant.spare_slots or tenant.sync:
                    tenant.sync = True
                    self._wake(tenant_id, tenant)

    # Writes.

    async def check_write(self, tenant_id: str) -> None:
        if self._writes.interval_ms <= 0:
            return
        if self._down:
            self._fallback.writes.check(tenant_id)
            return
        now = _now_ms()
        try:
            grant = await self._repository.admit(
                f"writes:{tenant_id}",
                want=1,
                bucket=self._writes,
                cap=0,
                replica=self.replica,
                held=0,
                now_ms=now,
                lease_ms=0,
            )
        except PyMongoError as exc:
            self._warn(exc)
            self._fallback.writes.check(tenant_id)
            return
        if grant.granted < 1:
            wait_ms = grant.tat_ms + self._writes.interval_ms - self._writes.tolerance_ms - now
            raise TooManyRequestsError(
                f"Too many writes for this tenant: the limit is {self._writes.burst} a minute. "
                "Retry after the time in Retry-After.",
                retry_after_s=wait_ms / 1000,
            )

    # Object caps.

    @asynccontextmanager
    async def fence(self, tenant_id: str, what: str) -> AsyncIterator[None]:
        key = f"fence:{what}:{tenant_id}"
        async with self._locks(key):  # this process's creates queue here, not on the database
            holder = uuid.uuid4().hex
            deadline = time.monotonic() + FENCE_WAIT_S
            delay = 0.005
            while not await self._repository.take_fence(
                key, holder=holder, now_ms=_now_ms(), ttl_ms=FENCE_TTL_MS
            ):
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(
                        f"Another replica is still creating {what} for this tenant; retry."
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.1)
            try:
                yield
            finally:
                try:
                    await self._repository.release_fence(key, holder=holder)
                except PyMongoError as exc:  # it expires on its own
                    self._warn(exc)

    def _warn(self, exc: BaseException) -> None:
        """A check failed: count locally for DOWN_S (say so at most every WARN_EVERY_S)."""
        now = time.monotonic()
        self._down_until = now + DOWN_S
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "shared limits: the database did not answer (%s); this replica counts on its "
                "own for the next %g s",
                type(exc).__name__,
                DOWN_S,
            )


def _nothing() -> None:
    return None
