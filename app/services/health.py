"""What the probes report: whether this process can serve, whether the database answers, and
whether this process's database client still works at all.

Ready (GET /readyz) means "can answer requests": the database answered a check since start,
and answered its last one or stopped answering less than `serve_without_database_s` ago (the
cache TTL plus CACHE_STALE_IF_ERROR_S), while keys and tools already cached are still served. A
database outage therefore does not take every replica out of its load balancer at once; a
replica cut off alone for longer than that is taken out. The database is checked in the
background every `check_interval_s` (each check bounded by `pymongo.timeout`, never cancelled);
its outcome opens and closes the outage circuit (app/repositories/circuit.py): a probe never
waits on the database.

Alive (GET /healthz) unless the client is wedged: no database call of this process has
completed (answered or failed) and its driver has not checked the server for `wedged_after_s`,
while a fresh client, with a topology of its own, reaches the database. Seen after long outages
under CPU starvation: PyMongo's topology lock held for good, every call hanging, "database
unreachable" while it was up. Only a restart brings such a process back, and the orchestrator
restarts it on a failing liveness probe. During a real outage the checks fail in time (they
complete), and a fresh client fails too: liveness stays up, so an outage restarts nothing.
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
FIRST_ANSWER_S = 2.0  # start-up waits this long at most for the first check


@dataclass(frozen=True, slots=True)
class DatabaseState:
    reachable: bool
    unreachable_for_s: float | None  # since the first failed check of this outage
    wedged: bool = False  # this process's client, not the database: restart it


class HealthService:
    def __init__(
        self,
        *,
        database: Database,
        serve_without_database_s: float,
        check_interval_s: float = CHECK_INTERVAL_S,
        check_timeout_s: float = 2.0,
        wedged_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._database = database
        self._serve_without_s = serve_without_database_s
        self._interval_s = check_interval_s
        self._timeout_s = check_timeout_s
        self._wedged_after_s = wedged_after_s
        self._clock = clock
        self._sleep = sleep
        self._failing_since: float | None = None
        self._answered = asyncio.Event()  # the database answered a check since start
        self._wedged = False
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def store(self) -> StoreKind:
        return "memory" if self._database.in_memory else "mongodb"

    def start(self) -> None:
        if self._database.in_memory:  # the in-memory store is always there
            self._answered.set()
            return
        self._tasks = [
            asyncio.create_task(self._check_forever(), name="health: database"),
            asyncio.create_task(self._watch_forever(), name="health: driver"),
        ]

    async def first_answer(self, timeout_s: float = FIRST_ANSWER_S) -> bool:
        """Wait (bounded) for the first check to answer: start-up is ready at once when the
        database is up, and serves (not ready) when it is not."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._answered.wait(), timeout_s)  # an event, not the driver
        return self._answered.is_set()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=3.0)

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
        if problem is None:
            self._answered.set()
        return problem is None

    def database(self) -> DatabaseState:
        if self._failing_since is None:
            return DatabaseState(reachable=True, unreachable_for_s=None, wedged=self._wedged)
        return DatabaseState(
            reachable=False,
            unreachable_for_s=self._clock() - self._failing_since,
            wedged=self._wedged,
        )

    def ready(self) -> bool:
        """The process can answer: the database answered since start, and answers, or has
        not for less than the time cached keys and tools are still served."""
        if not self._answered.is_set() or self._wedged:
            return False
        state = self.database()
        return state.reachable or (state.unreachable_for_s or 0.0) < self._serve_without_s

    def alive(self) -> bool:
        """False when the database client is wedged (see the module's docstring)."""
        return not self._wedged

    def stuck_for(self) -> float:
        """How long no database call completed and the driver checked no server."""
        latest = max(self._database.answered_at, self._database.topology_checked_at)
        return self._clock() - latest

    async def watch(self) -> bool:
        """One look at the client: wedged when stuck past the bound while a fresh client
        reaches the database."""
        if self.stuck_for() < self._wedged_after_s:
            self._wedged = False
            return False
        wedged = await self._database.fresh_ping(timeout_s=self._timeout_s)
        if wedged and not self._wedged:
            logger.error(
                "database client wedged: no call completed and no server checked for %.0f s "
                "while a fresh client reaches the database; liveness fails so that the "
                "process is restarted",
                self.stuck_for(),
            )
        self._wedged = wedged and self.stuck_for() >= self._wedged_after_s
        return self._wedged

    async def _check_forever(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # a probe's loop never ends on a surprise: logged, checked again
                logger.exception("database check failed")
            await self._sleep(self._interval_s)

    async def _watch_forever(self) -> None:
        while True:
            try:
                await self.watch()
            except Exception:
                logger.exception("database client watch failed")
            await self._sleep(max(self._interval_s, 1.0))
