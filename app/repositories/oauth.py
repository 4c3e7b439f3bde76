"""toolgate's own OAuth authorization server: its records, in two shared collections.

- `oauth_grants`: every secret the server hands out, found by its HMAC (never the secret):
  sign-in requests waiting for consent (`request`), connect links (`link`), authorization codes
  (`code`), access and refresh tokens (`access`, `refresh`). Each names its tenant and the
  client token it stands for (but a request, before its consent), and the grant it belongs to,
  so a grant, a client token's grants and a tenant's records are deleted together. Expired
  records are removed by a TTL index; every read checks the expiry too.
- `oauth_clients`: clients registered by RFC 7591 (Client ID Metadata Documents are fetched,
  not stored). A client is not a tenant's: it registers before anyone knows which tenant it
  will connect to. One never bound to a client token by a consent expires.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, IndexModel

from app.repositories.database import Database, Document, repository

_SHOWN = {"_id": 0}


@repository
class OAuthRepository:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._grants: Any = database.collection("oauth_grants")
        self._clients: Any = database.collection("oauth_clients")
        database.declare(
            "oauth_grants",
            [
                IndexModel([("key_hash", ASCENDING)], unique=True),
                IndexModel([("tenant_id", ASCENDING), ("token_id", ASCENDING)]),
                IndexModel([("grant_id", ASCENDING)]),
                IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
            ],
        )
        database.declare(
            "oauth_clients",
            [
                IndexModel([("client_id", ASCENDING)], unique=True),
                IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
            ],
        )

    async def insert(self, record: Document) -> None:
        await self._grants.insert_one(dict(record))

    async def find(self, key_hash: str, kind: str, now: datetime) -> Document | None:
        """The unexpired record of this kind with this hash."""
        found: Document | None = await self._grants.find_one(
            {"key_hash": key_hash, "kind": kind, "expires_at": {"$gt": now}}, _SHOWN
        )
        return found

    async def take(self, key_hash: str, kind: str, now: datetime) -> Document | None:
        """Delete and return the unexpired record (atomic: of two takers, one gets it)."""
        found: Document | None = await self._grants.find_one_and_delete(
            {"key_hash": key_hash, "kind": kind, "expires_at": {"$gt": now}}, _SHOWN
        )
        return found

    async def rotate(self, key_hash: str, now: datetime) -> Document | None:
        """Mark an unexpired, unrotated refresh token used; it, or None when it was not (an
        unknown token, or one already used: a replay)."""
        found: Document | None = await self._grants.find_one_and_update(
            {"key_hash": key_hash, "kind": "refresh", "rotated": False, "expires_at": {"$gt": now}},
            {"$set": {"rotated": True}},
            _SHOWN,
        )
        return found

    async def delete_grant(self, grant_id: str) -> int:
        result = await self._grants.delete_many({"grant_id": grant_id})
        return int(result.deleted_count)

    async def delete_for_token(self, token_id: str, *, tenant_id: str) -> int:
        """Every record standing for the client token: links, codes and tokens."""
        result = await self._grants.delete_many({"tenant_id": tenant_id, "token_id": token_id})
        return int(result.deleted_count)

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._grants.delete_many({"tenant_id": tenant_id})

    async def insert_client(self, record: Document) -> None:
        await self._clients.insert_one(dict(record))

    async def find_client(self, client_id: str, now: datetime) -> Document | None:
        found: Document | None = await self._clients.find_one(
            {
                "client_id": client_id,
                "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}],
            },
            _SHOWN,
        )
        return found

    async def keep_client(self, client_id: str) -> None:
        """A consent bound the client to a client token: it no longer expires unused."""
        await self._clients.update_one({"client_id": client_id}, {"$set": {"expires_at": None}})
