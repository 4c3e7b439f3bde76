"""Calls waiting for a person's approval, in the shared `approvals` collection: a document per
chat that stopped with `approval_required`, found by the digest of its waiting calls and taken
(deleted) by the one continuation that decides them, once no call waits for an operator any
more. Listed by `approval_id`, newest first; an operator's decisions are written on it. A TTL
index removes those nobody decided (a TTL index is a single field by MongoDB's rule: it serves no
query); every index that serves a query leads with `tenant_id`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel, ReturnDocument

from app.repositories.database import Database, Document, repository

_HIDDEN = {"_id": 0, "tenant_id": 0}


@repository
class ApprovalRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "approvals",
            [
                IndexModel([("tenant_id", ASCENDING), ("key", ASCENDING), ("holder", ASCENDING)]),
                IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
                IndexModel([("tenant_id", ASCENDING), ("approval_id", ASCENDING)]),
                IndexModel(
                    [("tenant_id", ASCENDING), ("holder", ASCENDING), ("held_at", DESCENDING)]
                ),
                IndexModel([("tenant_id", ASCENDING), ("held_at", DESCENDING)]),
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
            {
                "tenant_id": tenant_id,
                "key": key,
                "holder": holder,
                "expires_at": {"$gt": now},
                "operator_pending": {"$in": [0, None]},  # none waits for an operator now
            },
            _HIDDEN,
        )
        return found

    async def held(
        self, key: str, holder: str | None, now: datetime, *, tenant_id: str
    ) -> Document | None:
        """One unexpired document of these calls and this holder, left where it is."""
        found: Document | None = await self._waiting(tenant_id).find_one(
            {"tenant_id": tenant_id, "key": key, "holder": holder, "expires_at": {"$gt": now}},
            _HIDDEN,
        )
        return found

    async def waiting(
        self,
        now: datetime,
        *,
        tenant_id: str,
        holder: str | None,
        every_holder: bool,
        limit: int,
        offset: int,
    ) -> list[Document]:
        """Unexpired documents, newest first: every holder's, or one holder's only."""
        query: dict[str, Any] = {
            "tenant_id": tenant_id,
            "expires_at": {"$gt": now},
            "approval_id": {"$exists": True},
        }
        if not every_holder:
            query["holder"] = holder
        cursor = (
            self._waiting(tenant_id)
            .find(query, _HIDDEN)
            .sort([("held_at", DESCENDING), ("approval_id", ASCENDING)])
            .skip(offset)
            .limit(limit)
        )
        return [doc async for doc in cursor]

    async def one(self, approval_id: str, now: datetime, *, tenant_id: str) -> Document | None:
        found: Document | None = await self._waiting(tenant_id).find_one(
            {"tenant_id": tenant_id, "approval_id": approval_id, "expires_at": {"$gt": now}},
            _HIDDEN,
        )
        return found

    async def decide(
        self, approval_id: str, decisions: dict[str, Any], now: datetime, *, tenant_id: str
    ) -> Document | None:
        """Write an operator's decisions on a document that still waits for them (atomic: of
        two operators deciding at once, one does); the document as written, None when none
        waits. (It is read as it was and the change applied here: the embedded store finds no
        document "after" an update that no longer matches its filter.)"""
        changes = {"decisions": decisions, "operator_pending": 0}
        before: Document | None = await self._waiting(tenant_id).find_one_and_update(
            {
                "tenant_id": tenant_id,
                "approval_id": approval_id,
                "expires_at": {"$gt": now},
                "operator_pending": {"$gt": 0},
            },
            {"$set": changes},
            projection=_HIDDEN,
            return_document=ReturnDocument.BEFORE,
        )
        return None if before is None else {**before, **changes}

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._waiting(tenant_id).delete_many({"tenant_id": tenant_id})
