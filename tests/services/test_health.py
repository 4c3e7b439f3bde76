"""Readiness means "can serve": ready through a database outage while cached keys and tools
still serve, not ready past that; the database's reachability is its own signal."""

from __future__ import annotations

from typing import Any, cast

from app.repositories.database import Database
from app.services.health import HealthService


class FakeDatabase:
    in_memory = False

    def __init__(self) -> None:
        self.down = False

    async def ping(self, *, timeout_s: float) -> str | None:
        return "ServerSelectionTimeoutError" if self.down else None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_ready_through_an_outage_while_the_cache_serves() -> None:
    database, clock = FakeDatabase(), Clock()
    health = HealthService(
        database=cast(Database, database), serve_without_database_s=32.0, clock=clock
    )
    assert await health.check() and health.ready()

    database.down = True
    assert not await health.check()
    clock.now += 31.0
    await health.check()
    state = health.database()
    assert not state.reachable and state.unreachable_for_s == 31.0
    assert health.ready()  # the database is away; cached keys and tools still serve

    clock.now += 1.5
    assert not health.ready()  # nothing cached is served any more: out of the load balancer

    database.down = False
    assert await health.check() and health.ready()
    assert health.database().unreachable_for_s is None


async def test_no_grace_means_not_ready_at_the_first_failed_check() -> None:
    database, clock = FakeDatabase(), Clock()
    health = HealthService(database=cast(Any, database), serve_without_database_s=0.0, clock=clock)
    database.down = True
    await health.check()
    assert not health.ready()
