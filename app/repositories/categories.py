"""Category documents, one collection per tenant, unique by `name`."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, utc_now

_NO_ID = {"_id": 0}


class CategoryRepository:
    def __init__(self, database: Database) -> None:
        self._database = database

    def _categories(self, tenant_id: str) -> Any:
        return self._database.tenant_collection(tenant_id, "categories")

    async def ensure_indexes(self, *, tenant_id: str) -> None:
        await self._categories(tenant_id).create_index([("name", ASCENDING)], unique=True)

    async def insert(self, document: Document, *, tenant_id: str) -> Document:
        now = utc_now()
        stored = {**document, "created_at": now, "updated_at": now}
        try:
            await self._categories(tenant_id).insert_one(stored)
        except DuplicateKeyError as exc:
            raise ConflictError(f"a category named '{document['name']}' already exists") from exc
        stored.pop("_id", None)
        return stored

    async def insert_if_absent(self, document: Document, *, tenant_id: str) -> None:
        """Insert unless a category of this name exists (idempotent; replicas may race)."""
        now = utc_now()
        try:
            await self._categories(tenant_id).update_one(
                {"name": document["name"]},
                {"$setOnInsert": {**document, "created_at": now, "updated_at": now}},
                upsert=True,
            )
        except DuplicateKeyError:
            pass  # another seeder inserted it first

    async def exists(self, name: str, *, tenant_id: str) -> bool:
        found = await self._categories(tenant_id).find_one({"name": name}, {"_id": 1})
        return found is not None

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._categories(tenant_id).count_documents({}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        """Every category of the tenant, by name (a tenant's categories are capped in number)."""
        cursor = self._categories(tenant_id).find({}, _NO_ID).sort("name", ASCENDING)
        return list(await cursor.to_list(None))

    async def replace(self, name: str, fields: Document, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._categories(tenant_id).find_one_and_update(
            {"name": name},
            {"$set": {**fields, "name": name, "updated_at": utc_now()}},
            projection=_NO_ID,
            return_document=ReturnDocument.AFTER,
        )
        return doc

    async def set_enabled(self, enabled: dict[str, bool], *, tenant_id: str) -> None:
        now = utc_now()
        for value in (True, False):
            names = [name for name, wanted in enabled.items() if wanted is value]
            if names:
                await self._categories(tenant_id).update_many(
                    {"name": {"$in": names}}, {"$set": {"enabled": value, "updated_at": now}}
                )

    async def delete(self, name: str, *, tenant_id: str) -> bool:
        result = await self._categories(tenant_id).delete_one({"name": name})
        return bool(result.deleted_count == 1)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._categories(tenant_id).drop()
