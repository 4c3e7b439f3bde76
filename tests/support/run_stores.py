"""Run stores over a real wire server for the repository tests: a fresh database, dropped after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pymongo import AsyncMongoClient

from app.repositories.database import Database
from app.repositories.runs import RunRepository
from tests.support.apps import make_settings


@asynccontextmanager
async def mongodb_runs(url: str) -> AsyncIterator[RunRepository]:
    """A RunRepository on a new database at `url`, its shared collection's indexes made."""
    settings = make_settings(url)
    database = Database.from_settings(settings)
    repo = RunRepository(database, retention_days=7)
    try:
        assert await database.ensure_indexes() == []  # every declared index made
        yield repo
    finally:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
        await client.drop_database(settings.mongodb_database)
        await client.close()
        await database.close()
