"""A tenant's named secrets, sealed (see app/crypto.py), unique by `name`."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, ReturnDocument

from app.repositories.database import Database, Document, utc_now

_NO_ID = {"_id": 0}
_LISTED = {"_id": 0, "sealed": 0}


class SecretRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._indexed: set[str] = set()

    def _secrets(self, tenant_id: str) -> Any:
        return self._database.tenant_collection(tenant_id, "secrets")

    async def put(self, name: str, sealed: str, *, tenant_id: str) -> tuple[Document, bool]:
        """Insert or replace; returns the stored entry (without the sealed value) and whether
        it was created. The unique index makes concurrent first writes of a name one document."""
        secrets = self._secrets(tenant_id)
        if tenant_id not in self._indexed:  # idempotent; once per tenant and process
            await secrets.create_index([("name", ASCENDING)], unique=True)
            self._indexed.add(tenant_id)
        now = utc_now()
        before = await secrets.find_one_and_update(
            {"name": name},
            {"$set": {"sealed": sealed, "updated_at": now}, "$setOnInsert": {"created_at": now}},
            upsert=True,
            projection={"_id": 0, "created_at": 1},
            return_document=ReturnDocument.BEFORE,
        )
        created_at = now if before is None else before["created_at"]
        return {"name": name, "created_at": created_at, "updated_at": now}, before is None

    async def exists(self, name: str, *, tenant_id: str) -> bool:
        return await self._secrets(tenant_id).find_one({"name": name}, {"_id": 1}) is not None

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._secrets(tenant_id).count_documents({}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = self._secrets(tenant_id).find({}, _LISTED).sort("name", ASCENDING)
        return list(await cursor.to_list(None))

    async def sealed(self, names: list[str], *, tenant_id: str) -> dict[str, str]:
        """The sealed values of those of `names` that exist."""
        cursor = self._secrets(tenant_id).find(
            {"name": {"$in": names}}, {"_id": 0, "name": 1, "sealed": 1}
        )
        return {doc["name"]: doc["sealed"] async for doc in cursor}

    async def sealed_all(self, *, tenant_id: str) -> dict[str, str]:
        cursor = self._secrets(tenant_id).find({}, {"_id": 0, "name": 1, "sealed": 1})
        return {doc["name"]: doc["sealed"] async for doc in cursor}

    async def reseal(self, name: str, old: str, new: str, *, tenant_id: str) -> bool:
        """Replace `old` by `new` unless the value changed meanwhile (then a PUT won: skip)."""
        result = await self._secrets(tenant_id).update_one(
            {"name": name, "sealed": old}, {"$set": {"sealed": new}}
        )
        return bool(result.modified_count == 1)

    async def delete(self, name: str, *, tenant_id: str) -> bool:
        result = await self._secrets(tenant_id).delete_one({"name": name})
        return bool(result.deleted_count == 1)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._secrets(tenant_id).drop()
        self._indexed.discard(tenant_id)
