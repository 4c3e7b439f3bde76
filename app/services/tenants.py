"""Tenants and their API keys: random keys shown once, stored only as HMAC-SHA256."""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.errors import DatabaseError, NotFoundError
from app.kit.cache import LoadingCache
from app.kit.crypto import key_hash
from app.repositories.approvals import ApprovalRepository
from app.repositories.categories import CategoryRepository
from app.repositories.mcp_servers import McpServerRepository
from app.repositories.mcp_tool_settings import McpToolSettingsRepository
from app.repositories.model_providers import ModelProviderRepository
from app.repositories.runs import RunStore
from app.repositories.secrets import SecretRepository
from app.repositories.tenants import KeyOwner, TenantStore
from app.repositories.tools import ToolRepository
from app.schemas.tenants import Tenant
from app.services.catalog import TOOLS_STAMP, ToolCatalog, tools_stamp
from app.services.changes import Publish, unpublished
from app.services.client_tokens import ClientTokenService
from app.services.outbound import TenantOutbound
from app.services.seeding import CLAIM_S, Reconciler

logger = logging.getLogger(__name__)
KEY_PREFIX = "tg_"
_KEY_SHAPE = re.compile(r"^tg_[A-Za-z0-9_-]{43}$")
MAX_CACHED_KEYS = 100_000


class TenantData(Protocol):
    """What another service keeps of a tenant (its identity provider, ...): dropped with the
    tenant, and forgotten from caches when another replica changed the tenant."""

    async def drop_all(self, *, tenant_id: str) -> None: ...

    def forget_tenant(self, tenant_id: str) -> None: ...


