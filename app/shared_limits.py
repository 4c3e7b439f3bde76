"""Limits counted in MongoDB: exact across every replica on the database (LIMITS=shared).

- **Rates** are token buckets in per-tenant documents (app/repositories/limits.py), each check
  one atomic `find_one_and_update`.
- **Concurrent runs** are leases: each replica keeps its count of runs held in the tenant's
  document and renews it every `lease_s / 3`; a replica that dies stops renewing, and its slots
  come back when its lease expires (CHAT_LEASE_S).
- **Object caps** are fenced: a create counts and inserts while holding a short per-tenant lease
  document, so creates racing on different replicas cannot overrun the cap.

Cost, kept off the hot path where it can be: the admissions waiting for one tenant in this
process go to the database together (one update grants several; the first come get them), and
releases are written with the next update of that tenant (an admission, or a sync started by the
release), so a busy process makes far fewer than one round trip per run.

When the database cannot be reached, the check falls back to this process's own limits (and
says so in the log): the service keeps serving with per-replica limits rather than refusing
every chat; the shared counts resume when the database answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pymongo.errors import PyMongoError

from app.errors import ServiceUnavailableError
from app.limits import Release, TenantLimits, TenantLocks, TooManyRequestsError
from app.repositories.limits import Bucket, Grant, LimitRepository

logger = logging.getLogger(__name__)

FENCE_TTL_MS = 15_000.0  # a holder that dies frees the fence after this
FENCE_WAIT_S = 10.0  # a create waits at most this long for another replica's create
WARN_EVERY_S = 10.0


def _now_ms() -> float:
    return time.time() * 1000


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
        self._held: dict[str, int] = {}  # tenant -> runs this process holds shared slots for
        self._synced: dict[str, int] = {}  # tenant -> the count last written
        self._waiting: dict[str, list[asyncio.Future[Release]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._locks = TenantLocks()
        self._renewer: asyncio.Task[None] | None = None
        self._warned_at = -WARN_EVERY_S

    @property
    def active_runs(self) -> int:
        return sum(self._held.values()) + self._fallback.active_runs

    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_forever(), name="limits: leases")

    async def aclose(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
        workers = list(self._workers.values())
        await asyncio.gather(*workers, return_exceptions=True)
        for tenant_id in [t for t, held in self._held.items() if held != self._synced.get(t)]:
            await self._sync(tenant_id)  # one try: what is left expires with the lease

    # Runs: a rate token and a slot.

    async def admit_run(self, tenant_id: str) -> Release:
        if self._chats.interval_ms <= 0 and self._cap <= 0:
            return _nothing
        waiter: asyncio.Future[Release] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant_id, []).append(waiter)
        self._wake(tenant_id)
        return await waiter

    def _wake(self, tenant_id: str) -> None:
        if tenant_id not in self._workers:
            worker = asyncio.create_task(self._work(tenant_id), name="limits: tenant")
            self._workers[tenant_id] = worker

    async def _work(self, tenant_id: str) -> None:
        """One tenant's updates, one at a time: the waiting admissions in one update, else the
        releases not written yet."""
        try:
            while True:
                batch = self._waiting.pop(tenant_id, [])
                if batch:
                    await self._admit(tenant_id, batch)
                elif self._held.get(tenant_id, 0) != self._synced.get(tenant_id, 0):
                    if not await self._sync(tenant_id):
                        return  # the renewer tries again
                else:
                    return
        finally:
            del self._workers[tenant_id]

    async def _admit(self, tenant_id: str, batch: list[asyncio.Future[Release]]) -> None:
        held = self._held.get(tenant_id, 0)
        now = _now_ms()
        try:
            grant = await self._repository.admit(
                f"chats:{tenant_id}",
                want=len(batch),
                bucket=self._chats,
                cap=self._cap,
                replica=self.replica,
                held=held,
                now_ms=now,
                lease_ms=self._lease_ms,
            )
        except PyMongoError as exc:
            self._warn(exc)
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
        self._synced[tenant_id] = held + grant.granted
        self._held[tenant_id] = self._held.get(tenant_id, 0) + grant.granted
        refusal = None if grant.granted >= len(batch) else self._refusal(grant, now)
        granted = grant.granted
        for waiter in batch:
            if granted > 0:
                granted -= 1
                release = self._release_for(tenant_id)
                if waiter.done():  # its caller left: give the slot back
                    release()
                else:
                    waiter.set_result(release)
            elif not waiter.done():
                assert refusal is not None
                waiter.set_exception(refusal)

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

    def _release_for(self, tenant_id: str) -> Release:
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._held[tenant_id] -= 1
            self._wake(tenant_id)  # written by the next update of this tenant

        return release

    def _settle_locally(self, tenant_id: str, waiter: asyncio.Future[Release]) -> None:
        if waiter.done():
            return
        try:
            waiter.set_result(self._fallback.admit_run_now(tenant_id))
        except TooManyRequestsError as refused:
            waiter.set_exception(refused)

    async def _sync(self, tenant_id: str) -> bool:
        held = self._held.get(tenant_id, 0)
        try:
            await self._repository.sync_lease(
                f"chats:{tenant_id}",
                replica=self.replica,
                held=held,
                now_ms=_now_ms(),
                lease_ms=self._lease_ms,
            )
        except PyMongoError as exc:
            self._warn(exc)
            return False
        self._synced[tenant_id] = held
        if held == 0 and self._held.get(tenant_id) == 0:
            del self._held[tenant_id]
            self._synced.pop(tenant_id, None)
        return True

    async def _renew_forever(self) -> None:
        """Renew this replica's leases (and write releases a failed update left behind)."""
        try:
            await self._repository.ensure_indexes()  # the TTL index that clears idle documents
        except PyMongoError as exc:
            logger.warning("shared limits: could not create the TTL index (%s)", exc)
        while self._cap > 0:
            await asyncio.sleep(self._lease_ms / 3000)
            for tenant_id in list(self._held):
                if tenant_id not in self._workers:
                    self._synced.pop(tenant_id, None)  # forces a write: the renewal
                    self._wake(tenant_id)

    # Writes.

    async def check_write(self, tenant_id: str) -> None:
        if self._writes.interval_ms <= 0:
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
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "shared limits: the database did not answer (%s); this replica counts on its "
                "own meanwhile",
                type(exc).__name__,
            )


def _nothing() -> None:
    return None
