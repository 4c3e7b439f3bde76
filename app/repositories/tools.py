"""Tool documents, one collection per tenant, unique by `tool_id` and by `function.name`."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, utc_now

_NO_ID = {"_id": 0}
_UNIQUE_FIELDS = {"tool_id": "tool_id", "function.name": "function name"}


class ToolRepository:
    def __init__(self, database: Database) -> None:
        self._database = database

    def _tools(self, tenant_id: str) -> Any:
        return self._database.tenant_collection(tenant_id, "tools")

    async def ensure_indexes(self, *, tenant_id: str) -> None:
        tools = self._tools(tenant_id)
        for field in _UNIQUE_FIELDS:
            await tools.create_index([(field, ASCENDING)], unique=True)
        await tools.create_index([("tags", ASCENDING)])
        await tools.create_index([("category", ASCENDING)])

    async def insert(self, document: Document, *, tenant_id: str) -> Document:
        now = utc_now()
        stored = {**document, "created_at": now, "updated_at": now}
        try:
            await self._tools(tenant_id).insert_one(stored)
        except DuplicateKeyError as exc:
            # With both keys taken the server names whichever index it checked first: say the
            # tool_id is taken when it is, since that is the conflict a client fixes first.
            taken = await self._tools(tenant_id).find_one({"tool_id": document["tool_id"]}, _NO_ID)
            raise _conflict(exc if taken is None else None, document) from exc
        stored.pop("_id", None)
        return stored

    async def insert_if_absent(self, document: Document, *, tenant_id: str) -> str:
        """Insert unless a tool with this tool_id exists: 'inserted', 'present' or 'conflict'.

        Safe to run from many processes at once: the unique index decides, never a read first.
        """
        now = utc_now()
        for _ in range(2):
            try:
                result = await self._tools(tenant_id).update_one(
                    {"tool_id": document["tool_id"]},
                    {"$setOnInsert": {**document, "created_at": now, "updated_at": now}},
                    upsert=True,
                )
            except DuplicateKeyError as exc:
                if _key_field(exc) == "tool_id":
                    continue  # another seeder inserted it between our match and insert: retry
                return "conflict"
            return "inserted" if result.upserted_id is not None else "present"
        return "present"

    async def get(self, tool_id: str, *, tenant_id: str) -> Document | None:
        doc: Document | None = await self._tools(tenant_id).find_one({"tool_id": tool_id}, _NO_ID)
        return doc

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._tools(tenant_id).count_documents({}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        """Every tool of the tenant, ordered by tool_id (a tenant's tools are capped in number)."""
        cursor = self._tools(tenant_id).find({}, _NO_ID).sort("tool_id", ASCENDING)
        return list(await cursor.to_list(None))

    async def replace(self, tool_id: str, document: Document, *, tenant_id: str) -> Document | None:
        # Every top-level field of a validated tool is always present, so $set of all of them is a
        # full replacement that keeps created_at.
        update = {**document, "tool_id": tool_id, "updated_at": utc_now()}
        try:
            doc: Document | None = await self._tools(tenant_id).find_one_and_update(
                {"tool_id": tool_id},
                {"$set": update},
                projection=_NO_ID,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError as exc:
            raise _conflict(exc, update) from exc
        if doc is not None and "created_at" not in doc:  # a document written by other means
            doc["created_at"] = update["updated_at"]
            await self._tools(tenant_id).update_one(
                {"tool_id": tool_id, "created_at": {"$exists": False}},
                {"$set": {"created_at": doc["created_at"]}},
            )
        return doc

    async def delete(self, tool_id: str, *, tenant_id: str) -> bool:
        result = await self._tools(tenant_id).delete_one({"tool_id": tool_id})
        return bool(result.deleted_count == 1)

    async def ids_in_category(self, category: str, *, tenant_id: str) -> list[str]:
        """The ids of the tools of one category (a tool without one is in `default`)."""
        cursor = self._tools(tenant_id).find({"category": category}, {"_id": 0, "tool_id": 1})
        return sorted(str(doc["tool_id"]) for doc in await cursor.to_list(None))

    async def delete_in_category(self, category: str, *, tenant_id: str) -> int:
        result = await self._tools(tenant_id).delete_many({"category": category})
        return int(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._tools(tenant_id).drop()


def _key_field(exc: DuplicateKeyError) -> str | None:
    pattern = (exc.details or {}).get("keyPattern") or {}
    if pattern:
        return str(next(iter(pattern)))
    message = str(exc)
    return next((field for field in _UNIQUE_FIELDS if field.replace(".", "_") in message), None)


def _conflict(exc: DuplicateKeyError | None, document: Document) -> ConflictError:
    field = "tool_id" if exc is None else _key_field(exc)
    if field == "function.name":
        name = document.get("function", {}).get("name")
        return ConflictError(f"another tool of this tenant already has the function name '{name}'")
    return ConflictError(f"a tool with tool_id '{document.get('tool_id')}' already exists")
