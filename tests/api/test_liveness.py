"""/healthz fails (503) only when the process's database client is wedged; /readyz with it."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import cast

import httpx
from fastapi import FastAPI

from app.repositories.database import Database
from app.services.health import HealthService
from tests.support.health import Clock, FakeDatabase


async def test_a_wedged_client_fails_liveness_and_readiness(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    clock = Clock()
    database = FakeDatabase(clock)
    health = HealthService(
        database=cast(Database, database), serve_without_database_s=32.0, clock=clock
    )
    app.state.services = dataclasses.replace(app.state.services, health=health)
    await health.check()
    assert (await client.get("/healthz")).status_code == 200

    database.wedged = True
    hung = asyncio.create_task(health.check())
    clock.now += 61.0
    await health.watch()
    alive, ready = await client.get("/healthz"), await client.get("/readyz")
    assert alive.status_code == 503 and ready.status_code == 503
    assert alive.json()["status"] == "unavailable" and alive.json()["database"] == "wedged"
    hung.cancel()
