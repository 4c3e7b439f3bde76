"""Client tokens: one shared collection, found by the HMAC of the token (never the token)."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel

from app.repositories.database import Database, Document, repository

_SHOWN = {"_id": 0, "key_hash": 0, "sealed_context": 0}


@repository
class ClientTokenRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._collection: Any = database.collection("client_tokens")
        database.declare(
            "client_tokens",
            [
                IndexModel([("key_hash", ASCENDING)], unique=True),
                IndexModel([("tenant_id", ASCENDING), ("token_id", ASCENDING)]),
            ],
        )

    async def insert(self, doc: Document) -> None:
        await self._collection.insert_one(dict(doc))

    async def find_by_key_hash(self, key_hash: str) -> Document | None:
        found: Document | None = await self._collection.find_one(
            {"key_hash": key_hash}, {"_id": 0, "key_hash": 0}
        )
        return found

    async def find_by_id(self, token_id: str, *, tenant_id: str) -> Document | None:
        found: Document | None = await self._collection.find_one(
            {"tenant_id": tenant_id, "token_id": token_id}, {"_id": 0, "key_hash": 0}
        )
        return found

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._collection.count_documents({"tenant_id": tenant_id}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = self._collection.find({"tenant_id": tenant_id}, _SHOWN).sort(
            "created_at", ASCENDING
        )
        return list(await cursor.to_list(None))

    async def delete(self, token_id: str, *, tenant_id: str) -> str | None:
        """Delete one token; its key hash (to forget it in caches), or None if not found."""
        doc = await self._collection.find_one_and_delete(
            {"tenant_id": tenant_id, "token_id": token_id}, {"_id": 0, "key_hash": 1}
        )
        return None if doc is None else str(doc["key_hash"])

    async def drop_all(self, *, tenant_id: str) -> int:
        """Delete every token of the tenant; how many there were."""
        result = await self._collection.delete_many({"tenant_id": tenant_id})
        return int(result.deleted_count)

    async def sealed_all(self, *, tenant_id: str) -> dict[str, str]:
        cursor = self._collection.find(
            {"tenant_id": tenant_id}, {"_id": 0, "token_id": 1, "sealed_context": 1}
        )
        return {doc["token_id"]: doc["sealed_context"] async for doc in cursor}

    async def reseal(self, token_id: str, old: str, new: str, *, tenant_id: str) -> bool:
        result = await self._collection.update_one(
            {"tenant_id": tenant_id, "token_id": token_id, "sealed_context": old},
            {"$set": {"sealed_context": new}},
        )
        return bool(result.modified_count)
