"""Seeding is idempotent and safe when many replicas start at once."""

from __future__ import annotations

import asyncio

import pytest

from app.config import Settings
from app.repositories.categories import CategoryRepository
from app.repositories.database import Database
from app.repositories.tenants import TenantRepository
from app.repositories.tools import ToolRepository
from app.services.seeding import Seeder
from app.tools.builtin import registry
from tests.support.apps import make_settings
from tests.support.toolkit import registry as toolkit_registry

pytestmark = pytest.mark.all_stores

TENANTS = ["acme", "globex", "initech"]


async def _seed_as_replica(settings: Settings, shared: Database | None) -> None:
    database = shared or Database.from_settings(settings)  # a replica has its own client
    try:
        seeder = Seeder(
            registry=registry, tenants=TenantRepository(database), tools=ToolRepository(database)
        )
        await seeder.prepare_all()
    finally:
        if shared is None:
            await database.close()


async def test_twenty_concurrent_seeders_leave_exact_documents(mongo_url: str | None) -> None:
    settings = make_settings(mongo_url)
    database = Database.from_settings(settings)
    try:
        tenants = TenantRepository(database)
        await tenants.ensure_indexes()
        for index, tenant_id in enumerate(TENANTS):
            await tenants.insert(tenant_id=tenant_id, key_hash=f"hash-{index}")
        # The in-memory store lives in one process, so its "replicas" share the client.
        shared = database if database.in_memory else None
        await asyncio.gather(*(_seed_as_replica(settings, shared) for _ in range(20)))

        expected = sorted(entry.tool_id for entry in registry)
        for tenant_id in TENANTS:
            tools = database.tenant_collection(tenant_id, "tools")
            ids = sorted([d["tool_id"] async for d in tools.find({}, {"tool_id": 1})])
            assert ids == expected, tenant_id
    finally:
        if not database.in_memory:
            await database._client.drop_database(settings.mongodb_database)
        await database.close()


async def test_seeding_keeps_tenant_edits_and_skips_name_clashes(mongo_url: str | None) -> None:
    settings = make_settings(mongo_url)
    database = Database.from_settings(settings)
    try:
        tools = ToolRepository(database)
        seeder = Seeder(registry=registry, tenants=TenantRepository(database), tools=tools)
        await TenantRepository(database).insert(tenant_id="acme", key_hash="h")
        first = await seeder.prepare_tenant("acme")
        assert first == {"inserted": len(registry), "present": 0, "conflict": 0, "skipped": 0}

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

        again = await seeder.prepare_tenant("acme")
        assert again == {"inserted": 0, "present": 0, "conflict": 0, "skipped": len(registry)}
        assert (await tools.get("rolldice", tenant_id="acme"))["enabled"] is False  # type: ignore[index]
        assert await tools.get("calculator", tenant_id="acme") is None  # deletion sticks

        # A tenant created before a function existed gets it; a clash with the tenant's own
        # tool of the same function name is skipped, not overwritten.
        await TenantRepository(database).insert(tenant_id="old", key_hash="h2")
        await tools.ensure_indexes(tenant_id="old")
        await tools.insert(clash, tenant_id="old")
        late = await seeder.prepare_tenant("old")
        assert late == {"inserted": len(registry) - 1, "present": 0, "conflict": 1, "skipped": 0}
        assert (await tools.get("my-calc", tenant_id="old"))["type"] == "external"  # type: ignore[index]
    finally:
        if not database.in_memory:
            await database._client.drop_database(settings.mongodb_database)
        await database.close()


async def test_declared_categories_are_seeded_once_and_stay_deleted(mongo_url: str | None) -> None:
    settings = make_settings(mongo_url)
    database = Database.from_settings(settings)
    try:
        tools, categories = ToolRepository(database), CategoryRepository(database)
        tenants = TenantRepository(database)
        seeder = Seeder(
            registry=toolkit_registry, tenants=tenants, tools=tools, categories=categories
        )
        await tenants.insert(tenant_id="acme", key_hash="h")
        await asyncio.gather(*(seeder.prepare_tenant("acme") for _ in range(5)))  # replicas
        names = [doc["name"] for doc in await categories.all(tenant_id="acme")]
        assert names == ["default", "reports"]
        await categories.replace("reports", {"usage_hints": "kept"}, tenant_id="acme")
        await seeder.prepare_tenant("acme")  # a restart keeps the tenant's edit
        [reports] = [d for d in await categories.all(tenant_id="acme") if d["name"] == "reports"]
        assert reports["usage_hints"] == "kept" and reports["enabled"] is True
        await tools.delete_in_category("reports", tenant_id="acme")  # DELETE /categories/reports
        await categories.delete("reports", tenant_id="acme")
        await seeder.prepare_tenant("acme")  # neither it nor its tools come back
        assert [d["name"] for d in await categories.all(tenant_id="acme")] == ["default"]
        assert await tools.ids_in_category("reports", tenant_id="acme") == []
    finally:
        if not database.in_memory:
            await database._client.drop_database(settings.mongodb_database)
        await database.close()
