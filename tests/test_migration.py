"""The migration from the layout before shared collections, on SecantusDB, with an installation
that layout's own version wrote (tests/fixtures/legacy_layout): every record is carried over
(nothing lost, nothing twice), it can stop anywhere and run again, the service migrates a
tenant at its first use by itself, and TOOL_COLLECTIONS can change afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient

from app.config import Settings
from app.container.stores import CommandStores, build_stores_for_command
from app.repositories.approvals import ApprovalRepository
from app.repositories.database import Database
from app.repositories.tools import ToolRepository
from app.services.migration import migrate_installation
from app.tools.builtin import registry
from tests.support.apps import drop_installation, http_client, make_settings, running_app
from tests.support.legacy import RESOURCES, documents, headers, installation, load_installation
from tests.support.processes import run_app
from tests.support.secantus import SecantusServer

pytestmark = [pytest.mark.processes, pytest.mark.slow]

TENANTS = ("acme", "globex")
PLACEMENTS = ("one_database", "database_per_tenant")


def legacy_settings(url: str, database: str, placement: str = "one_database") -> Settings:
    fixture = installation()
    return make_settings(
        url,
        mongodb_database=database,
        admin_api_key=fixture["admin_api_key"],
        api_key_secret=fixture["api_key_secret"],
        tool_collections=placement,
        mongodb_timeout_ms=10_000,
    )


@pytest.fixture
async def legacy(secantus_server: SecantusServer) -> AsyncIterator[str]:
    """A fresh database holding the installation; its name."""
    name = f"legacy_{uuid.uuid4().hex[:10]}"
    await load_installation(secantus_server.url, name)
    yield name
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus_server.url)
    try:
        await drop_installation(client, name)
    finally:
        await client.close()


async def migrate(settings: Settings) -> tuple[list[str], int]:
    """The command's work, in process: its report and how many records it moved."""
    stores: CommandStores = build_stores_for_command(settings, registry)
    try:
        report = await migrate_installation(
            stores.database, stores.tenants, stores.reconciler, stores.migration
        )
    finally:
        await stores.database.close()
    return report.lines(), report.moved


async def legacy_left(url: str, database: str) -> list[str]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        return [
            n for n in await client[database].list_collection_names() if n.startswith("tenant.")
        ]
    finally:
        await client.close()


def every_record() -> int:
    return sum(len(documents(f"tenant.{t}.{r}")) for t in TENANTS for r in RESOURCES)


def ids(resource: str, tenant: str, key: str) -> list[str]:
    return sorted(str(doc[key]) for doc in documents(f"tenant.{tenant}.{resource}"))


async def assert_nothing_lost(client: httpx.AsyncClient, app: Any) -> None:
    """Every record of the installation, as the API (and the approvals' repository) sees it,
    for each tenant with the key that version gave it."""
    for tenant in TENANTS:
        auth = headers(tenant)
        tools = (await client.get("/tools/ids", headers=auth)).json()
        assert sorted(t["tool_id"] for t in tools) == ids("tools", tenant, "tool_id"), tenant
        for path, resource in [
            ("/categories", "categories"),
            ("/secrets", "secrets"),
            ("/mcp-servers", "mcp_servers"),
            ("/model-providers", "model_providers"),
        ]:
            listed = (await client.get(path, headers=auth)).json()
            assert sorted(item["name"] for item in listed) == ids(resource, tenant, "name")
        runs = (await client.get("/runs?limit=100", headers=auth)).json()["items"]
        assert sorted(run["run_id"] for run in runs) == ids("runs", tenant, "run_id")
        values = await app.state.services.secrets.resolve({"model-key"}, tenant_id=tenant)
        assert values == {"model-key": f"sk-{tenant}-secret"}  # still opens: sealed as it was
        [waiting] = documents(f"tenant.{tenant}.approvals")
        approvals = ApprovalRepository(app.state.services.database)
        taken = await approvals.take(
            waiting["key"], waiting["holder"], datetime.now(UTC), tenant_id=tenant
        )
        assert taken is not None and taken["calls"] == waiting["calls"]
    allow = await client.get("/tenants/acme/outbound", headers=admin())
    assert allow.json()["allow"] == ["api.acme.example"]


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {installation()['admin_api_key']}"}


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_the_command_carries_the_installation_over_with_nothing_lost(
    secantus_server: SecantusServer, legacy: str, placement: str
) -> None:
    fixture = installation()
    result = run_app(
        "migrate",
        MONGODB_URL=secantus_server.url,
        MONGODB_DATABASE=legacy,
        ADMIN_API_KEY=fixture["admin_api_key"],
        API_KEY_SECRET=fixture["api_key_secret"],
        TOOL_COLLECTIONS=placement,
    )
    assert result.returncode == 0, result.stderr
    assert f"2 tenant(s) reconciled; {every_record()} record(s) moved" in result.stdout
    assert await legacy_left(secantus_server.url, legacy) == []
    again = run_app(  # idempotent: nothing left to do
        "migrate",
        MONGODB_URL=secantus_server.url,
        MONGODB_DATABASE=legacy,
        TOOL_COLLECTIONS=placement,
    )
    assert "0 tenant(s) reconciled; 0 record(s) moved" in again.stdout, again.stdout
    settings = legacy_settings(secantus_server.url, legacy, placement)
    async with running_app(settings, registry) as app, http_client(app) as client:
        await assert_nothing_lost(client, app)


