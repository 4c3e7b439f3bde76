"""A tenant's model providers, in the shared `model_providers` collection, unique by
(`tenant_id`, `name`)."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument

from app.repositories.database import Database, Document, repository, utc_now

_SHOWN = {"_id": 0, "tenant_id": 0}


@repository
class ModelProviderRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "model_providers",
            [IndexModel([("tenant_id", ASCENDING), ("name", ASCENDING)], unique=True)],
        )

    def _providers(self, tenant_id: str) -> Any:
        return self._database.scoped("model_providers", tenant_id)

    async def put(self, name: str, document: Document, *, tenant_id: str) -> tuple[Document, bool]:
        """Create or replace the provider `name`; (stored document, created)."""
        now = utc_now()
        fields = {key: value for key, value in document.items() if key not in ("_id", "tenant_id")}
        stored: Document = await self._providers(tenant_id).find_one_and_update(
            {"tenant_id": tenant_id, "name": name},
            {
                "$set": {**fields, "name": name, "updated_at": now},
                "$setOnInsert": {"created_at": now},
            },
            upsert=True,
            projection=_SHOWN,
            return_document=ReturnDocument.AFTER,
        )
        return stored, stored["created_at"] == now

    async def clear_default(self, *, keep: str, tenant_id: str) -> None:
        await self._providers(tenant_id).update_many(
            {"tenant_id": tenant_id, "default": True, "name": {"$ne": keep}},
            {"$set": {"default": False}},
        )

    async def get(self, name: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._providers(tenant_id).find_one(
            {"tenant_id": tenant_id, "name": name}, _SHOWN
        )
        return doc

    async def default(self, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._providers(tenant_id).find_one(
            {"tenant_id": tenant_id, "default": True}, _SHOWN
        )
        return doc

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._providers(tenant_id).count_documents({"tenant_id": tenant_id}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = (
            self._providers(tenant_id)
            .find({"tenant_id": tenant_id}, _SHOWN)
            .sort("name", ASCENDING)
        )
        return list(await cursor.to_list(None))

    async def delete(self, name: str, *, tenant_id: str) -> bool:
        result = await self._providers(tenant_id).delete_one({"tenant_id": tenant_id, "name": name})
        return bool(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._providers(tenant_id).delete_many({"tenant_id": tenant_id})
