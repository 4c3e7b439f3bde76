"""MCP tools' stored settings (category, timeout, output, approval, presets): the shared
`mcp_tool_settings` collection, every query led by the tenant, a document per `{server}__{tool}`
id, unique by (`tenant_id`, `tool_id`)."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument

from app.repositories.database import Database, Document, repository

_SHOWN = {"_id": 0, "tenant_id": 0}


@repository
class McpToolSettingsRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        database.declare(
            "mcp_tool_settings",
            [IndexModel([("tenant_id", ASCENDING), ("tool_id", ASCENDING)], unique=True)],
        )

    def _settings(self, tenant_id: str) -> Any:
        return self._database.scoped("mcp_tool_settings", tenant_id)

    async def all(self, *, tenant_id: str) -> list[Document]:
        cursor = self._settings(tenant_id).find({"tenant_id": tenant_id}, _SHOWN)
        return [doc async for doc in cursor]

    async def get(self, tool_id: str, *, tenant_id: str) -> Document | None:
        found: Document | None = await self._settings(tenant_id).find_one(
            {"tenant_id": tenant_id, "tool_id": tool_id}, _SHOWN
        )
        return found

    async def put(self, tool_id: str, document: Document, *, tenant_id: str) -> Document:
        """Store the settings whole (replacing any), and return them as stored."""
        stored = {**document, "tenant_id": tenant_id, "tool_id": tool_id}
        await self._settings(tenant_id).find_one_and_replace(
            {"tenant_id": tenant_id, "tool_id": tool_id},
            stored,
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return {k: v for k, v in stored.items() if k != "tenant_id"}

    async def delete(self, tool_id: str, *, tenant_id: str) -> bool:
        result = await self._settings(tenant_id).delete_one(
            {"tenant_id": tenant_id, "tool_id": tool_id}
        )
        return bool(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._settings(tenant_id).delete_many({"tenant_id": tenant_id})
