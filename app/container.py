"""The composition root: every client, repository and service, built once in the lifespan.

`build_services` connects, seeds and wires; each builder below makes one part. Everything built
is registered on the exit stack, which closes it when the app stops (in reverse order: the run
recorder flushes before the database closes).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.chat.http_model_client import HTTPModelClient
from app.chat.loop import ChatLoop, LoopLimits
from app.chat.model import ModelClient
from app.chat.openai_sdk import OpenAISDKClient
from app.config import Settings
from app.crypto import SecretBox
from app.limits import ConcurrencyLimiter, Fence, Limits, RateLimiter, TenantLimits
from app.mcp.config import McpServer
from app.mcp.hub import McpHub, McpLimits
from app.metrics import Metrics
from app.repositories.changes import ChangeStampRepository
from app.repositories.client_tokens import ClientTokenRepository
from app.repositories.database import Database
from app.repositories.limits import LimitRepository
from app.repositories.mcp_servers import McpServerRepository
from app.repositories.run_journal import RunJournal
from app.repositories.runs import MemoryRunRepository, RunRepository, RunStore
from app.repositories.secrets import SecretRepository
from app.repositories.tenants import TenantRepository
from app.repositories.tools import ToolRepository
from app.services.catalog import ToolCatalog
from app.services.changes import ChangeFeed, Publish, unpublished
from app.services.chat import ChatService
from app.services.client_tokens import ClientTokenService
from app.services.health import HealthService
from app.services.invocations import InvocationService
from app.services.mcp_gateway import McpGatewayService
from app.services.mcp_servers import McpServerService
from app.services.outbound import TenantOutbound
from app.services.runs import RunRecorder, RunService
from app.services.secrets import SecretService
from app.services.seeding import Seeder
from app.services.shared_limits import SharedLimits
from app.services.tenants import TenantService
from app.services.tool_import import ToolImporter
from app.services.toolbox import Toolbox
from app.services.tools import ToolService
from app.tools.executors.external import ExternalExecutor
from app.tools.executors.function import FunctionExecutor
from app.tools.executors.mcp import McpExecutor
from app.tools.invocation import InvocationLimits, ToolInvoker
from app.tools.netguard import OutboundPolicy, guarded_transport
from app.tools.registry import FunctionRegistry

logger = logging.getLogger("app")


@dataclass(frozen=True)
class Services:
    """Everything the lifespan builds once and the routes share."""

    settings: Settings
    database: Database  # for tests and operator commands; routes go through services
    health: HealthService
    tenants: TenantService
    tools: ToolService
    chat: ChatService
    invocations: InvocationService
    mcp_gateway: McpGatewayService
    mcp_hub: McpHub  # for tests and operator commands; services reach it through the toolbox
    runs: RunService
    mcp_servers: McpServerService
    secrets: SecretService
    limits: Limits
    metrics: Metrics
    outbound: TenantOutbound
    client_tokens: ClientTokenService
    catalog: ToolCatalog
    importer: ToolImporter


@dataclass(frozen=True)
class _Stores:
    """The repositories over one database, and the caches in front of them."""

    database: Database
    tenants: TenantRepository
    tools: ToolRepository
    mcp_servers: McpServerRepository
    secrets: SecretRepository
    runs: RunStore
    catalog: ToolCatalog
    changes: ChangeFeed | None  # None for the in-memory store: one process, nothing to tell

    @property
    def publish(self) -> Publish:
        return self.changes.publish if self.changes is not None else unpublished


def build_model_client(settings: Settings) -> ModelClient | None:
    """The model client, or None when no model endpoint is configured (chats then get 503)."""
    if not settings.model_configured:
        return None
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unused"
    client = HTTPModelClient if settings.model_client == "http" else OpenAISDKClient
    return client(
        base_url=settings.openai_base_url,
        api_key=api_key,
        timeout_s=settings.model_timeout_s,
        max_retries=settings.model_max_retries,
    )


def build_tool_http_client(settings: Settings, policy: OutboundPolicy) -> httpx.AsyncClient:
    """The one HTTP client of external tools: guarded connections, no redirects, no env proxies."""
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    return httpx.AsyncClient(
        transport=guarded_transport(policy, limits=limits),
        timeout=httpx.Timeout(settings.tool_timeout_s, connect=min(5.0, settings.tool_timeout_s)),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": "toolgate/0.1"},
    )


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


def build_stores(settings: Settings, registry: FunctionRegistry, stack: AsyncExitStack) -> _Stores:
    database = Database.from_settings(settings)
    stack.push_async_callback(database.close)
    tools = ToolRepository(database)
    runs: RunStore = (
        MemoryRunRepository(limit=settings.run_memory_limit)
        if database.in_memory
        else RunRepository(database, retention_days=settings.run_retention_days)
    )
    catalog = ToolCatalog(
        tools=tools,
        ttl_s=settings.tool_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
        registry=registry,
    )
    stack.push_async_callback(catalog.aclose)  # its reads in flight stop before the database
    return _Stores(
        database=database,
        tenants=TenantRepository(database),
        tools=tools,
        mcp_servers=McpServerRepository(database),
        secrets=SecretRepository(database),
        runs=runs,
        catalog=catalog,
        changes=(
            None
            if database.in_memory
            else ChangeFeed(
                ChangeStampRepository(database), interval_s=settings.cache_sync_interval_s
            )
        ),
    )


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


def build_invoker(
    settings: Settings,
    registry: FunctionRegistry,
    policy: OutboundPolicy,
    metrics: Metrics,
    stack: AsyncExitStack,
) -> ToolInvoker:
    """The one tool-invocation path, with an executor per kind of tool."""
    http = build_tool_http_client(settings, policy)
    stack.push_async_callback(http.aclose)
    threads = ThreadPoolExecutor(max_workers=settings.tool_threads, thread_name_prefix="tool")
    stack.callback(threads.shutdown, wait=False, cancel_futures=True)
    return ToolInvoker(
        executors={
            "function": FunctionExecutor(registry=registry, threads=threads),
            "external": ExternalExecutor(
                http=http, response_max_bytes=settings.tool_response_max_bytes
            ),
            "mcp": McpExecutor(),
        },
        limits=InvocationLimits(
            timeout_s=settings.tool_timeout_s, output_max_chars=settings.tool_output_max_chars
        ),
        metrics=metrics,
    )


def build_chat_loop(
    settings: Settings, invoker: ToolInvoker, metrics: Metrics, stack: AsyncExitStack
) -> ChatLoop | None:
    model = build_model_client(settings)
    if model is None:
        logger.warning(
            "no model endpoint configured (OPENAI_BASE_URL/OPENAI_API_KEY): POST /chat answers 503"
        )
        return None
    stack.push_async_callback(model.close)
    limits = LoopLimits(
        deadline_s=settings.chat_deadline_s, token_budget=settings.chat_token_budget
    )
    return ChatLoop(model=model, invoker=invoker, limits=limits, metrics=metrics)


def build_mcp_hub(settings: Settings, outbound: TenantOutbound, stack: AsyncExitStack) -> McpHub:
    hub = McpHub(
        policy=outbound.base,
        limits=McpLimits(
            connect_timeout_s=settings.mcp_connect_timeout_s,
            cache_ttl_s=settings.mcp_tools_cache_ttl_s,
        ),
    )
    stack.push_async_callback(hub.aclose)
    return hub


def build_mcp_service(
    settings: Settings,
    stores: _Stores,
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


def build_tenant_service(
    settings: Settings,
    stores: _Stores,
    seeder: Seeder,
    outbound: TenantOutbound,
    client_tokens: ClientTokenService,
) -> TenantService:
    return TenantService(
        tenants=stores.tenants,
        tools=stores.tools,
        seeder=seeder,
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
    )


@dataclass(frozen=True)
class _Runtime:
    """What the services that run tools share."""

    catalog: ToolCatalog
    outbound: TenantOutbound
    invoker: ToolInvoker
    recorder: RunRecorder
    limits: Limits
    secrets: SecretService
    mcp: McpServerService
    metrics: Metrics
    toolbox: Toolbox
    hub: McpHub


def build_chat_service(settings: Settings, run: _Runtime, stack: AsyncExitStack) -> ChatService:
    return ChatService(
        toolbox=run.toolbox,
        loop=build_chat_loop(settings, run.invoker, run.metrics, stack),
        default_model=settings.openai_model,
        max_iterations_cap=settings.chat_max_iterations,
        recorder=run.recorder,
        limits=run.limits,
        keep_messages=settings.run_store_messages,
        metrics=run.metrics,
    )


def build_runtime(
    settings: Settings,
    registry: FunctionRegistry,
    stores: _Stores,
    operator: dict[str, McpServer],
    metrics: Metrics,
    stack: AsyncExitStack,
) -> _Runtime:
    policy = OutboundPolicy(
        settings.outbound_allow,
        ports=settings.outbound_ports,
        blocked_ports=settings.outbound_blocked_ports,
        ca_bundle=settings.outbound_ca_bundle,
    )
    outbound = TenantOutbound(
        tenants=stores.tenants,
        base=policy,
        client_for=lambda tenant_policy: build_tool_http_client(settings, tenant_policy),
        ttl_s=settings.auth_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
        publish=stores.publish,
    )
    stack.push_async_callback(outbound.aclose)
    limits = build_limits(settings, stores.database, stack)
    secrets = build_secret_service(settings, stores.secrets, limits.fence)
    hub = build_mcp_hub(settings, outbound, stack)
    mcp = build_mcp_service(settings, stores, outbound, secrets.box, operator, limits.fence, hub)
    metrics.track(active_chats=lambda: limits.active_runs, mcp_sessions=lambda: hub.open_sessions)
    recorder = build_recorder(settings, stores.runs, metrics)
    recorder.start()
    stack.push_async_callback(recorder.close)  # closed before the database: records flushed
    invoker = build_invoker(settings, registry, policy, metrics, stack)
    toolbox = Toolbox(catalog=stores.catalog, mcp=mcp, hub=hub, secrets=secrets, outbound=outbound)
    return _Runtime(
        stores.catalog, outbound, invoker, recorder, limits, secrets, mcp, metrics, toolbox, hub
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
    )
    metrics.track_records(held=lambda: recorder.held, journal_bytes=lambda: recorder.journal_bytes)
    return recorder


async def build_services(
    settings: Settings,
    registry: FunctionRegistry,
    stack: AsyncExitStack,
    mcp_operator: dict[str, McpServer] | None = None,
    metrics: Metrics | None = None,
) -> Services:
    """Connect, check indexes and seed every tenant; build the clients the routes share."""
    metrics = metrics or Metrics()
    stores = build_stores(settings, registry, stack)
    seeder = Seeder(registry=registry, tenants=stores.tenants, tools=stores.tools)
    prepared = await seeder.prepare_all()
    logger.info("seeded %d function tool(s) into %d tenant(s)", len(registry), prepared)
    run = build_runtime(settings, registry, stores, mcp_operator or {}, metrics, stack)
    client_tokens = ClientTokenService(
        tokens=ClientTokenRepository(stores.database),
        box=run.secrets.box,
        key_secret=settings.effective_api_key_secret,
        max_count=settings.max_client_tokens_per_tenant,
        cache_ttl_s=settings.auth_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
        fence=run.limits.fence,
        publish=stores.publish,
    )
    stack.push_async_callback(client_tokens.aclose)
    tenants = build_tenant_service(settings, stores, seeder, run.outbound, client_tokens)
    stack.push_async_callback(tenants.aclose)
    tools = ToolService(
        tools=stores.tools,
        registry=registry,
        outbound=run.outbound,
        catalog=stores.catalog,
        max_tools=settings.max_tools_per_tenant,
        max_schema_bytes=settings.max_tool_schema_bytes,
        fence=run.limits.fence,
        publish=stores.publish,
    )
    invocations = InvocationService(
        toolbox=run.toolbox, invoker=run.invoker, recorder=run.recorder, limits=run.limits
    )
    if stores.changes is not None:  # other replicas' changes: forget what is cached here
        stores.changes.listen(tenants.changed_elsewhere)
        stores.changes.start()
        stack.push_async_callback(stores.changes.aclose)
    return Services(
        settings=settings,
        database=stores.database,
        health=build_health(settings, stores.database, metrics, stack),
        tenants=tenants,
        tools=tools,
        chat=build_chat_service(settings, run, stack),
        invocations=invocations,
        mcp_gateway=McpGatewayService(toolbox=run.toolbox, invocations=invocations),
        mcp_hub=run.hub,
        runs=RunService(runs=stores.runs),
        mcp_servers=run.mcp,
        secrets=run.secrets,
        metrics=metrics,
        limits=run.limits,
        outbound=run.outbound,
        client_tokens=client_tokens,
        catalog=run.catalog,
        importer=ToolImporter(
            tools=tools,
            outbound=run.outbound,
            deadline_s=settings.import_deadline_s,
            fetch_deadline_s=settings.import_fetch_deadline_s,
        ),
    )
