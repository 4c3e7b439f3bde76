"""A tenant's registered MCP servers, in the tenant's own collection, unique by `name`."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, utc_now

_NO_ID = {"_id": 0}


class McpServerRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._indexed: set[str] = set()

    def _servers(self, tenant_id: str) -> Any:
        return self._database.tenant_collection(tenant_id, "mcp_servers")

    async def insert(self, document: Document, *, tenant_id: str) -> Document:
        servers = self._servers(tenant_id)
        if tenant_id not in self._indexed:  # idempotent; once per tenant and process
            await servers.create_index([("name", ASCENDING)], unique=True)
            self._indexed.add(tenant_id)
        stored = {**document, "created_at": utc_now()}
        try:
            await servers.insert_one(stored)
        except DuplicateKeyError as exc:
            raise ConflictError(f"an MCP server named '{document['name']}' already exists") from exc
        stored.pop("_id", None)
        return stored

    async def get(self, name: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._servers(tenant_id).find_one({"name": name}, _NO_ID)
        return doc

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._servers(tenant_id).count_documents({}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = self._servers(tenant_id).find({}, _NO_ID).sort("name", ASCENDING)
        return list(await cursor.to_list(None))

    async def delete(self, name: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._servers(tenant_id).find_one_and_delete(
            {"name": name}, projection=_NO_ID
        )
        return doc

    async def replace(self, name: str, document: Document, *, tenant_id: str) -> Document | None:
        """Every field of the entry but its name and creation time; None if it is gone."""
        fields = {**document, "updated_at": utc_now()}
        fields.pop("name", None)
        doc: Document | None = await self._servers(tenant_id).find_one_and_update(
            {"name": name},
            {"$set": fields},
            projection=_NO_ID,
            return_document=ReturnDocument.AFTER,
        )
        return doc

    async def reseal_headers(
        self, name: str, old: dict[str, str], new: dict[str, str], *, tenant_id: str
    ) -> bool:
        """Swap sealed header values, unless the entry changed meanwhile."""
        result = await self._servers(tenant_id).update_one(
            {"name": name, "headers": old}, {"$set": {"headers": new}}
        )
        return bool(result.modified_count == 1)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._servers(tenant_id).drop()
        self._indexed.discard(tenant_id)
