"""What the probes report: whether this process can serve, and whether the database answers.

Ready (GET /readyz) means "can answer requests": the database answered its last check, or it
stopped answering less than `serve_without_database_s` ago (the cache TTL plus
CACHE_STALE_IF_ERROR_S), while keys and tools already cached are still served. A database
outage therefore does not take every replica out of its load balancer at once; a replica cut
off alone for longer than that is taken out. The database is checked in the background every
`check_interval_s`: a probe never waits on it. GET /healthz and `toolgate_database_reachable`
say whether it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from app.repositories.database import Database

logger = logging.getLogger(__name__)
StoreKind = Literal["memory", "mongodb"]
CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class DatabaseState:
    reachable: bool
    unreachable_for_s: float | None  # since the first failed check of this outage


class HealthService:
    def __init__(
        self,
        *,
        database: Database,
        serve_without_database_s: float,
        check_interval_s: float = CHECK_INTERVAL_S,
        check_timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._database = database
        self._serve_without_s = serve_without_database_s
        self._interval_s = check_interval_s
        self._timeout_s = check_timeout_s
        self._clock = clock
        self._sleep = sleep
        self._failing_since: float | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def store(self) -> StoreKind:
        return "memory" if self._database.in_memory else "mongodb"

    def start(self) -> None:
        if not self._database.in_memory:  # the in-memory store is always there
            self._task = asyncio.create_task(self._check_forever(), name="health: database")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def check(self) -> bool:
        """One check of the database; its result is what the probes report until the next."""
        problem = await self._database.ping(timeout_s=self._timeout_s)
        if problem is None and self._failing_since is not None:
            logger.warning(
                "database reachable again after %.1f s", self._clock() - self._failing_since
            )
            self._failing_since = None
        elif problem is not None and self._failing_since is None:
            logger.warning(
                "database unreachable (%s); this replica stays ready for %g s on its cache",
                problem,
                self._serve_without_s,
            )
            self._failing_since = self._clock()
        return problem is None

    def database(self) -> DatabaseState:
        if self._failing_since is None:
            return DatabaseState(reachable=True, unreachable_for_s=None)
        return DatabaseState(reachable=False, unreachable_for_s=self._clock() - self._failing_since)

    def ready(self) -> bool:
        """The process can answer: the database answers, or has not for less than the time
        cached keys and tools are still served."""
        state = self.database()
        return state.reachable or (state.unreachable_for_s or 0.0) < self._serve_without_s

    async def _check_forever(self) -> None:
        while True:
            await self.check()
            await self._sleep(self._interval_s)
