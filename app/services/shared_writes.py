"""The write rate counted in MongoDB (LIMITS=shared); while the database does not answer, this
replica's share of it (app/services/limit_shares.py), charged to the shared bucket on return."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from app.errors import DatabaseError, ServiceUnavailableError
from app.limits import TooManyRequestsError
from app.repositories.limits import Bucket, Grant, LimitRepository
from app.services.limit_shares import Alone, SeenTokens, ShareBucket


@dataclass
class _Writes:
    """One tenant's writes admitted alone: charged to the shared bucket when it answers."""

    bucket: ShareBucket
    charge: int = 0


class SharedWrites:
    def __init__(
        self,
        repository: LimitRepository,
        *,
        bucket: Bucket,
        replica: str,
        alone: Alone,
        share: Callable[[int], int],
        clock: Callable[[], float],
    ) -> None:
        self._repository = repository
        self._writes = bucket
        self._replica = replica
        self._alone = alone
        self._share = share
        self._clock = clock
        self._alone_writes: dict[str, _Writes] = {}
        self._seen = SeenTokens()

    async def check(self, tenant_id: str) -> None:
        """One of the tenant's write tokens (429 otherwise; 503 when its share alone is used)."""
        if self._writes.interval_ms <= 0:
            return
        if self._alone.active:
            self._take_alone(tenant_id)
            return
        now_ms = self._clock() * 1000
        try:
            grant = await self._charge(tenant_id, want=1)
        except DatabaseError:
            self._take_alone(tenant_id)
            return
        if grant.granted < 1:
            wait_ms = grant.tat_ms + self._writes.interval_ms - self._writes.tolerance_ms - now_ms
            raise TooManyRequestsError(
                f"Too many writes for this tenant: the limit is {self._writes.burst} a minute. "
                "Retry after the time in Retry-After.",
                retry_after_s=wait_ms / 1000,
            )

    async def _charge(self, tenant_id: str, *, want: int = 0) -> Grant:
        """Take `want` write tokens, charging those this replica took alone."""
        alone = self._alone_writes.get(tenant_id)
        charged = alone.charge if alone is not None else 0
        now_ms = self._clock() * 1000
        try:
            grant = await self._repository.admit(
                f"writes:{tenant_id}",
                want=want,
                bucket=self._writes,
                cap=0,
                replica=self._replica,
                held=0,
                now_ms=now_ms,
                lease_ms=0,
                charged=charged,
            )
        except DatabaseError as exc:
            self._alone.failed(exc)
            raise
        self._alone.answered()
        self._seen.remember(tenant_id, grant.tokens_left(self._writes, now_ms))
        if alone is not None:
            alone.charge -= charged
            if not alone.charge and self._alone_writes.get(tenant_id) is alone:
                del self._alone_writes[tenant_id]
        return grant

    def _take_alone(self, tenant_id: str) -> None:
        alone = self._alone_writes.get(tenant_id)
        if alone is None:
            bucket = self._seen.bucket(tenant_id, self._writes.burst, self._share, self._clock())
            alone = self._alone_writes[tenant_id] = _Writes(bucket)
        if not alone.bucket.take(self._clock()):
            # 503, not 429: a write needs the database anyway, and it is the one away.
            retry_after = max(1, math.ceil(alone.bucket.retry_after_s()))
            raise ServiceUnavailableError(
                "The database does not answer: this replica admits only its share of the "
                f"tenant's {self._writes.burst} writes a minute, and it is used up; retry.",
                headers={"Retry-After": str(retry_after)},
            )
        alone.charge += 1
        self._alone.admitted += 1

    async def charge_pending(self) -> None:
        """Charge what was admitted alone (housekeeping, once the database answers)."""
        for tenant_id in list(self._alone_writes):
            try:
                await self._charge(tenant_id)
            except DatabaseError:  # counted alone again; tried next round
                return
