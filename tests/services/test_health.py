"""Readiness means "can serve": ready through a database outage while cached keys and tools
still serve, not ready past that; the database's reachability is its own signal. Liveness fails
only on a wedged client: stuck while a fresh client reaches the database."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from app.repositories.database import Database
from app.services.health import HealthService
from tests.support.health import Clock, FakeDatabase


async def test_ready_through_an_outage_while_the_cache_serves() -> None:
    clock = Clock()
    database = FakeDatabase(clock)
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
    clock = Clock()
    database = FakeDatabase(clock)
    health = HealthService(database=cast(Any, database), serve_without_database_s=0.0, clock=clock)
    database.down = True
    await health.check()
    assert not health.ready()


async def test_not_ready_before_the_database_ever_answered() -> None:
    """A process that starts during an outage has nothing cached to serve: not ready until
    the database answers (start-up itself does not wait for it)."""
    clock = Clock()
    database = FakeDatabase(clock)
    database.down = True
    health = HealthService(
        database=cast(Database, database), serve_without_database_s=32.0, clock=clock
    )
    await health.check()
    assert not health.ready()
    database.down = False
    await health.check()
    assert health.ready()


async def test_liveness_fails_on_a_wedged_client_and_only_then() -> None:
    """Wedged: no call completed and no server checked past the bound while a fresh client
    reaches the database. A real outage (the checks fail, in time) or a wedge while the
    database is down too (a fresh client fails) keeps liveness up: a restart would not help."""
    clock = Clock()
    database = FakeDatabase(clock)
    health = HealthService(
        database=cast(Database, database),
        serve_without_database_s=32.0,
        wedged_after_s=60.0,
        clock=clock,
    )
    await health.check()
    database.down = True
    for _ in range(120):  # two minutes of an outage, a check each second: each one completes
        clock.now += 1.0
        await health.check()
        assert not await health.watch() and health.alive()

    database.down, database.wedged = False, True
    check = asyncio.create_task(health.check())  # hangs for good, as the driver did
    await asyncio.sleep(0)
    clock.now += 59.0
    assert not await health.watch() and health.alive()  # not yet past the bound
    assert database.fresh_pings == 0  # nothing is tried before the bound
    clock.now += 2.0
    assert await health.watch() and not health.alive()
    assert not health.ready()  # out of the load balancer too
    assert health.database().wedged

    database.down = True  # the database goes away as well: a restart would not help
    assert not await health.watch() and health.alive()
    check.cancel()
