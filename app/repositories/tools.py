"""Tool documents, one collection per tenant (app/repositories/database.py `Database.tools`).

The document's `_id` is its `tool_id` (unique, and the order of listings), and one index makes
`function.name` unique: a tenant's tools cost three namespaces (the collection and two indexes).
Queries by category scan the tenant's tools, which MAX_TOOLS_PER_TENANT bounds.

The embedded store keeps the function names in a dictionary instead of a unique index
(`MemoryNames`): mongomock checks a unique index by scanning every document of the collection,
so a tenant's tool creation grew with its tools (44 ms at 5,000); its `_id` check is a lookup.
"""

from __future__ import annotations

import weakref
from typing import Any

import pymongo
from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import (
    INDEX_TIMEOUT_S,
    Database,
    Document,
    ToolPlacement,
    create_missing_indexes,
    repository,
    utc_now,
)

_NO_ID = {"_id": 0}
_UNIQUE_FIELDS = {"_id": "tool_id", "tool_id": "tool_id", "function.name": "function name"}
TOOL_INDEXES = [IndexModel([("function.name", ASCENDING)], unique=True)]


class MemoryNames:
    """The embedded store's unique function names: per tenant, name -> tool id and back."""

    def __init__(self) -> None:
        self._names: dict[str, dict[str, str]] = {}
        self._tools: dict[str, dict[str, str]] = {}

    def taken(self, tenant_id: str, name: str, tool_id: str) -> bool:
        """Another tool of the tenant has this function name."""
        return self._names.get(tenant_id, {}).get(name, tool_id) != tool_id

    def known(self, tenant_id: str, tool_id: str) -> bool:
        return tool_id in self._tools.get(tenant_id, {})

    def put(self, tenant_id: str, name: str, tool_id: str) -> None:
        self.remove(tenant_id, tool_id)
        self._names.setdefault(tenant_id, {})[name] = tool_id
        self._tools.setdefault(tenant_id, {})[tool_id] = name

    def remove(self, tenant_id: str, tool_id: str) -> None:
        name = self._tools.get(tenant_id, {}).pop(tool_id, None)
        if name is not None:
            self._names[tenant_id].pop(name, None)

    def drop(self, tenant_id: str) -> None:
        self._names.pop(tenant_id, None)
        self._tools.pop(tenant_id, None)


_MEMORY_NAMES: weakref.WeakKeyDictionary[Database, MemoryNames] = weakref.WeakKeyDictionary()


def _name(document: Document) -> str:
    return str(document.get("function", {}).get("name", ""))


