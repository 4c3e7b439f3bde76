"""Calls waiting for a person's approval, one collection per tenant: a document per chat that
stopped with `approval_required`, found by the digest of its waiting calls and taken (deleted)
by the one continuation that decides them. A TTL index removes those nobody decided."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING

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

    async def hold(self, document: Document, *, tenant_id: str) -> None:
        await self._ensure_indexes(tenant_id)
        await self._waiting(tenant_id).insert_one(dict(document))

    async def take(
        self, key: str, holder: str | None, now: datetime, *, tenant_id: str
    ) -> Document | None:
        """Delete and return one unexpired document of these calls and this holder (atomic: of
        two continuations deciding the same calls, one gets it)."""
        found: Document | None = await self._waiting(tenant_id).find_one_and_delete(
            {"key": key, "holder": holder, "expires_at": {"$gt": now}}, {"_id": 0}
        )
        return found

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._waiting(tenant_id).drop()
