"""A tenant's model providers, in the tenant's own collection, unique by `name`."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, ReturnDocument

from app.repositories.database import Database, Document, utc_now

_NO_ID = {"_id": 0}


class ModelProviderRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._indexed: set[str] = set()

    def _providers(self, tenant_id: str) -> Any:
        return self._database.tenant_collection(tenant_id, "model_providers")

    async def put(self, name: str, document: Document, *, tenant_id: str) -> tuple[Document, bool]:
        """Create or replace the provider `name`; (stored document, created)."""
        providers = self._providers(tenant_id)
        if tenant_id not in self._indexed:  # idempotent; once per tenant and process
            await providers.create_index([("name", ASCENDING)], unique=True)
            self._indexed.add(tenant_id)
        now = utc_now()
        stored: Document = await providers.find_one_and_update(
            {"name": name},
            {
                "$set": {**document, "name": name, "updated_at": now},
                "$setOnInsert": {"created_at": now},
            },
            upsert=True,
            projection=_NO_ID,
            return_document=ReturnDocument.AFTER,
        )
        return stored, stored["created_at"] == now

    async def clear_default(self, *, keep: str, tenant_id: str) -> None:
        await self._providers(tenant_id).update_many(
            {"default": True, "name": {"$ne": keep}}, {"$set": {"default": False}}
        )

    async def get(self, name: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._providers(tenant_id).find_one({"name": name}, _NO_ID)
        return doc

    async def default(self, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._providers(tenant_id).find_one({"default": True}, _NO_ID)
        return doc

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._providers(tenant_id).count_documents({}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = self._providers(tenant_id).find({}, _NO_ID).sort("name", ASCENDING)
        return list(await cursor.to_list(None))

    async def delete(self, name: str, *, tenant_id: str) -> bool:
        result = await self._providers(tenant_id).delete_one({"name": name})
        return bool(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._providers(tenant_id).drop()
        self._indexed.discard(tenant_id)
