"""Calls waiting for a person's approval, one collection per tenant: a document per chat that
stopped with `approval_required`, found by the digest of its waiting calls and taken (deleted)
by the one continuation that decides them, once no call waits for an operator any more. Listed
by `approval_id`, newest first; an operator's decisions are written on it. A TTL index removes
those nobody decided."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument

from app.repositories.database import Database, Document


class ApprovalRepository:
    def __init__(self, database: Database) -> None:
        self._database = database

    def _waiting(self, tenant_id: str) -> Any:
        return self._database.tenant_collection(tenant_id, "approvals")

    async def _ensure_indexes(self, tenant_id: str) -> None:
        """On every hold (a stop for approval is rare): a tenant deleted and made again on
        another replica gets its indexes back, which a per-process memo would not know."""
        waiting = self._waiting(tenant_id)
        await waiting.create_index([("key", ASCENDING), ("holder", ASCENDING)])
        await waiting.create_index([("expires_at", ASCENDING)], expireAfterSeconds=0)
        await waiting.create_index([("approval_id", ASCENDING)])
        await waiting.create_index([("holder", ASCENDING), ("held_at", DESCENDING)])
        await waiting.create_index([("held_at", DESCENDING)])

    async def hold(self, document: Document, *, tenant_id: str) -> None:
        await self._ensure_indexes(tenant_id)
        await self._waiting(tenant_id).insert_one(dict(document))

    async def take(
        self, key: str, holder: str | None, now: datetime, *, tenant_id: str
    ) -> Document | None:
        """Delete and return one unexpired document of these calls and this holder (atomic: of
        two continuations deciding the same calls, one gets it)."""
        found: Document | None = await self._waiting(tenant_id).find_one_and_delete(
            {
                "key": key,
                "holder": holder,
                "expires_at": {"$gt": now},
                "operator_pending": {"$in": [0, None]},  # none waits for an operator now
            },
            {"_id": 0},
        )
        return found

    async def held(
        self, key: str, holder: str | None, now: datetime, *, tenant_id: str
    ) -> Document | None:
        """One unexpired document of these calls and this holder, left where it is."""
        found: Document | None = await self._waiting(tenant_id).find_one(
            {"key": key, "holder": holder, "expires_at": {"$gt": now}}, {"_id": 0}
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
        query: dict[str, Any] = {"expires_at": {"$gt": now}, "approval_id": {"$exists": True}}
        if not every_holder:
            query["holder"] = holder
        cursor = (
            self._waiting(tenant_id)
            .find(query, {"_id": 0})
            .sort([("held_at", DESCENDING), ("approval_id", ASCENDING)])
            .skip(offset)
            .limit(limit)
        )
        return [doc async for doc in cursor]

    async def one(self, approval_id: str, now: datetime, *, tenant_id: str) -> Document | None:
        found: Document | None = await self._waiting(tenant_id).find_one(
            {"approval_id": approval_id, "expires_at": {"$gt": now}}, {"_id": 0}
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
                "approval_id": approval_id,
                "expires_at": {"$gt": now},
                "operator_pending": {"$gt": 0},
            },
            {"$set": changes},
            projection={"_id": 0},
            return_document=ReturnDocument.BEFORE,
        )
        return None if before is None else {**before, **changes}

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._waiting(tenant_id).drop()
