"""Calls waiting for a person's approval, in the shared `approvals` collection: a document per
chat that stopped with `approval_required`, found by the digest of its waiting calls and taken
(deleted) by the one continuation that decides them. A TTL index removes those nobody decided
(a TTL index is a single field by MongoDB's rule: it serves no query)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, IndexModel

from app.repositories.database import Database, Document, repository


@repository
class ApprovalRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "approvals",
            [
                IndexModel([("tenant_id", ASCENDING), ("key", ASCENDING), ("holder", ASCENDING)]),
                IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
            ],
        )

    def _waiting(self, tenant_id: str) -> Any:
        return self._database.scoped("approvals", tenant_id)

    async def hold(self, document: Document, *, tenant_id: str) -> None:
        await self._waiting(tenant_id).insert_one({**document, "tenant_id": tenant_id})

    async def take(
        self, key: str, holder: str | None, now: datetime, *, tenant_id: str
    ) -> Document | None:
        """Delete and return one unexpired document of these calls and this holder (atomic: of
        two continuations deciding the same calls, one gets it)."""
        found: Document | None = await self._waiting(tenant_id).find_one_and_delete(
            {"tenant_id": tenant_id, "key": key, "holder": holder, "expires_at": {"$gt": now}},
            {"_id": 0, "tenant_id": 0},
        )
        return found

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._waiting(tenant_id).delete_many({"tenant_id": tenant_id})
