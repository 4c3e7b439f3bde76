"""A tenant's registered MCP servers, in the shared `mcp_servers` collection, unique by
(`tenant_id`, `name`)."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, repository, utc_now

_SHOWN = {"_id": 0, "tenant_id": 0}


@repository
class McpServerRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "mcp_servers",
            [IndexModel([("tenant_id", ASCENDING), ("name", ASCENDING)], unique=True)],
        )

    def _servers(self, tenant_id: str) -> Any:
        return self._database.scoped("mcp_servers", tenant_id)

    async def insert(self, document: Document, *, tenant_id: str) -> Document:
        stored = {**document, "created_at": utc_now()}
        try:
            await self._servers(tenant_id).insert_one({**stored, "tenant_id": tenant_id})
        except DuplicateKeyError as exc:
            raise ConflictError(f"an MCP server named '{document['name']}' already exists") from exc
        return stored

    async def get(self, name: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._servers(tenant_id).find_one(
            {"tenant_id": tenant_id, "name": name}, _SHOWN
        )
        return doc

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._servers(tenant_id).count_documents({"tenant_id": tenant_id}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = (
            self._servers(tenant_id).find({"tenant_id": tenant_id}, _SHOWN).sort("name", ASCENDING)
        )
        return list(await cursor.to_list(None))

    async def delete(self, name: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._servers(tenant_id).find_one_and_delete(
            {"tenant_id": tenant_id, "name": name}, projection=_SHOWN
        )
        return doc

    async def replace(self, name: str, document: Document, *, tenant_id: str) -> Document | None:
        """Every field of the entry but its name and creation time; None if it is gone."""
        fields = {**document, "updated_at": utc_now()}
        fields.pop("name", None)
        doc: Document | None = await self._servers(tenant_id).find_one_and_update(
            {"tenant_id": tenant_id, "name": name},
            {"$set": fields},
            projection=_SHOWN,
            return_document=ReturnDocument.AFTER,
        )
        return doc

    async def reseal_headers(
        self, name: str, old: dict[str, str], new: dict[str, str], *, tenant_id: str
    ) -> bool:
        """Swap sealed header values, unless the entry changed meanwhile."""
        result = await self._servers(tenant_id).update_one(
            {"tenant_id": tenant_id, "name": name, "headers": old}, {"$set": {"headers": new}}
        )
        return bool(result.modified_count == 1)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._servers(tenant_id).delete_many({"tenant_id": tenant_id})
