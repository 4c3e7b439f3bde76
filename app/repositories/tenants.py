"""Tenant documents: id, the HMAC of the current API key, and the tenant's outbound allow list."""

from __future__ import annotations

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, utc_now

_PROJECTION = {"_id": 0, "tenant_id": 1, "created_at": 1, "key_rotated_at": 1}


class TenantRepository:
    def __init__(self, database: Database) -> None:
        self._collection = database.tenants

    async def ensure_indexes(self) -> None:
        await self._collection.create_index([("tenant_id", ASCENDING)], unique=True)
        await self._collection.create_index([("key_hash", ASCENDING)], unique=True)

    async def insert(self, *, tenant_id: str, key_hash: str) -> Document:
        now = utc_now()
        doc = {
            "tenant_id": tenant_id,
            "key_hash": key_hash,
            "created_at": now,
            "key_rotated_at": now,
        }
        try:
            await self._collection.insert_one(doc)
        except DuplicateKeyError as exc:
            raise ConflictError(f"tenant '{tenant_id}' already exists") from exc
        return {k: doc[k] for k in ("tenant_id", "created_at", "key_rotated_at")}

    async def find_id_by_key_hash(self, key_hash: str) -> str | None:
        doc = await self._collection.find_one({"key_hash": key_hash}, {"_id": 0, "tenant_id": 1})
        return None if doc is None else str(doc["tenant_id"])

    async def page(self, *, limit: int, offset: int) -> tuple[list[Document], int]:
        cursor = self._collection.find({}, _PROJECTION).sort("tenant_id", ASCENDING)
        items = await cursor.skip(offset).limit(limit).to_list(None)
        return items, await self._collection.count_documents({})

    async def all_ids(self) -> list[str]:
        cursor = self._collection.find({}, {"_id": 0, "tenant_id": 1})
        return [str(doc["tenant_id"]) async for doc in cursor]

    async def replace_key_hash(self, *, tenant_id: str, key_hash: str) -> bool:
        result = await self._collection.update_one(
            {"tenant_id": tenant_id},
            {"$set": {"key_hash": key_hash, "key_rotated_at": utc_now()}},
        )
        return result.matched_count == 1

    async def outbound_allow(self, *, tenant_id: str) -> list[str] | None:
        """The tenant's own outbound allow list ([] when it has none); None: no such tenant."""
        doc = await self._collection.find_one(
            {"tenant_id": tenant_id}, {"_id": 0, "outbound_allow": 1}
        )
        return None if doc is None else [str(entry) for entry in doc.get("outbound_allow", [])]

    async def set_outbound_allow(self, allow: list[str], *, tenant_id: str) -> bool:
        result = await self._collection.update_one(
            {"tenant_id": tenant_id}, {"$set": {"outbound_allow": allow}}
        )
        return result.matched_count == 1

    async def seeded_tool_ids(self, *, tenant_id: str) -> set[str]:
        doc = await self._collection.find_one({"tenant_id": tenant_id}, {"seeded_tools": 1})
        return set(doc.get("seeded_tools", [])) if doc else set()

    async def mark_seeded(self, tool_ids: list[str], *, tenant_id: str) -> None:
        await self._collection.update_one(
            {"tenant_id": tenant_id}, {"$addToSet": {"seeded_tools": {"$each": tool_ids}}}
        )

    async def delete(self, *, tenant_id: str) -> bool:
        result = await self._collection.delete_one({"tenant_id": tenant_id})
        return result.deleted_count == 1
