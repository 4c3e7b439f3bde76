"""Moving records between layouts: from the collections per tenant of the layout before shared
collections (`tenant.<id>.<resource>`, up to 29 namespaces a tenant) into the shared
collections, and a tenant's tools from one placement to another (TOOL_COLLECTIONS).

A move goes batch by batch: read up to `BATCH` documents of the source, insert each into the
target unless it is there already (an upsert on its natural key: a name, a run id, a tool id),
then delete exactly those from the source; the source collection (empty by then, with its
indexes) is dropped at the end. So it can stop anywhere (a crash, a timeout) and run again:
nothing is written twice, nothing is deleted before the target has it (writes are journaled),
and what a tenant wrote in the new layout meanwhile wins over the old copy. A tool whose
function name a newer tool already uses stays in the source, counted and logged as an ERROR.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from app.repositories.database import Database, Document, ToolPlacement, repository

logger = logging.getLogger(__name__)

BATCH = 500
# The resources of the layout before shared collections, tools first (what a chat needs most).
LEGACY_RESOURCES = (
    "tools",
    "categories",
    "secrets",
    "mcp_servers",
    "model_providers",
    "approvals",
    "runs",
)
_DUPLICATE_KEY = 11000


@dataclass
class Moved:
    """What one move did."""

    moved: int = 0  # removed from the source, now in the target (inserted, or there already)
    kept: list[str] = field(default_factory=list)  # left in the source: why, for each


@repository
class LayoutMigration:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def move_legacy(self, resource: str, *, tenant_id: str) -> Moved:
        """Move one resource of a tenant from `tenant.<id>.<resource>` to where it lives now."""
        source = self._database.legacy(tenant_id, resource)
        if resource == "tools":
            return await self._move(source, self._database.tools(tenant_id), "tools", tenant_id)
        target = self._database.scoped(resource, tenant_id)
        return await self._move(source, target, resource, tenant_id)

    async def move_tools(self, *, tenant_id: str, source: ToolPlacement) -> Moved:
        """Move a tenant's tools from their collection under `source` to the current one."""
        if source == self._database.tool_placement:
            return Moved()
        origin = self._database.tools(tenant_id, source)
        return await self._move(origin, self._database.tools(tenant_id), "tools", tenant_id)

    async def legacy_collections(self) -> dict[str, list[str]]:
        """The collections of the layout before shared collections still here, by tenant."""
        found: dict[str, list[str]] = {}
        for name in await self._database.collection_names():
            prefix, _, rest = name.partition(".")
            tenant_id, _, resource = rest.rpartition(".")
            if prefix == "tenant" and tenant_id and resource in LEGACY_RESOURCES:
                found.setdefault(tenant_id, []).append(resource)
        return found

    async def drop_legacy(self, resource: str, *, tenant_id: str) -> None:
        """Drop a legacy collection of a tenant that no longer exists."""
        await self._database.legacy(tenant_id, resource).drop()

    async def _move(self, source: Any, target: Any, resource: str, tenant_id: str) -> Moved:
        moved = Moved()
        skip: list[Any] = []  # ids left in the source (a function name taken)
        while True:
            query = {"_id": {"$nin": skip}} if skip else {}
            batch = await source.find(query).limit(BATCH).to_list(None)
            if not batch:
                break
            refused = await self._insert(target, resource, tenant_id, batch)
            for index, reason in refused.items():
                skip.append(batch[index]["_id"])
                moved.kept.append(f"{resource} {_label(batch[index])}: {reason}")
            done = [doc["_id"] for i, doc in enumerate(batch) if i not in refused]
            if done:
                await source.delete_many({"_id": {"$in": done}})
            moved.moved += len(done)
        if skip:
            for reason in moved.kept:
                logger.error("migration: tenant %s: not moved: %s", tenant_id, reason)
        else:
            await source.drop()
        return moved

    async def _insert(
        self, target: Any, resource: str, tenant_id: str, batch: list[Document]
    ) -> dict[int, str]:
        """Insert each unless there already; {batch index: why it was refused}."""
        writes = [_upsert(resource, tenant_id, doc) for doc in batch]
        try:
            await target.bulk_write(writes, ordered=False)
        except BulkWriteError as exc:
            refused = {}
            for error in exc.details.get("writeErrors", []):
                if error.get("code") != _DUPLICATE_KEY or resource != "tools":
                    raise
                refused[int(error["index"])] = "another tool has its function name"
            return refused
        return {}


def _upsert(resource: str, tenant_id: str, doc: Document) -> UpdateOne:
    """Insert `doc` unless the target has it (by its natural key): a newer write wins."""
    fields = {key: value for key, value in doc.items() if key != "_id"}
    if resource == "tools":
        return UpdateOne({"_id": fields["tool_id"]}, {"$setOnInsert": fields}, upsert=True)
    fields["tenant_id"] = tenant_id
    if resource == "runs":  # a record's id is its run id (the layout before used both)
        key: Document = {"_id": fields.get("run_id", doc["_id"])}
    elif resource == "approvals":
        key = {"_id": doc["_id"]}
    else:
        key = {"tenant_id": tenant_id, "name": fields["name"]}
    return UpdateOne(key, {"$setOnInsert": fields}, upsert=True)


def _label(doc: Document) -> str:
    return str(doc.get("tool_id") or doc.get("name") or doc.get("_id"))
