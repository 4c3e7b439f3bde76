"""The stores and what guards them, built once: repositories over one database, the caches in
front of them, limits, secrets, MCP server entries, run records and health."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from app.config import Settings
from app.crypto import SecretBox
from app.limits import ConcurrencyLimiter, Fence, Limits, RateLimiter, TenantLimits
from app.mcp.config import McpServer
from app.mcp.hub import McpHub
from app.metrics import Metrics
from app.repositories.approvals import ApprovalRepository
from app.repositories.categories import CategoryRepository
from app.repositories.changes import ChangeStampRepository
from app.repositories.client_tokens import ClientTokenRepository
from app.repositories.database import Database
from app.repositories.limits import LimitRepository
from app.repositories.mcp_servers import McpServerRepository
from app.repositories.mcp_tool_settings import McpToolSettingsRepository
from app.repositories.migration import LayoutMigration
from app.repositories.model_providers import ModelProviderRepository
from app.repositories.run_journal import RunJournal
from app.repositories.runs import MemoryRunRepository, RunRepository, RunStore
from app.repositories.secrets import SecretRepository
from app.repositories.tenants import MemoryTenantRepository, TenantRepository, TenantStore
from app.repositories.tools import ToolRepository
from app.services.catalog import ToolCatalog, always
from app.services.changes import ChangeFeed, Publish, unpublished
from app.services.client_tokens import ClientTokenService
from app.services.health import HealthService
from app.services.mcp_servers import McpServerService
from app.services.outbound import TenantOutbound
from app.services.runs import RunRecorder
from app.services.secrets import SecretService
from app.services.seeding import Reconciler
from app.services.shared_limits import SharedLimits
from app.services.tenants import TenantData, TenantService
from app.tools.registry import FunctionRegistry

logger = logging.getLogger("app")


@dataclass(frozen=True)
class Stores:
    """The repositories over one database, and the caches in front of them."""

    database: Database
    tenants: TenantStore
    tools: ToolRepository
    categories: CategoryRepository
    mcp_servers: McpServerRepository
    secrets: SecretRepository
    runs: RunStore
    catalog: ToolCatalog
    changes: ChangeFeed | None  # None for the in-memory store: one process, nothing to tell
    model_providers: ModelProviderRepository
    approvals: ApprovalRepository
    mcp_tool_settings: McpToolSettingsRepository

    @property
    def publish(self) -> Publish:
        return self.changes.publish if self.changes is not None else unpublished


def build_secret_service(
    settings: Settings, repository: SecretRepository, fence: Fence
) -> SecretService:
    current, old = settings.secret_keys()
    return SecretService(
        secrets=repository,
        box=SecretBox(current, old),
        max_count=settings.max_secrets_per_tenant,
        max_bytes=settings.max_secret_bytes,
        fence=fence,
    )


def build_stores(settings: Settings, registry: FunctionRegistry, stack: AsyncExitStack) -> Stores:
    database = Database.from_settings(settings)
    stack.push_async_callback(database.close)
    tools = ToolRepository(database)
    categories = CategoryRepository(database)
    runs: RunStore = (
        MemoryRunRepository(limit=settings.run_memory_limit)
        if database.in_memory
        else RunRepository(database, retention_days=settings.run_retention_days)
    )
    changes = (
        None
        if database.in_memory
        else ChangeFeed(ChangeStampRepository(database), interval_s=settings.cache_sync_interval_s)
    )
    catalog = ToolCatalog(
        tools=tools,
        ttl_s=settings.tool_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
        registry=registry,
        categories=categories,
        capabilities=settings.capabilities,
        # Snapshots change with their tools (the change stamps), the TTL only while the stamps
        # cannot be read; one process's own store sees every change.
        coherent=changes.covers if changes is not None else always,
        idle_s=settings.tool_cache_idle_s,
        max_tenants=settings.tool_cache_max_tenants,
    )
    stack.push_async_callback(catalog.aclose)  # its reads in flight stop before the database
    return Stores(
        database=database,
        tenants=MemoryTenantRepository() if database.in_memory else TenantRepository(database),
        tools=tools,
        categories=categories,
        mcp_servers=McpServerRepository(database),
        secrets=SecretRepository(database),
        runs=runs,
        catalog=catalog,
        model_providers=ModelProviderRepository(database),
        approvals=ApprovalRepository(database),
        mcp_tool_settings=McpToolSettingsRepository(database),
        changes=changes,
    )


def build_reconciler(settings: Settings, registry: FunctionRegistry, stores: Stores) -> Reconciler:
    database = stores.database
    return Reconciler(
        registry=registry,
        tenants=stores.tenants,
        tools=stores.tools,
        categories=stores.categories,
        migration=None if database.in_memory else LayoutMigration(database),
        placement=settings.tool_collections,
    )


@dataclass(frozen=True)
class CommandStores:
    """What `python -m app migrate` works with."""

    database: Database
    tenants: TenantStore
    reconciler: Reconciler
    migration: LayoutMigration


def build_stores_for_command(settings: Settings, registry: FunctionRegistry) -> CommandStores:
    """The repositories over one database, for an operator command: each declares its indexes
    (created by the command), no cache, no background task."""
    database = Database.from_settings(settings)
    tenants = TenantRepository(database)
    for declares in (SecretRepository, McpServerRepository, ModelProviderRepository):
        declares(database)
    ApprovalRepository(database)
    ClientTokenRepository(database)
    ChangeStampRepository(database)
    LimitRepository(database)
    RunRepository(database, retention_days=settings.run_retention_days)
    migration = LayoutMigration(database)
    reconciler = Reconciler(
        registry=registry,
        tenants=tenants,
        tools=ToolRepository(database),
        categories=CategoryRepository(database),
        migration=migration,
        placement=settings.tool_collections,
    )
    return CommandStores(database, tenants, reconciler, migration)


def start_upkeep(stores: Stores, reconciler: Reconciler, stack: AsyncExitStack) -> None:
    """In the background, once every repository is built: the shared collections' indexes
    (retried with backoff, never fatal) and the sweep that reconciles stale tenants. Start-up
    waits for neither: it is the same whatever the number of tenants."""
    database = stores.database
    if not database.in_memory:
        indexes = asyncio.create_task(database.ensure_indexes_forever(), name="indexes")
        stack.push_async_callback(_stopped, indexes)
    reconciler.start()
    stack.push_async_callback(reconciler.aclose)


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.wait([task], timeout=3.0)


def build_limits(settings: Settings, database: Database, stack: AsyncExitStack) -> Limits:
    """This process's limits: counted here, or in the database (shared across replicas)."""
    if not settings.shared_limits:
        return TenantLimits(
            chats=RateLimiter(settings.rate_limit_chat_per_minute, what="chats"),
            writes=RateLimiter(settings.rate_limit_writes_per_minute, what="writes"),
            concurrent_chats=ConcurrencyLimiter(settings.max_concurrent_chats_per_tenant),
        )
    shared = SharedLimits(
        LimitRepository(database, check_timeout_s=settings.limits_check_timeout_s),
        chats_per_minute=settings.rate_limit_chat_per_minute,
        writes_per_minute=settings.rate_limit_writes_per_minute,
        max_concurrent=settings.max_concurrent_chats_per_tenant,
        lease_s=settings.chat_lease_s,
        fallback_s=settings.limits_fallback_s,
    )
    shared.start()
    stack.push_async_callback(shared.aclose)
    return shared