@dataclass(slots=True)
class KeyRotation:
    """A new key, and what became of the tenant's client tokens."""

    api_key: str
    revoked: int = 0
    kept: int = 0


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class TenantService:
    def __init__(
        self,
        *,
        tenants: TenantStore,
        tools: ToolRepository,
        reconciler: Reconciler,
        categories: CategoryRepository | None = None,
        catalog: ToolCatalog,
        runs: RunStore,
        mcp_servers: McpServerRepository,
        secrets: SecretRepository,
        key_secret: bytes,
        admin_key: str,
        auth_cache_ttl_s: float = 0.0,
        stale_if_error_s: float = 0.0,
        outbound: TenantOutbound | None = None,
        client_tokens: ClientTokenService | None = None,
        publish: Publish = unpublished,
        clock: Callable[[], float] = time.monotonic,
        model_providers: ModelProviderRepository | None = None,
        approvals: ApprovalRepository | None = None,
        mcp_tool_settings: McpToolSettingsRepository | None = None,
        also_drop: Sequence[TenantData] = (),
    ) -> None:
        self._approvals, self._also = approvals, tuple(also_drop)
        self._mcp_tool_settings = mcp_tool_settings  # MCP tools' settings, dropped with it
        self._outbound, self._publish = outbound, publish
        self._client_tokens = client_tokens
        self._tenants, self._tools = tenants, tools
        self._categories = categories
        self._reconciler = reconciler
        reconciler.listen(self._reconciled)
        reconciler.purge_with(self._drop_data)
        self._catalog, self._runs = catalog, runs
        self._mcp_servers, self._model_providers = mcp_servers, model_providers
        self._secrets, self._key_secret = secrets, key_secret
        self._admin_key = admin_key.encode()
        # key hash -> tenant and stamp; rotated here: dropped at once; elsewhere: within the TTL
        self._auth_cache: LoadingCache[str, KeyOwner | None] = LoadingCache(
            self._tenants.find_by_key_hash,
            ttl_s=auth_cache_ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED_KEYS,
            name="api keys",
            keep=lambda owner: owner is not None,
            clock=clock,
        )

    def _hash(self, api_key: str) -> str:
        return key_hash(self._key_secret, api_key)

    def is_admin_key(self, presented: str) -> bool:
        """Constant-time comparison with the admin key."""
        return hmac.compare_digest(presented.encode(), self._admin_key)

    async def tenant_for_key(self, presented: str) -> str | None:
        """The tenant a key belongs to, or None for a malformed, unknown or rotated key. A
        tenant's first use after a change of the function dictionary (or of the layout)
        reconciles it first (app/services/seeding.py)."""
        if not _KEY_SHAPE.match(presented):
            return None
        owner = await self._auth_cache.get(self._hash(presented))
        if owner is None:
            return None
        await self._reconciler.ensure_current(owner.tenant_id, owner.stamp, known=True)
        return owner.tenant_id

    async def ensure_current(self, tenant_id: str) -> None:
        """A tenant reached by another credential than its key (a client token): reconciled
        on its first use here, as `tenant_for_key` does (one read of its stamp per process)."""
        await self._reconciler.ensure_current(tenant_id, None, known=False)

    def _forget_keys_of(self, tenant_id: str) -> None:
        self._auth_cache.invalidate_values(
            lambda cached: cached is not None and cached.tenant_id == tenant_id
        )

    def changed_elsewhere(self, stamp: str) -> None:
        """Another replica changed something of a tenant (app/services/changes.py): a tool
        edit marks the tools stale (stale-if-error may still serve them); anything else (a
        rotated key, a revoked token, the tenant deleted) is forgotten at once."""
        tenant_id, tools_only = stamp.removesuffix(TOOLS_STAMP), stamp.endswith(TOOLS_STAMP)
        if tools_only:
            self._catalog.mark_stale(tenant_id)
        else:
            self.forget_tenant(tenant_id)

    def forget_tenant(self, tenant_id: str) -> None:
        """Forget everything cached for the tenant here (it changed on another replica)."""
        self._forget_keys_of(tenant_id)
        self._forget_cached(tenant_id)
        if self._client_tokens is not None:
            self._client_tokens.forget_tenant(tenant_id)
        for data in self._also:
            data.forget_tenant(tenant_id)

    async def aclose(self) -> None:
        await self._auth_cache.aclose()

    async def create(self, *, tenant_id: str) -> tuple[Tenant, str]:
        """Create a tenant with its tool collection and seeded tools; return it and its key.
        Once its document is written the tenant exists: if reconciling it (leftovers of an
        earlier tenant of this id purged, its index, its tools) fails, it is done at its first
        use or by the sweep, and the key is still returned (a 503 would leave a tenant nobody
        has the key of)."""
        api_key = new_api_key()
        born = self._reconciler.new_tenant_stamp
        tenant = await self._tenants.insert(
            tenant_id=tenant_id, key_hash=self._hash(api_key), stamp=born, claim_s=CLAIM_S
        )
        self._reconciler.forget(tenant_id)
        try:
            await self._reconciler.reconcile(tenant_id, born)
        except DatabaseError as exc:
            logger.warning("tenant %s created; reconciled later (%s)", tenant_id, exc)
        self._forget_cached(tenant_id)
        await self._publish(tenant_id)
        return Tenant.model_validate(tenant), api_key

    async def page(self, *, limit: int, offset: int) -> tuple[list[Tenant], int]:
        items, total = await self._tenants.page(limit=limit, offset=offset)
        return [Tenant.model_validate(t) for t in items], total

    async def rotate_key(self, *, tenant_id: str, keep_client_tokens: bool = False) -> KeyRotation:
        """Issue a new key; the old one stops working at once, and so do the tenant's client
        tokens unless `keep_client_tokens` (a rotation usually means the key leaked, and
        whoever held it may have minted tokens)."""
        api_key = new_api_key()
        self._forget_keys_of(tenant_id)
        if not await self._tenants.replace_key_hash(
            tenant_id=tenant_id, key_hash=self._hash(api_key)
        ):
            raise NotFoundError(f"tenant '{tenant_id}' does not exist")
        self._forget_keys_of(tenant_id)  # and a read of the old key made during the write
        rotation = KeyRotation(api_key=api_key)
        if self._client_tokens is not None:
            if keep_client_tokens:
                rotation.kept = await self._client_tokens.count(tenant_id=tenant_id)
            else:
                rotation.revoked = await self._client_tokens.drop_all(tenant_id=tenant_id)
        await self._publish(tenant_id)
        return rotation

    async def delete(self, *, tenant_id: str) -> None:
        """Delete a tenant: its keys and client tokens stop working first, then its tools are
        removed."""
        self._forget_keys_of(tenant_id)
        if self._client_tokens is not None:
            await self._client_tokens.drop_all(tenant_id=tenant_id)
        if not await self._tenants.delete(tenant_id=tenant_id):
            raise NotFoundError(f"tenant '{tenant_id}' does not exist")
        self._forget_keys_of(tenant_id)  # and a read of its key made during the delete
        self._reconciler.forget(tenant_id)
        await self._drop_data(tenant_id)
        self._forget_cached(tenant_id)
        await self._publish(tenant_id)

    async def _reconciled(self, tenant_id: str) -> None:
        """Reconciliation moved or seeded tools: read them again here and elsewhere."""
        self._catalog.mark_stale(tenant_id)
        await self._publish(tools_stamp(tenant_id))

    def _forget_cached(self, tenant_id: str) -> None:
        self._catalog.invalidate(tenant_id)
        if self._outbound is not None:
            self._outbound.forget(tenant_id)

    async def _drop_data(self, tenant_id: str) -> None:
        """Everything stored for the tenant apart from its record: client tokens, tools, runs,
        MCP servers, secrets."""
        if self._client_tokens is not None:
            await self._client_tokens.drop_all(tenant_id=tenant_id)
        await self._tools.drop_all(tenant_id=tenant_id)
        if self._categories is not None:
            await self._categories.drop_all(tenant_id=tenant_id)
        await self._runs.drop_all(tenant_id=tenant_id)
        await self._mcp_servers.drop_all(tenant_id=tenant_id)
        await self._secrets.drop_all(tenant_id=tenant_id)
        if self._model_providers is not None:
            await self._model_providers.drop_all(tenant_id=tenant_id)
        for repository in (self._approvals, self._mcp_tool_settings):
            if repository is not None:
                await repository.drop_all(tenant_id=tenant_id)
        for data in self._also:
            await data.drop_all(tenant_id=tenant_id)
