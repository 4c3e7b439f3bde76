"""Tenant documents: id, the HMAC of the current API key, the tenant's outbound allow list, and
its reconciliation stamp (which layout, tool placement and function dictionary it has).

One shared `tenants` collection (unique by `tenant_id` and by `key_hash`). The embedded store
keeps tenants in dictionaries instead (`MemoryTenantRepository`): mongomock scans a collection
for each query and unique check, so a tenant's creation grew with the number of tenants (970 ms
at 2,250 tenants); here it is O(1). Both keep one contract (tests/repositories/test_tenants.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import ConflictError
from app.repositories.database import Database, Document, repository, utc_now

_PROJECTION = {"_id": 0, "tenant_id": 1, "created_at": 1, "key_rotated_at": 1}
_SHOWN = ("tenant_id", "created_at", "key_rotated_at")


@dataclass(frozen=True, slots=True)
class KeyOwner:
    """The tenant a key belongs to, and the tenant's reconciliation stamp (None: never)."""

    tenant_id: str
    stamp: str | None


class TenantStore(Protocol):
    """What the services need of the tenants' directory (MongoDB or the embedded store)."""

    async def insert(
        self, *, tenant_id: str, key_hash: str, stamp: str | None = None, claim_s: float = 0.0
    ) -> Document: ...

    async def find_by_key_hash(self, key_hash: str) -> KeyOwner | None: ...

    async def page(self, *, limit: int, offset: int) -> tuple[list[Document], int]: ...

    async def ids_after(self, after: str, *, limit: int) -> list[str]: ...

    async def replace_key_hash(self, *, tenant_id: str, key_hash: str) -> bool: ...

    async def outbound_allow(self, *, tenant_id: str) -> list[str] | None: ...

    async def set_outbound_allow(self, allow: list[str], *, tenant_id: str) -> bool: ...

    async def stamp_of(self, *, tenant_id: str) -> tuple[bool, str | None]: ...

    async def seeded_tool_ids(self, *, tenant_id: str) -> set[str]: ...

    async def mark_reconciled(self, stamp: str, seeded: list[str], *, tenant_id: str) -> None: ...

    async def claim_stale(
        self, current: str, *, lease_s: float
    ) -> tuple[str, str | None] | None: ...

    async def stale_after(
        self, current: str, after: str, *, limit: int
    ) -> list[tuple[str, str | None]]: ...

    async def delete(self, *, tenant_id: str) -> bool: ...


