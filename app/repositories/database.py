"""The MongoDB client: real (`AsyncMongoClient`) or the embedded in-memory store."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from datetime import UTC, datetime
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import (
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from app.config import Settings

logger = logging.getLogger(__name__)

Document = dict[str, Any]
# What a repository call raises when the database refuses an operation or does not answer:
# services catch this name, never the driver's.
DatabaseError = PyMongoError


def answered_too_slowly(exc: BaseException) -> bool:
    """The database was reached but an operation did not finish in time: a smaller one may."""
    return isinstance(exc, NetworkTimeout | ExecutionTimeout)


def utc_now() -> datetime:
    """Now, at the millisecond precision BSON stores, so what we return is what we stored.
    (A float holds milliseconds of this era to within a microsecond, which `fromtimestamp`
    rounds to: the result is the millisecond exactly. One C call instead of two.)"""
    return datetime.fromtimestamp(time.time_ns() // 1_000_000 / 1000, UTC)


class Database:
    """Owns the client; hands out the shared and per-tenant collections."""

    def __init__(self, client: Any, name: str, *, in_memory: bool) -> None:
        self._client = client
        self._db: AsyncDatabase[Document] = client[name]
        self.in_memory = in_memory

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        if settings.uses_memory_store:
            from mongomock_motor import AsyncMongoMockClient

            return cls(
                AsyncMongoMockClient(tz_aware=True), settings.mongodb_database, in_memory=True
            )
        timeout = settings.mongodb_timeout_ms
        client: AsyncMongoClient[Document] = AsyncMongoClient(
            settings.mongodb_url,
            tz_aware=True,
            serverSelectionTimeoutMS=timeout,
            connectTimeoutMS=timeout,
            # A client-side operation timeout: a server that stops answering fails a request in
            # about `timeout`, never the driver's 30 s default.
            timeoutMS=timeout,
            # Acknowledge a write only once it is in the journal: a 201 must survive a crash
            # (without it, kill -9 right after a write lost the write in our fault test).
            journal=True,
            appname="toolgate",
        )
        return cls(client, settings.mongodb_database, in_memory=False)

    @property
    def tenants(self) -> AsyncCollection[Document]:
        return self._db["tenants"]

    def collection(self, name: str) -> AsyncCollection[Document]:
        """A collection shared by all tenants (each document names its tenant)."""
        return self._db[name]

    def tenant_collection(self, tenant_id: str, resource: str) -> AsyncCollection[Document]:
        # A dot cannot occur in a tenant id, so `tenant.<id>.<resource>` never collides.
        return self._db[f"tenant.{tenant_id}.{resource}"]

    def unreachable(self, exc: BaseException) -> bool:
        """Whether `exc` says no server could be reached at all (refused, reset, unresolvable),
        rather than that one answered too slowly: a server that is up but slow still answers
        other clients. A failed server selection is "unreachable" only when the driver's last
        word from every server was such an error, not a timeout."""
        if not isinstance(exc, ConnectionFailure):
            return False
        if not isinstance(exc, ServerSelectionTimeoutError):
            return not exc.timeout
        topology = getattr(self._client, "topology_description", None)
        if topology is None:
            return True  # nothing known: nothing answered
        errors = [server.error for server in topology.server_descriptions().values()]
        return bool(errors) and all(
            error is not None and not getattr(error, "timeout", False) for error in errors
        )

    async def ping(self, *, timeout_s: float) -> str | None:
        """None when the database answers within the timeout, else why not (the caller logs
        it: a failing check repeats every second)."""
        try:
            await asyncio.wait_for(self._db.command("ping"), timeout_s)
        except Exception as exc:  # any failure means "unreachable"
            return type(exc).__name__
        return None

    async def close(self) -> None:
        result = self._client.close()
        if asyncio.iscoroutine(result):
            await result


async def aggregate(collection: Any, pipeline: list[Document]) -> list[Document]:
    """Run a pipeline on either driver: PyMongo async awaits `aggregate()`, Motor-shaped
    clients (the in-memory store) return the cursor directly."""
    cursor = collection.aggregate(pipeline)
    if inspect.isawaitable(cursor):
        cursor = await cursor
    return list(await cursor.to_list(None))
