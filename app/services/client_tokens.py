"""Client tokens: random, shown once, stored as HMAC-SHA256 like tenant keys, with their
context values sealed (AES-GCM, app/kit/crypto.py) and their tool selection.

A token opens `/mcp`, `/chat` and invoke for its tenant: its context values are bound
server-side and it sees only its selected tools. The context contract
(`app/services/toolbox.py`): with a token, hidden values come from the token, but for the names
it lists as `settable_context`. Revoking
applies at once on this replica and within AUTH_CACHE_TTL_S on the others; an expired token is
refused at once everywhere.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from app.errors import ConflictError, NotFoundError, ServiceUnavailableError
from app.kit.cache import LoadingCache
from app.kit.crypto import SecretBox, UnsealError, associated_data, key_hash
from app.limits.local import Fence, local_fence
from app.repositories.client_tokens import ClientTokenRepository
from app.repositories.database import Document, utc_now
from app.schemas.client_tokens import ClientToken as ShownToken
from app.schemas.client_tokens import ClientTokenCreate, ClientTokenCreated
from app.services.changes import Publish, unpublished
from app.services.secrets import ResealReport, reseal_each
from app.tools.typed import TypedTool

TOKEN_PREFIX = "tgc_"
_TOKEN_SHAPE = re.compile(r"^tgc_[A-Za-z0-9_-]{43}$")
MAX_CACHED_TOKENS = 100_000


def is_client_token(presented: str) -> bool:
    return presented.startswith(TOKEN_PREFIX)


def _aad(tenant_id: str, token_id: str) -> bytes:
    return associated_data(tenant_id, "client_tokens", token_id)


@dataclass(frozen=True, slots=True)
class ClientToken:
    """A verified token: whose it is, what it binds and what it may use."""

    token_id: str
    tenant_id: str
    context: dict[str, Any]
    tool_ids: frozenset[str] | None
    tags: frozenset[str] | None
    expires_at: datetime | None
    settable: frozenset[str] = frozenset()  # context names a request may set itself
    providers: frozenset[str] | None = None  # model providers its chats may use (None: any)
    models: frozenset[str] | None = None
    search: bool | None = None  # `/mcp` offers search_tools (None: MCP_TOOL_SEARCH)

    def refuses_model(self, provider: str | None, model: str) -> str | None:
        """Why this token may not use `model` of `provider` (None: the operator's), or None."""
        if self.providers is not None and provider not in self.providers:
            where = f"model provider '{provider}'" if provider else "the operator's model"
            return f"this client token may not use {where}"
        if self.models is not None and model not in self.models:
            return f"this client token may not use model '{model}'"
        return None

    def selects(self, tool: TypedTool) -> bool:
        if self.tool_ids is None and self.tags is None:
            return True
        return tool.tool_id in (self.tool_ids or ()) or not (self.tags or frozenset()).isdisjoint(
            tool.tags
        )

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class ClientTokenService:
    def __init__(
        self,
        *,
        tokens: ClientTokenRepository,
        box: SecretBox,
        key_secret: bytes,
        max_count: int,
        cache_ttl_s: float,
        stale_if_error_s: float = 0.0,
        fence: Fence | None = None,
        publish: Publish = unpublished,
    ) -> None:
        self._tokens = tokens
        self._box = box
        self._key_secret = key_secret
        self._max_count = max_count
        self._fence = fence or local_fence()
        self._publish = publish
        self._cache: LoadingCache[str, ClientToken | None] = LoadingCache(
            self._read,
            ttl_s=cache_ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED_TOKENS,
            name="client tokens",
            keep=lambda token: token is not None,
        )
        # (tenant, token id) -> token: what an OAuth grant made from a connect link stands for
        # (app/services/oauth_server.py); revoking the token ends it at once here too.
        self._by_id: LoadingCache[tuple[str, str], ClientToken | None] = LoadingCache(
            self._read_by_id,
            ttl_s=cache_ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED_TOKENS,
            name="client tokens by id",
            keep=lambda token: token is not None,
        )

    def _hash(self, token: str) -> str:
        return key_hash(self._key_secret, token)

    async def _read(self, key_hash: str) -> ClientToken | None:
        doc = await self._tokens.find_by_key_hash(key_hash)
        return None if doc is None else self._token_of(doc)

    async def _read_by_id(self, key: tuple[str, str]) -> ClientToken | None:
        doc = await self._tokens.find_by_id(key[1], tenant_id=key[0])
        return None if doc is None else self._token_of(doc)

    def _token_of(self, doc: Document) -> ClientToken:
        try:
            context = orjson.loads(
                self._box.open(doc["sealed_context"], _aad(doc["tenant_id"], doc["token_id"]))
            )
        except UnsealError:
            raise ServiceUnavailableError(
                "a client token's bound context cannot be decrypted "
                "(SECRETS_KEY changed without SECRETS_OLD_KEYS?)"
            ) from None
        expires_at = doc.get("expires_at")
        return ClientToken(
            token_id=doc["token_id"],
            tenant_id=doc["tenant_id"],
            context=context,
            tool_ids=None if doc.get("tool_ids") is None else frozenset(doc["tool_ids"]),
            tags=None if doc.get("tags") is None else frozenset(doc["tags"]),
            expires_at=None if expires_at is None else expires_at.astimezone(UTC),
            settable=frozenset(doc.get("settable_context") or ()),
            providers=None if doc.get("providers") is None else frozenset(doc["providers"]),
            models=None if doc.get("models") is None else frozenset(doc["models"]),
            search=doc.get("tool_search"),
        )

    async def verify(self, presented: str) -> ClientToken | None:
        """The token, or None for a malformed, unknown, revoked or expired one."""
        if not _TOKEN_SHAPE.match(presented):
            return None
        token = await self._cache.get(self._hash(presented))
        if token is None or token.expired(datetime.now(UTC)):
            return None
        return token

    async def by_id(self, token_id: str, *, tenant_id: str) -> ClientToken | None:
        """The tenant's token `token_id`, or None when it was revoked (or has expired)."""
        token = await self._by_id.get((tenant_id, token_id))
        if token is None or token.expired(datetime.now(UTC)):
            return None
        return token

    async def create(self, body: ClientTokenCreate, *, tenant_id: str) -> ClientTokenCreated:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token_id = "ct_" + secrets.token_hex(8)
        now = utc_now()
        doc: Document = {
            "token_id": token_id,
            "tenant_id": tenant_id,
            "name": body.name,
            "key_hash": self._hash(token),
            "sealed_context": self._box.seal(
                orjson.dumps(body.context_arguments).decode(), _aad(tenant_id, token_id)
            ),
            "context_names": sorted(body.context_arguments),
            "settable_context": sorted(set(body.settable_context)),
            "tool_ids": body.tool_ids,
            "tags": body.tags,
            "providers": body.providers,
            "models": body.models,
            "tool_search": body.tool_search,
            "created_at": now,
            "expires_at": (
                None if body.expires_in_s is None else now + timedelta(seconds=body.expires_in_s)
            ),
        }
        async with self._fence(tenant_id, "client tokens"):  # the cap holds exactly
            if await self._tokens.count(tenant_id=tenant_id) >= self._max_count:
                raise ConflictError(
                    f"the tenant already has {self._max_count} client tokens "
                    "(MAX_CLIENT_TOKENS_PER_TENANT); revoke one first"
                )
            await self._tokens.insert(doc)
        return ClientTokenCreated(**_shown(doc).model_dump(), token=token)

    async def list(self, *, tenant_id: str) -> list[ShownToken]:
        return [_shown(doc) for doc in await self._tokens.all(tenant_id=tenant_id)]

    async def revoke(self, token_id: str, *, tenant_id: str) -> None:
        key_hash = await self._tokens.delete(token_id, tenant_id=tenant_id)
        if key_hash is None:
            raise NotFoundError(f"client token '{token_id}' does not exist")
        self._cache.invalidate(key_hash)
        self._by_id.invalidate((tenant_id, token_id))
        await self._publish(tenant_id)

    async def drop_all(self, *, tenant_id: str) -> int:
        """Revoke every token of the tenant at once on this replica (the caller publishes the
        change to the others); how many were revoked."""
        revoked = await self._tokens.drop_all(tenant_id=tenant_id)
        self.forget_tenant(tenant_id)
        return revoked

    async def count(self, *, tenant_id: str) -> int:
        return await self._tokens.count(tenant_id=tenant_id)

    def forget_tenant(self, tenant_id: str) -> None:
        """Forget the tenant's cached tokens (a change published elsewhere)."""
        for cache in (self._cache, self._by_id):
            cache.invalidate_values(
                lambda token: token is not None and token.tenant_id == tenant_id
            )

    async def aclose(self) -> None:
        await self._cache.aclose()
        await self._by_id.aclose()


def _shown(doc: Document) -> ShownToken:
    return ShownToken(
        token_id=doc["token_id"],
        name=doc["name"],
        context_names=list(doc.get("context_names", [])),
        settable_context=list(doc.get("settable_context") or []),
        tool_ids=doc.get("tool_ids"),
        tags=doc.get("tags"),
        providers=doc.get("providers"),
        models=doc.get("models"),
        tool_search=doc.get("tool_search"),
        created_at=doc["created_at"],
        expires_at=doc.get("expires_at"),
    )


async def reseal_client_tokens(
    tokens: ClientTokenRepository, box: SecretBox, *, tenant_id: str, report: ResealReport
) -> None:
    """Re-seal every token's bound context that an old key sealed (rotate-secrets)."""
    await reseal_each(
        await tokens.sealed_all(tenant_id=tenant_id),
        box,
        aad=lambda token_id: _aad(tenant_id, token_id),
        label=lambda token_id: f"{tenant_id}/client_tokens/{token_id}",
        write=lambda token_id, old, new: tokens.reseal(token_id, old, new, tenant_id=tenant_id),
        report=report,
    )