@repository
class ToolRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        # One per embedded store, whichever repository object writes to it.
        self._names = (
            _MEMORY_NAMES.setdefault(database, MemoryNames()) if database.in_memory else None
        )

    def _tools(self, tenant_id: str) -> Any:
        return self._database.tools(tenant_id)

    async def ensure_indexes(self, *, tenant_id: str) -> None:
        """The function-name index (idempotent; created with the collection, at the tenant's
        creation or reconciliation)."""
        if self._names is not None:
            return  # the embedded store: MemoryNames
        with pymongo.timeout(INDEX_TIMEOUT_S):
            await create_missing_indexes(self._tools(tenant_id), TOOL_INDEXES)

    async def insert(self, document: Document, *, tenant_id: str) -> Document:
        now = utc_now()
        stored = {**document, "created_at": now, "updated_at": now}
        tool_id, name = document["tool_id"], _name(document)
        try:
            if self._names is not None and self._names.taken(tenant_id, name, tool_id):
                raise DuplicateKeyError("E11000 function.name", 11000)
            await self._tools(tenant_id).insert_one({"_id": tool_id, **stored})
        except DuplicateKeyError as exc:
            # With both keys taken the server names whichever index it checked first: say the
            # tool_id is taken when it is, since that is the conflict a client fixes first.
            taken = await self._tools(tenant_id).find_one({"_id": tool_id}, {"_id": 1})
            raise _conflict("tool_id" if taken else "function name", document) from exc
        if self._names is not None:
            self._names.put(tenant_id, name, tool_id)
        return stored

    async def insert_if_absent(self, document: Document, *, tenant_id: str) -> str:
        """Insert unless a tool with this tool_id exists: 'inserted', 'present' or 'conflict'.

        Safe to run from many processes at once: the unique index decides, never a read first.
        """
        now = utc_now()
        tool_id, name = document["tool_id"], _name(document)
        if self._names is not None:  # one process: nothing can come between these
            if self._names.known(tenant_id, tool_id):
                return "present"
            if self._names.taken(tenant_id, name, tool_id):
                return "conflict"
            self._names.put(tenant_id, name, tool_id)
        for _ in range(2):
            try:
                result = await self._tools(tenant_id).update_one(
                    {"_id": document["tool_id"]},
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
        doc: Document | None = await self._tools(tenant_id).find_one({"_id": tool_id}, _NO_ID)
        return doc

    async def count(self, *, tenant_id: str) -> int:
        return int(await self._tools(tenant_id).count_documents({}))

    async def all(self, *, tenant_id: str) -> list[Document]:
        """Every tool of the tenant, ordered by tool_id (a tenant's tools are capped in number)."""
        cursor = self._tools(tenant_id).find({}, _NO_ID).sort("_id", ASCENDING)
        return list(await cursor.to_list(None))

    async def replace(self, tool_id: str, document: Document, *, tenant_id: str) -> Document | None:
        # Every top-level field of a validated tool is always present, so $set of all of them is a
        # full replacement that keeps created_at.
        update = {**document, "tool_id": tool_id, "updated_at": utc_now()}
        update.pop("_id", None)
        if self._names is not None and self._names.taken(tenant_id, _name(update), tool_id):
            raise _conflict("function name", update)
        try:
            doc: Document | None = await self._tools(tenant_id).find_one_and_update(
                {"_id": tool_id},
                {"$set": update},
                projection=_NO_ID,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError as exc:  # the _id is the match: the function name is taken
            raise _conflict("function name", update) from exc
        if doc is not None and self._names is not None:
            self._names.put(tenant_id, _name(update), tool_id)
        if doc is not None and "created_at" not in doc:  # a document written by other means
            doc["created_at"] = update["updated_at"]
            await self._tools(tenant_id).update_one(
                {"_id": tool_id, "created_at": {"$exists": False}},
                {"$set": {"created_at": doc["created_at"]}},
            )
        return doc

    async def delete(self, tool_id: str, *, tenant_id: str) -> bool:
        result = await self._tools(tenant_id).delete_one({"_id": tool_id})
        if self._names is not None:
            self._names.remove(tenant_id, tool_id)
        return bool(result.deleted_count == 1)

    async def ids_in_category(self, category: str, *, tenant_id: str) -> list[str]:
        """The ids of the tools of one category (a tool without one is in `default`)."""
        cursor = self._tools(tenant_id).find({"category": category}, {"_id": 1})
        return sorted(str(doc["_id"]) for doc in await cursor.to_list(None))

    async def delete_in_category(self, category: str, *, tenant_id: str) -> int:
        if self._names is not None:
            found = self._tools(tenant_id).find({"category": category}, {"_id": 1})
            for doc in await found.to_list(None):
                self._names.remove(tenant_id, str(doc["_id"]))
        result = await self._tools(tenant_id).delete_many({"category": category})
        return int(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._tools(tenant_id).drop()
        if self._names is not None:
            self._names.drop(tenant_id)

    async def copy_in(
        self, documents: list[Document], *, tenant_id: str, placement: ToolPlacement | None = None
    ) -> int:
        """Insert each document unless its tool_id is there already (the migration and a move
        between placements; idempotent): how many were inserted."""
        target = self._database.tools(tenant_id, placement)
        inserted = 0
        for document in documents:
            fields = {key: value for key, value in document.items() if key != "_id"}
            try:
                result = await target.update_one(
                    {"_id": fields["tool_id"]}, {"$setOnInsert": fields}, upsert=True
                )
            except DuplicateKeyError:  # the function name is taken by a newer tool: it wins
                continue
            inserted += result.upserted_id is not None
        return inserted


def _key_field(exc: DuplicateKeyError) -> str | None:
    """Which unique key was taken, when the server says (the embedded store does not)."""
    pattern = (exc.details or {}).get("keyPattern") or {}
    if pattern:
        return _UNIQUE_FIELDS.get(str(next(iter(pattern))))
    message = str(exc)
    if "function.name" in message or "function_name" in message:
        return "function name"
    return "tool_id" if "_id_" in message else None


def _conflict(field: str | None, document: Document) -> ConflictError:
    if field == "function name":
        name = document.get("function", {}).get("name")
        return ConflictError(f"another tool of this tenant already has the function name '{name}'")
    return ConflictError(f"a tool with tool_id '{document.get('tool_id')}' already exists")
