"""Tenants' identity providers: one shared collection, a document per tenant. It is looked up by
tenant (its own routes, `/mcp/{tenant_id}`) and by the (issuer, audience) pair a token carries
(`/chat`, invoke and `/mcp`), which belongs to at most one tenant: a unique index says so."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, repository

_SHOWN = {"_id": 0}


@repository
class IdentityRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._collection: Any = database.collection("identity_providers")
        # `audience_key` is the audience, or the tenant's own endpoint when none is configured
        # (`mcp:{tenant_id}`): two tenants never share a pair.
        database.declare(
            "identity_providers",
            [
                IndexModel([("tenant_id", ASCENDING)], unique=True),
                IndexModel([("issuer", ASCENDING), ("audience_key", ASCENDING)], unique=True),
            ],
        )

    async def find(self, *, tenant_id: str) -> Document | None:
        found: Document | None = await self._collection.find_one({"tenant_id": tenant_id}, _SHOWN)
        return found

    async def find_by_pair(self, issuer: str, audience_key: str) -> Document | None:
        """The configuration whose issuer and audience a token names (the tenant is in it)."""
        found: Document | None = await self._collection.find_one(
            {"issuer": issuer, "audience_key": audience_key}, _SHOWN
        )
        return found

    async def put(self, document: Document, *, tenant_id: str) -> Document:
        """Replace the tenant's configuration (keeping `created_at`); 409 when another tenant
        configured the same issuer and audience."""
        stored = {**document, "tenant_id": tenant_id}
        created_at = stored.pop("created_at")
        try:
            await self._collection.update_one(
                {"tenant_id": tenant_id},
                {"$set": stored, "$setOnInsert": {"created_at": created_at}},
                upsert=True,
            )
        except DuplicateKeyError:
            raise ConflictError(
                "Another tenant already trusts this issuer with this audience: a token must "
                "name one tenant. Configure a distinct audience for each tenant."
            ) from None
        found = await self.find(tenant_id=tenant_id)
        assert found is not None, "just written"
        return found

    async def delete(self, *, tenant_id: str) -> bool:
        result = await self._collection.delete_one({"tenant_id": tenant_id})
        return bool(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._collection.delete_many({"tenant_id": tenant_id})
