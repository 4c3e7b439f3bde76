"""A tenant's named secrets, sealed (see app/crypto.py), in the shared `secrets` collection,
unique by (`tenant_id`, `name`)."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument

from app.repositories.database import Database, Document, repository, utc_now

_LISTED = {"_id": 0, "tenant_id": 0, "sealed": 0}


@repository
class SecretRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "secrets", [IndexModel([("tenant_id", ASCENDING), ("name", ASCENDING)], unique=True)]
        )

    def _secrets(self, tenant_id: str) -> Any:
        return self._database.scoped("secrets", tenant_id)

    async def put(self, name: str, sealed: str, *, tenant_id: str) -> tuple[Document, bool]:
        """Insert or replace; returns the stored entry (without the sealed value) and whether
        it was created. The unique index makes concurrent first writes of a name one document."""
        now = utc_now()
        before = await self._secrets(tenant_id).find_one_and_update(
            {"tenant_id": tenant_id, "name": name},
            {"$set": {"sealed": sealed, "updated_at": now}, "$setOnInsert": {"created_at": now}},
            upsert=True,
            projection={"_id": 0, "created_at": 1},
            return_document=ReturnDocument.BEFORE,
        )
        created_at = now if before is None else before["created_at"]
        return {"name": name, "created_at": created_at, "updated_at": now}, before is None

    async def exists(self, name: str, *, tenant_id: str) -> bool:
        found = await self._secrets(tenant_id).find_one(
            {"tenant_id": tenant_id, "name": name}, {"_id": 1}
        )
        return found is not None

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._secrets(tenant_id).count_documents({"tenant_id": tenant_id}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = (
            self._secrets(tenant_id).find({"tenant_id": tenant_id}, _LISTED).sort("name", ASCENDING)
        )
        return list(await cursor.to_list(None))

    async def sealed(self, names: list[str], *, tenant_id: str) -> dict[str, str]:
        """The sealed values of those of `names` that exist."""
        cursor = self._secrets(tenant_id).find(
            {"tenant_id": tenant_id, "name": {"$in": names}}, {"_id": 0, "name": 1, "sealed": 1}
        )
        return {doc["name"]: doc["sealed"] async for doc in cursor}

    async def sealed_all(self, *, tenant_id: str) -> dict[str, str]:
        cursor = self._secrets(tenant_id).find(
            {"tenant_id": tenant_id}, {"_id": 0, "name": 1, "sealed": 1}
        )
        return {doc["name"]: doc["sealed"] async for doc in cursor}

    async def reseal(self, name: str, old: str, new: str, *, tenant_id: str) -> bool:
        """Replace `old` by `new` unless the value changed meanwhile (then a PUT won: skip)."""
        result = await self._secrets(tenant_id).update_one(
            {"tenant_id": tenant_id, "name": name, "sealed": old}, {"$set": {"sealed": new}}
        )
        return bool(result.modified_count == 1)

    async def delete(self, name: str, *, tenant_id: str) -> bool:
        result = await self._secrets(tenant_id).delete_one({"tenant_id": tenant_id, "name": name})
        return bool(result.deleted_count == 1)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._secrets(tenant_id).delete_many({"tenant_id": tenant_id})
