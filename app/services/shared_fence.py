"""Object caps across replicas (LIMITS=shared): a create counts and inserts while holding a
short per-tenant fence document, so creates racing on different replicas cannot pass the cap."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from app.errors import DatabaseError, ServiceUnavailableError
from app.limits import Fence, TenantLocks
from app.repositories.limits import LimitRepository

FENCE_TTL_MS = 15_000.0  # a holder that dies frees the fence after this
FENCE_WAIT_S = 10.0  # a create waits at most this long for another replica's create


def shared_fence(
    repository: LimitRepository,
    *,
    failed: Callable[[BaseException], None],
    clock: Callable[[], float],
) -> Fence:
    """The fence; `failed` hears of a database that did not answer a release."""
    locks = TenantLocks()

    @asynccontextmanager
    async def fence(tenant_id: str, what: str) -> AsyncIterator[None]:
        key = f"fence:{what}:{tenant_id}"
        async with locks(key):  # this process's creates queue here, not on the database
            holder = uuid.uuid4().hex
            deadline = time.monotonic() + FENCE_WAIT_S  # a real wait, on the real clock
            delay = 0.005
            while not await repository.take_fence(
                key, holder=holder, now_ms=clock() * 1000, ttl_ms=FENCE_TTL_MS
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
                    await repository.release_fence(key, holder=holder)
                except DatabaseError as exc:  # it expires on its own
                    failed(exc)

    return fence