@repository
class TenantRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._collection: Any = database.collection("tenants")
        database.declare(
            "tenants",
            [
                IndexModel([("tenant_id", ASCENDING)], unique=True),
                IndexModel([("key_hash", ASCENDING)], unique=True),
                # The sweep's query: tenants whose stamp is not the current one.
                IndexModel([("stamp", ASCENDING)]),
            ],
        )

    async def insert(
        self, *, tenant_id: str, key_hash: str, stamp: str | None = None, claim_s: float = 0.0
    ) -> Document:
        """A new tenant, `stamp`ed as born, and claimed for `claim_s` (its creation reconciles
        it; a sweep does if the creation could not)."""
        doc = _new_tenant(tenant_id, key_hash, stamp, claim_s)
        try:
            await self._collection.insert_one(doc)
        except DuplicateKeyError as exc:
            raise ConflictError(f"tenant '{tenant_id}' already exists") from exc
        return {k: doc[k] for k in _SHOWN}

    async def find_by_key_hash(self, key_hash: str) -> KeyOwner | None:
        doc = await self._collection.find_one(
            {"key_hash": key_hash}, {"_id": 0, "tenant_id": 1, "stamp": 1}
        )
        return None if doc is None else KeyOwner(str(doc["tenant_id"]), doc.get("stamp"))

    async def page(self, *, limit: int, offset: int) -> tuple[list[Document], int]:
        cursor = self._collection.find({}, _PROJECTION).sort("tenant_id", ASCENDING)
        items = await cursor.skip(offset).limit(limit).to_list(None)
        return items, await self._collection.count_documents({})

    async def ids_after(self, after: str, *, limit: int) -> list[str]:
        """Up to `limit` tenant ids greater than `after`, in order (a walk over every tenant
        in bounded steps)."""
        cursor = (
            self._collection.find({"tenant_id": {"$gt": after}}, {"_id": 0, "tenant_id": 1})
            .sort("tenant_id", ASCENDING)
            .limit(limit)
        )
        return [str(doc["tenant_id"]) async for doc in cursor]

    async def replace_key_hash(self, *, tenant_id: str, key_hash: str) -> bool:
        result = await self._collection.update_one(
            {"tenant_id": tenant_id},
            {"$set": {"key_hash": key_hash, "key_rotated_at": utc_now()}},
        )
        return bool(result.matched_count == 1)

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
        return bool(result.matched_count == 1)

    async def stamp_of(self, *, tenant_id: str) -> tuple[bool, str | None]:
        """(whether the tenant exists, its reconciliation stamp)."""
        doc = await self._collection.find_one({"tenant_id": tenant_id}, {"_id": 0, "stamp": 1})
        return (False, None) if doc is None else (True, doc.get("stamp"))

    async def seeded_tool_ids(self, *, tenant_id: str) -> set[str]:
        doc = await self._collection.find_one({"tenant_id": tenant_id}, {"seeded_tools": 1})
        return set(doc.get("seeded_tools", [])) if doc else set()

    async def mark_reconciled(self, stamp: str, seeded: list[str], *, tenant_id: str) -> None:
        """Remember the tools seeded and the new stamp, and end any claim on the tenant."""
        await self._collection.update_one(
            {"tenant_id": tenant_id},
            {
                "$addToSet": {"seeded_tools": {"$each": seeded}},
                "$set": {"stamp": stamp},
                "$unset": {"reconciling_until": ""},
            },
        )

    async def claim_stale(self, current: str, *, lease_s: float) -> tuple[str, str | None] | None:
        """Claim one tenant whose stamp is not `current` and that nobody else claimed within
        `lease_s` (replicas sweep at once without doing the same work): (id, its stamp)."""
        now = utc_now()
        doc = await self._collection.find_one_and_update(
            {
                "stamp": {"$ne": current},
                "$or": [
                    {"reconciling_until": {"$exists": False}},
                    {"reconciling_until": {"$lt": now}},
                ],
            },
            {"$set": {"reconciling_until": now + timedelta(seconds=lease_s)}},
            projection={"_id": 0, "tenant_id": 1, "stamp": 1},
            return_document=ReturnDocument.BEFORE,
        )
        return None if doc is None else (str(doc["tenant_id"]), doc.get("stamp"))

    async def stale_after(
        self, current: str, after: str, *, limit: int
    ) -> list[tuple[str, str | None]]:
        """Up to `limit` tenants after `after` (by id) whose stamp is not `current`, claimed
        or not: (id, stamp) each, in order (the migration command's walk)."""
        cursor = (
            self._collection.find(
                {"tenant_id": {"$gt": after}, "stamp": {"$ne": current}},
                {"_id": 0, "tenant_id": 1, "stamp": 1},
            )
            .sort("tenant_id", ASCENDING)
            .limit(limit)
        )
        return [(str(doc["tenant_id"]), doc.get("stamp")) async for doc in cursor]

    async def delete(self, *, tenant_id: str) -> bool:
        result = await self._collection.delete_one({"tenant_id": tenant_id})
        return bool(result.deleted_count == 1)


def _new_tenant(tenant_id: str, key_hash: str, stamp: str | None, claim_s: float) -> Document:
    now = utc_now()
    doc = {"tenant_id": tenant_id, "key_hash": key_hash, "created_at": now, "key_rotated_at": now}
    if stamp is not None:
        doc["stamp"] = stamp
    if claim_s:
        doc["reconciling_until"] = now + timedelta(seconds=claim_s)
    return doc