async def test_an_interrupted_migration_resumes_without_loss_or_duplicates(
    secantus_server: SecantusServer, legacy: str
) -> None:
    """Each way a move can stop (after writing a batch but before deleting it from the old
    collection; after emptying the old collection but before dropping it; between tenants),
    made by hand, then the migration run again: every record exactly once."""
    settings = legacy_settings(secantus_server.url, legacy)
    database = Database.from_settings(settings)
    try:
        acme_tools = documents("tenant.acme.tools")
        await database.tools("acme").insert_many(
            [{**doc, "_id": doc["tool_id"]} for doc in acme_tools[:4]]  # written, not deleted
        )
        categories = database.legacy("globex", "categories")
        shared = database.collection("categories")
        for doc in documents("tenant.globex.categories"):  # moved, old collection not dropped
            await shared.insert_one({**doc, "tenant_id": "globex"})
            await categories.delete_one({"_id": doc["_id"]})
        runs = documents("tenant.acme.runs")[:2]  # half moved
        await database.collection("runs").insert_many(
            [{**run, "tenant_id": "acme"} for run in runs]
        )
        await database.legacy("acme", "runs").delete_many(
            {"_id": {"$in": [r["_id"] for r in runs]}}
        )
    finally:
        await database.close()
    await migrate(settings)
    assert await legacy_left(secantus_server.url, legacy) == []
    async with running_app(settings, registry) as app, http_client(app) as client:
        await assert_nothing_lost(client, app)
        database = app.state.services.database
        for resource in ("categories", "runs", "secrets"):
            for tenant in TENANTS:
                stored = await database.collection(resource).count_documents({"tenant_id": tenant})
                assert stored == len(documents(f"tenant.{tenant}.{resource}")), (resource, tenant)


async def test_the_service_migrates_a_tenant_at_its_first_use(
    secantus_server: SecantusServer, legacy: str
) -> None:
    """No command run: a legacy tenant's first request moves its records before it is
    served (and the background sweep moves the rest)."""
    settings = legacy_settings(secantus_server.url, legacy)
    async with running_app(settings, registry) as app, http_client(app) as client:
        await assert_nothing_lost(client, app)


async def test_tool_placement_can_change_afterwards(
    secantus_server: SecantusServer, legacy: str
) -> None:
    """TOOL_COLLECTIONS one_database -> database_per_tenant -> one_database: each change moves
    every tenant's tools on its next reconciliation (the command, here)."""
    for placement in ("one_database", "database_per_tenant", "one_database"):
        settings = legacy_settings(secantus_server.url, legacy, placement)
        await migrate(settings)
        database = Database.from_settings(settings)
        try:
            tools = ToolRepository(database)
            for tenant in TENANTS:
                stored = [doc["tool_id"] for doc in await tools.all(tenant_id=tenant)]
                assert stored == ids("tools", tenant, "tool_id"), (placement, tenant)
            other = "one_database" if placement != "one_database" else "database_per_tenant"
            for tenant in TENANTS:  # nothing left where they were
                assert await database.tools(tenant, other).count_documents({}) == 0  # type: ignore[arg-type]
        finally:
            await database.close()
    async with running_app(settings, registry) as app, http_client(app) as client:
        await assert_nothing_lost(client, app)
