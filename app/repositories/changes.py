"""Per-tenant change stamps: one document per tenant in the shared `changes` collection.

A stamp (`_id`: the tenant id) holds `v`, a version bumped by every change, and `at`, the
database server's time of the last bump; a TTL index deletes stamps untouched for a day.
`app/services/changes.py` publishes and polls them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel, ReturnDocument

from app.repositories.database import Database, repository

KEEP_STAMPS_S = 86_400  # a stamp untouched for a day is deleted (TTL index)

Stamp = tuple[str, int, datetime]  # tenant id, version, stamped at (the server's clock)


@repository
class ChangeStampRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._collection: Any = database.collection("changes")
        database.declare(
            "changes", [IndexModel([("at", ASCENDING)], expireAfterSeconds=KEEP_STAMPS_S)]
        )

    async def stamp(self, *, tenant_id: str) -> tuple[int, datetime]:
        """Bump the tenant's version and set its time to the server's now; the stamp as this
        bump left it (version 1: the tenant had none)."""
        after = await self._collection.find_one_and_update(
            {"_id": tenant_id},
            {"$inc": {"v": 1}, "$currentDate": {"at": True}},
            projection={"v": 1, "at": 1},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return int(after["v"]), after["at"]

    async def newest_time(self) -> datetime | None:
        """When the newest stamp was made, or None when there is none."""
        newest = await self._collection.find_one({}, {"at": 1}, sort=[("at", DESCENDING)])
        return None if newest is None else newest["at"]

    async def since(self, at: datetime) -> list[Stamp]:
        """Every stamp made at or after `at`."""
        return [
            (str(doc["_id"]), int(doc["v"]), doc["at"])
            async for doc in self._collection.find({"at": {"$gte": at}})
        ]
