"""Category documents in the shared `categories` collection, unique by (`tenant_id`, `name`)."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, repository, utc_now

_SHOWN = {"_id": 0, "tenant_id": 0}


@repository
class CategoryRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "categories", [IndexModel([("tenant_id", ASCENDING), ("name", ASCENDING)], unique=True)]
        )

    def _categories(self, tenant_id: str) -> Any:
        return self._database.scoped("categories", tenant_id)

    async def insert(self, document: Document, *, tenant_id: str) -> Document:
        now = utc_now()
        stored = {**document, "created_at": now, "updated_at": now}
        try:
            await self._categories(tenant_id).insert_one({**stored, "tenant_id": tenant_id})
        except DuplicateKeyError as exc:
            raise ConflictError(f"a category named '{document['name']}' already exists") from exc
        return stored

    async def insert_if_absent(self, document: Document, *, tenant_id: str) -> None:
        """Insert unless a category of this name exists (idempotent; replicas may race)."""
        now = utc_now()
        try:
            await self._categories(tenant_id).update_one(
                {"tenant_id": tenant_id, "name": document["name"]},
                {"$setOnInsert": {**document, "created_at": now, "updated_at": now}},
                upsert=True,
            )
        except DuplicateKeyError:
            pass  # another seeder inserted it first

    async def exists(self, name: str, *, tenant_id: str) -> bool:
        found = await self._categories(tenant_id).find_one(
            {"tenant_id": tenant_id, "name": name}, {"_id": 1}
        )
        return found is not None

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._categories(tenant_id).count_documents({"tenant_id": tenant_id}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        """Every category of the tenant, by name (a tenant's categories are capped in number)."""
        cursor = self._categories(tenant_id).find({"tenant_id": tenant_id}, _SHOWN).sort("name", 1)
        return list(await cursor.to_list(None))

    async def replace(self, name: str, fields: Document, *, tenant_id: str) -> Document | None:
        fields = {key: value for key, value in fields.items() if key not in ("_id", "tenant_id")}
        doc: Document | None = await self._categories(tenant_id).find_one_and_update(
            {"tenant_id": tenant_id, "name": name},
            {"$set": {**fields, "name": name, "updated_at": utc_now()}},
            projection=_SHOWN,
            return_document=ReturnDocument.AFTER,
        )
        return doc

    async def set_enabled(self, enabled: dict[str, bool], *, tenant_id: str) -> None:
        now = utc_now()
        for value in (True, False):
            names = [name for name, wanted in enabled.items() if wanted is value]
            if names:
                await self._categories(tenant_id).update_many(
                    {"tenant_id": tenant_id, "name": {"$in": names}},
                    {"$set": {"enabled": value, "updated_at": now}},
                )

    async def delete(self, name: str, *, tenant_id: str) -> bool:
        result = await self._categories(tenant_id).delete_one(
            {"tenant_id": tenant_id, "name": name}
        )
        return bool(result.deleted_count == 1)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._categories(tenant_id).delete_many({"tenant_id": tenant_id})
