"""Reconciliation is version-stamped, idempotent and safe when many replicas run it at once:
at a tenant's creation, on its first use after a change of the function dictionary, and by the
bounded background sweep (app/services/seeding.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from app.config import Settings
from app.repositories.categories import CategoryRepository
from app.repositories.database import Database
from app.repositories.tenants import MemoryTenantRepository, TenantRepository, TenantStore
from app.repositories.tools import ToolRepository
from app.services.seeding import Reconciler, dictionary_version
from app.tools.builtin import calculate, registry, roll_dice
from app.tools.registry import FunctionRegistry
from tests.support.apps import make_settings
from tests.support.toolkit import registry as toolkit_registry

pytestmark = pytest.mark.all_stores

TENANTS = ["acme", "globex", "initech"]


@dataclass
class Store:
    settings: Settings
    database: Database
    tenants: TenantStore

    def reconciler(self, functions: FunctionRegistry = registry) -> Reconciler:
        """A replica's reconciler (a replica of a real database has its own client)."""
        return Reconciler(
            registry=functions,
            tenants=self.tenants,
            tools=ToolRepository(self.database),
            categories=CategoryRepository(self.database),
        )


@pytest.fixture
async def seeded(mongo_url: str | None) -> AsyncIterator[Store]:
    settings = make_settings(mongo_url)
    database = Database.from_settings(settings)
    tenants: TenantStore = (
        MemoryTenantRepository() if database.in_memory else TenantRepository(database)
    )
    await database.ensure_indexes()
    for index, tenant_id in enumerate(TENANTS):
        await tenants.insert(tenant_id=tenant_id, key_hash=f"hash-{index}")
    yield Store(settings, database, tenants)
    if not database.in_memory:
        await database.drop_database()
    await database.close()


async def tool_ids(database: Database, tenant_id: str) -> list[str]:
    return sorted([d["tool_id"] async for d in database.tools(tenant_id).find({})])


async def test_replicas_sweeping_at_once_reconcile_each_tenant_once(seeded: Store) -> None:
    sweepers = [seeded.reconciler() for _ in range(5)]
    counts = await asyncio.gather(*(sweeper.sweep() for sweeper in sweepers))
    assert sum(counts) == len(TENANTS)  # each tenant claimed by one replica
    expected = sorted(entry.tool_id for entry in registry)
    for tenant_id in TENANTS:
        assert await tool_ids(seeded.database, tenant_id) == expected, tenant_id
        _, stamp = await seeded.tenants.stamp_of(tenant_id=tenant_id)
        assert stamp == sweepers[0].stamp
    assert await sweepers[0].sweep() == 0  # nothing stale is left


async def test_reconciling_again_and_at_once_changes_nothing(seeded: Store) -> None:
    """Replicas, a sweep and a first use may reconcile a tenant at once: every step is an
    idempotent upsert."""
    await asyncio.gather(*(seeded.reconciler().reconcile("acme", None) for _ in range(10)))
    assert await tool_ids(seeded.database, "acme") == sorted(e.tool_id for e in registry)


async def test_seeding_keeps_tenant_edits_and_skips_name_clashes(seeded: Store) -> None:
    tools, reconciler = ToolRepository(seeded.database), seeded.reconciler()
    assert sorted(await reconciler.seed("acme")) == sorted(e.tool_id for e in registry)
    await seeded.tenants.mark_reconciled(
        reconciler.stamp, [e.tool_id for e in registry], tenant_id="acme"
    )
    dice = await tools.get("rolldice", tenant_id="acme")
    assert dice is not None
    dice["enabled"] = False
    await tools.replace("rolldice", dice, tenant_id="acme")
    await tools.delete("calculator", tenant_id="acme")
    clash = {
        "tool_id": "my-calc",
        "type": "external",
        "function": {"name": "calculate", "url": "https://calc.example.com", "method": "POST"},
        "context_parameters": [],
        "tags": [],
        "enabled": True,
    }
    await tools.insert(clash, tenant_id="acme")

    assert await reconciler.seed("acme") == []  # every registry tool was given once
    assert (await tools.get("rolldice", tenant_id="acme"))["enabled"] is False  # type: ignore[index]
    assert await tools.get("calculator", tenant_id="acme") is None  # deletion sticks

    # A tenant whose own tool has a registry function's name keeps it: that one is skipped.
    await tools.ensure_indexes(tenant_id="globex")
    await tools.insert(clash, tenant_id="globex")
    late = await reconciler.seed("globex")
    assert sorted(late) == sorted(e.tool_id for e in registry if e.tool_id != "calculator")
    assert (await tools.get("my-calc", tenant_id="globex"))["type"] == "external"  # type: ignore[index]


async def test_a_new_function_reaches_a_tenant_at_its_first_use(seeded: Store) -> None:
    """A stamp per tenant says which dictionary it has; a tenant's first use after a change
    seeds what is new (and only that: its deletions stick), without a sweep."""
    before = FunctionRegistry()
    before.register(roll_dice, tool_id="rolldice")
    after = FunctionRegistry()
    after.register(roll_dice, tool_id="rolldice")
    after.register(calculate, tool_id="calculator")
    assert dictionary_version(before) != dictionary_version(after)
    old = seeded.reconciler(before)
    await old.reconcile("acme", None)
    tools = ToolRepository(seeded.database)
    await tools.delete("rolldice", tenant_id="acme")

    new = seeded.reconciler(after)
    _, stamp = await seeded.tenants.stamp_of(tenant_id="acme")
    assert stamp == old.stamp and not new.is_current("acme", stamp)
    await new.ensure_current("acme", stamp, known=True)
    assert await tool_ids(seeded.database, "acme") == ["calculator"]
    _, stamp = await seeded.tenants.stamp_of(tenant_id="acme")
    assert stamp == new.stamp
    # Known here now: a stale stamp read before (a cached key) costs nothing more.
    assert new.is_current("acme", old.stamp)


async def test_first_use_by_another_credential_reads_the_stamp_once(seeded: Store) -> None:
    reconciler = seeded.reconciler()
    await reconciler.ensure_current("globex", None, known=False)  # a client token's tenant
    assert await tool_ids(seeded.database, "globex") == sorted(e.tool_id for e in registry)
    await reconciler.ensure_current("nobody", None, known=False)  # no such tenant: nothing
    assert await tool_ids(seeded.database, "nobody") == []


async def test_declared_categories_are_seeded_once_and_stay_deleted(seeded: Store) -> None:
    tools, categories = ToolRepository(seeded.database), CategoryRepository(seeded.database)
    reconciler = seeded.reconciler(toolkit_registry)
    await asyncio.gather(*(reconciler.reconcile("acme", None) for _ in range(5)))
    names = [doc["name"] for doc in await categories.all(tenant_id="acme")]
    assert names == ["default", "reports"]
    await categories.replace("reports", {"usage_hints": "kept"}, tenant_id="acme")
    assert await reconciler.seed("acme") == []  # a restart keeps the tenant's edit
    [reports] = [d for d in await categories.all(tenant_id="acme") if d["name"] == "reports"]
    assert reports["usage_hints"] == "kept" and reports["enabled"] is True
    await tools.delete_in_category("reports", tenant_id="acme")  # DELETE /categories/reports
    await categories.delete("reports", tenant_id="acme")
    await reconciler.seed("acme")  # neither it nor its tools come back
    assert [d["name"] for d in await categories.all(tenant_id="acme")] == ["default"]
    assert await tools.ids_in_category("reports", tenant_id="acme") == []
