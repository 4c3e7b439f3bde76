"""Idempotent seeding of the function dictionary's tools into every tenant."""

from __future__ import annotations

import asyncio
import logging

from app.repositories.categories import CategoryRepository
from app.repositories.tenants import TenantRepository
from app.repositories.tools import ToolRepository
from app.schemas.categories import DEFAULT_CATEGORY
from app.tools.registry import FunctionRegistry

logger = logging.getLogger(__name__)

_CONCURRENT_TENANTS = 8


class Seeder:
    """Creates each tenant's indexes and gives it each registry tool once.

    Existing tools are never overwritten, so a tenant's edits (say, `enabled: false`) survive
    restarts, and a tool the tenant deleted is not brought back: the tenant document remembers
    what was seeded. A function added to the registry later reaches every tenant at the next
    start. Every step is an idempotent upsert, `$addToSet` or index creation, so replicas may
    run it at once.
    """

    def __init__(
        self,
        *,
        registry: FunctionRegistry,
        tenants: TenantRepository,
        tools: ToolRepository,
        categories: CategoryRepository | None = None,
    ) -> None:
        self._registry = registry
        self._tenants = tenants
        self._tools = tools
        self._categories = categories

    async def prepare_categories(self, tenant_id: str, seeding: set[str]) -> None:
        """`default`, and the categories of the function tools being seeded (`seeding`: tool
        ids), each created enabled if absent: a tenant's edits are kept, and a category it
        deleted (with its tools, which are not seeded again) does not come back."""
        if self._categories is None:
            return
        await self._categories.ensure_indexes(tenant_id=tenant_id)
        declared = {entry.category for entry in self._registry if entry.tool_id in seeding}
        for name in sorted({DEFAULT_CATEGORY, *declared}):
            document = {"name": name, "description": "", "enabled": True, "usage_hints": ""}
            await self._categories.insert_if_absent(document, tenant_id=tenant_id)

    async def prepare_tenant(self, tenant_id: str) -> dict[str, int]:
        await self._tools.ensure_indexes(tenant_id=tenant_id)
        counts = {"inserted": 0, "present": 0, "conflict": 0, "skipped": 0}
        already = await self._tenants.seeded_tool_ids(tenant_id=tenant_id)
        await self.prepare_categories(
            tenant_id, {e.tool_id for e in self._registry if e.tool_id not in already}
        )
        seeded: list[str] = []
        for entry in self._registry:
            if entry.tool_id in already:
                counts["skipped"] += 1
                continue
            outcome = await self._tools.insert_if_absent(entry.seed_document(), tenant_id=tenant_id)
            counts[outcome] += 1
            if outcome != "conflict":
                seeded.append(entry.tool_id)
            else:
                logger.warning(
                    "tenant %s already has another tool with function name %s; not seeded",
                    tenant_id,
                    entry.name,
                )
        if seeded:
            await self._tenants.mark_seeded(seeded, tenant_id=tenant_id)
        return counts

    async def prepare_all(self) -> int:
        """Check indexes and seed every tenant; return how many tenants were prepared."""
        await self._tenants.ensure_indexes()
        tenant_ids = await self._tenants.all_ids()
        limit = asyncio.Semaphore(_CONCURRENT_TENANTS)

        async def prepare(tenant_id: str) -> None:
            async with limit:
                await self.prepare_tenant(tenant_id)

        async with asyncio.TaskGroup() as group:
            for tenant_id in tenant_ids:
                group.create_task(prepare(tenant_id))
        return len(tenant_ids)