class MemoryTenantRepository:
    """The embedded store's tenants: dictionaries by id and by key hash, and the ids in order."""

    def __init__(self) -> None:
        self._tenants: dict[str, Document] = {}
        self._by_key: dict[str, str] = {}
        self._ids: list[str] = []  # sorted

    async def insert(
        self, *, tenant_id: str, key_hash: str, stamp: str | None = None, claim_s: float = 0.0
    ) -> Document:
        if tenant_id in self._tenants or key_hash in self._by_key:
            raise ConflictError(f"tenant '{tenant_id}' already exists")
        doc = _new_tenant(tenant_id, key_hash, stamp, claim_s)
        self._tenants[tenant_id] = doc
        self._by_key[key_hash] = tenant_id
        bisect.insort(self._ids, tenant_id)
        return {k: doc[k] for k in _SHOWN}

    async def find_by_key_hash(self, key_hash: str) -> KeyOwner | None:
        tenant_id = self._by_key.get(key_hash)
        if tenant_id is None:
            return None
        return KeyOwner(tenant_id, self._tenants[tenant_id].get("stamp"))

    async def page(self, *, limit: int, offset: int) -> tuple[list[Document], int]:
        ids = self._ids[offset : offset + limit]
        return [{k: self._tenants[i][k] for k in _SHOWN} for i in ids], len(self._ids)

    async def ids_after(self, after: str, *, limit: int) -> list[str]:
        start = bisect.bisect_right(self._ids, after)
        return self._ids[start : start + limit]

    async def replace_key_hash(self, *, tenant_id: str, key_hash: str) -> bool:
        doc = self._tenants.get(tenant_id)
        if doc is None:
            return False
        if key_hash in self._by_key:
            raise ConflictError(f"tenant '{tenant_id}': that key is taken")
        del self._by_key[doc["key_hash"]]
        self._by_key[key_hash] = tenant_id
        doc.update(key_hash=key_hash, key_rotated_at=utc_now())
        return True

    async def outbound_allow(self, *, tenant_id: str) -> list[str] | None:
        doc = self._tenants.get(tenant_id)
        return None if doc is None else list(doc.get("outbound_allow", []))

    async def set_outbound_allow(self, allow: list[str], *, tenant_id: str) -> bool:
        doc = self._tenants.get(tenant_id)
        if doc is not None:
            doc["outbound_allow"] = list(allow)
        return doc is not None

    async def stamp_of(self, *, tenant_id: str) -> tuple[bool, str | None]:
        doc = self._tenants.get(tenant_id)
        return (False, None) if doc is None else (True, doc.get("stamp"))

    async def seeded_tool_ids(self, *, tenant_id: str) -> set[str]:
        doc = self._tenants.get(tenant_id)
        return set(doc.get("seeded_tools", ())) if doc else set()

    async def mark_reconciled(self, stamp: str, seeded: list[str], *, tenant_id: str) -> None:
        doc = self._tenants.get(tenant_id)
        if doc is not None:
            doc["seeded_tools"] = sorted({*doc.get("seeded_tools", ()), *seeded})
            doc["stamp"] = stamp
            doc.pop("reconciling_until", None)

    async def claim_stale(self, current: str, *, lease_s: float) -> tuple[str, str | None] | None:
        now = utc_now()
        for tenant_id in self._ids:  # one process: only at start and after a change
            doc = self._tenants[tenant_id]
            until: datetime | None = doc.get("reconciling_until")
            if doc.get("stamp") != current and (until is None or until < now):
                doc["reconciling_until"] = now + timedelta(seconds=lease_s)
                return tenant_id, doc.get("stamp")
        return None

    async def stale_after(
        self, current: str, after: str, *, limit: int
    ) -> list[tuple[str, str | None]]:
        start = bisect.bisect_right(self._ids, after)
        found = []
        for tenant_id in self._ids[start:]:
            stamp = self._tenants[tenant_id].get("stamp")
            if stamp != current:
                found.append((tenant_id, stamp))
                if len(found) >= limit:
                    break
        return found

    async def delete(self, *, tenant_id: str) -> bool:
        doc = self._tenants.pop(tenant_id, None)
        if doc is None:
            return False
        del self._by_key[doc["key_hash"]]
        del self._ids[bisect.bisect_left(self._ids, tenant_id)]
        return True