def build_mcp_service(
    settings: Settings,
    stores: Stores,
    outbound: TenantOutbound,
    box: SecretBox,
    operator: dict[str, McpServer],
    fence: Fence,
    hub: McpHub,
) -> McpServerService:
    return McpServerService(
        servers=stores.mcp_servers,
        operator=operator,
        hub=hub,
        outbound=outbound,
        box=box,
        max_servers=settings.max_mcp_servers_per_tenant,
        fence=fence,
    )


def build_health(
    settings: Settings, database: Database, metrics: Metrics, stack: AsyncExitStack
) -> HealthService:
    cache_ttl_s = max(settings.auth_cache_ttl_s, settings.tool_cache_ttl_s)
    health = HealthService(
        database=database,
        # Cached keys and tools serve this long after the database's last answer.
        serve_without_database_s=cache_ttl_s + settings.cache_stale_if_error_s,
        check_timeout_s=min(2.0, settings.mongodb_timeout_ms / 1000),
        wedged_after_s=settings.database_wedged_s,
    )
    health.start()
    stack.push_async_callback(health.aclose)
    metrics.track_database(reachable=lambda: float(health.database().reachable))
    return health


def build_recorder(settings: Settings, runs: RunStore, metrics: Metrics) -> RunRecorder:
    journal = None
    if settings.journals_runs:
        journal = RunJournal(  # one directory per database: a replay never crosses over
            Path(settings.run_journal_dir) / settings.mongodb_database,
            max_bytes=settings.run_journal_max_bytes,
            fsync=settings.run_journal_fsync,
        )
    recorder = RunRecorder(
        runs,
        journal=journal,
        max_records=settings.run_queue_max_records,
        max_bytes=settings.run_queue_max_bytes,
        lost=metrics.run_records_lost.inc,
        adopt_every_s=settings.run_journal_adopt_s,
    )
    metrics.track_records(held=lambda: recorder.held, journal_bytes=lambda: recorder.journal_bytes)
    return recorder


def build_tenant_service(
    settings: Settings,
    stores: Stores,
    reconciler: Reconciler,
    outbound: TenantOutbound,
    client_tokens: ClientTokenService,
    also_drop: tuple[TenantData, ...] = (),
) -> TenantService:
    return TenantService(
        tenants=stores.tenants,
        tools=stores.tools,
        categories=stores.categories,
        reconciler=reconciler,
        catalog=stores.catalog,
        runs=stores.runs,
        mcp_servers=stores.mcp_servers,
        secrets=stores.secrets,
        key_secret=settings.effective_api_key_secret,
        admin_key=settings.effective_admin_api_key,
        auth_cache_ttl_s=settings.auth_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
        outbound=outbound,
        client_tokens=client_tokens,
        publish=stores.publish,
        model_providers=stores.model_providers,
        approvals=stores.approvals,
        mcp_tool_settings=stores.mcp_tool_settings,
        also_drop=also_drop,
    )
