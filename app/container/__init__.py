"""The composition root: every client, repository and service, built once in the lifespan.

`build_services` connects, seeds and wires; each builder below makes one part. Everything built
is registered on the exit stack, which closes it when the app stops (in reverse order: the run
recorder flushes before the database closes).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass

from app.config import Settings
from app.container.heart import (
    build_chat_loop,
    build_invoker,
    build_mcp_hub,
    build_tool_http_client,
)
from app.container.identity import build_identity, build_oauth_server, build_proxies
from app.container.stores import (
    Stores,
    build_health,
    build_limits,
    build_mcp_service,
    build_reconciler,
    build_recorder,
    build_secret_service,
    build_stores,
    build_tenant_service,
    start_upkeep,
)
from app.forwarded import TrustedProxies
from app.limits import Limits
from app.mcp.config import McpServer
from app.mcp.hub import McpHub
from app.metrics import Metrics
from app.repositories.approvals import ApprovalRepository
from app.repositories.client_tokens import ClientTokenRepository
from app.repositories.database import Database
from app.repositories.tenants import TenantStore
from app.services.approvals import ApprovalBook
from app.services.catalog import ToolCatalog
from app.services.categories import CategoryService
from app.services.chat import ChatService
from app.services.chat_search import SearchSettings
from app.services.client_tokens import ClientTokenService
from app.services.health import HealthService
from app.services.identity import IdentityService
from app.services.invocations import InvocationService
from app.services.mcp_gateway import McpGatewayService
from app.services.mcp_servers import McpServerService
from app.services.mcp_tool_settings import McpToolSettingsService
from app.services.model_providers import ModelProviderService
from app.services.oauth_server import OAuthServer
from app.services.outbound import TenantOutbound
from app.services.runs import RunRecorder, RunService
from app.services.secrets import SecretService
from app.services.seeding import Reconciler
from app.services.tenants import TenantService
from app.services.tool_import import ToolImporter
from app.services.toolbox import Toolbox
from app.services.tools import ToolService
from app.tools.approval import ApprovalPolicy
from app.tools.invocation import ToolInvoker
from app.tools.netguard import OutboundPolicy
from app.tools.registry import FunctionRegistry

logger = logging.getLogger("app")


@dataclass(frozen=True)
class Services:
    """Everything the lifespan builds once and the routes share."""

    settings: Settings
    database: Database  # for tests and operator commands; routes go through services
    tenant_store: TenantStore  # the same
    reconciler: Reconciler  # the same
    health: HealthService
    tenants: TenantService
    tools: ToolService
    chat: ChatService
    invocations: InvocationService
    mcp_gateway: McpGatewayService
    mcp_hub: McpHub  # for tests and operator commands; services reach it through the toolbox
    runs: RunService
    mcp_servers: McpServerService
    model_providers: ModelProviderService
    secrets: SecretService
    limits: Limits
    metrics: Metrics
    outbound: TenantOutbound
    client_tokens: ClientTokenService
    catalog: ToolCatalog
    importer: ToolImporter
    categories: CategoryService
    identity: IdentityService  # tenants' identity providers: their end users' JWTs
    oauth_server: OAuthServer  # toolgate's own, for tenants without one (connect links)
    proxies: TrustedProxies  # whose forwarded headers say the URL clients used
    approvals: ApprovalBook  # what waits for a person (GET /approvals), and operators' decisions
    mcp_tool_settings: McpToolSettingsService  # MCP tools' settings by `{server}__{tool}` id


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
    model_providers: ModelProviderService
    approvals: ApprovalRepository


def build_chat_service(settings: Settings, run: _Runtime, stack: AsyncExitStack) -> ChatService:
    return ChatService(
        toolbox=run.toolbox,
        loop=build_chat_loop(settings, run.invoker, run.metrics, stack),
        providers=run.model_providers,
        operator_model=settings.model_configured,
        default_model=settings.openai_model,
        max_iterations_cap=settings.chat_max_iterations,
        recorder=run.recorder,
        limits=run.limits,
        keep_messages=settings.run_store_messages,
        metrics=run.metrics,
        approvals=ApprovalBook(run.approvals, wait_s=settings.approval_wait_s),
        search=SearchSettings(
            over=settings.tool_search_threshold or None,
            results=settings.tool_search_results,
            form=settings.model_tool_search,
            operator_api=settings.model_api,
        ),
    )


def build_runtime(
    settings: Settings,
    registry: FunctionRegistry,
    stores: Stores,
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
    hub = build_mcp_hub(settings, outbound, metrics, stack)
    mcp = build_mcp_service(settings, stores, outbound, secrets.box, operator, limits.fence, hub)
    metrics.track(active_chats=lambda: limits.active_runs, mcp_sessions=lambda: hub.open_sessions)
    metrics.track_mcp(down=hub.down_servers, pooled=lambda: len(hub.pool))
    recorder = build_recorder(settings, stores.runs, metrics)
    recorder.start()
    stack.push_async_callback(recorder.close)  # closed before the database: records flushed
    invoker = build_invoker(settings, registry, policy, metrics, stack)
    toolbox = Toolbox(
        catalog=stores.catalog,
        mcp=mcp,
        hub=hub,
        secrets=secrets,
        outbound=outbound,
        mcp_settings=stores.mcp_tool_settings,
    )
    providers = ModelProviderService(
        providers=stores.model_providers,
        secrets=secrets,
        outbound=outbound,
        operator_model=settings.openai_model,
        max_answer_bytes=settings.model_answer_max_bytes,
        fence=limits.fence,
        ttl_s=settings.tool_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
    )
    stack.push_async_callback(providers.aclose)
    return _Runtime(
        stores.catalog,
        outbound,
        invoker,
        recorder,
        limits,
        secrets,
        mcp,
        metrics,
        toolbox,
        hub,
        providers,
        stores.approvals,
    )


async def build_services(
    settings: Settings,
    registry: FunctionRegistry,
    stack: AsyncExitStack,
    mcp_operator: dict[str, McpServer] | None = None,
    metrics: Metrics | None = None,
) -> Services:
    """Build the clients the routes share; the shared indexes and the reconciliation of stale
    tenants go on in the background (start-up is the same at any number of tenants)."""
    metrics = metrics or Metrics()
    stores = build_stores(settings, registry, stack)
    health = build_health(settings, stores.database, metrics, stack)
    # One round trip at most, before anything else asks: ready at once if the database is up,
    # and the connection made (the limits' first check would otherwise pay for it).
    await health.first_answer()
    reconciler = build_reconciler(settings, registry, stores)
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
    identity = build_identity(settings, stores.database, run.outbound, stack, stores.publish)
    oauth = build_oauth_server(settings, stores.database, client_tokens, identity, stack)
    tenants = build_tenant_service(
        settings, stores, reconciler, run.outbound, client_tokens, (identity, oauth)
    )
    stack.push_async_callback(tenants.aclose)
    tools = ToolService(
        tools=stores.tools,
        registry=registry,
        outbound=run.outbound,
        catalog=stores.catalog,
        categories=stores.categories,
        max_tools=settings.max_tools_per_tenant,
        max_schema_bytes=settings.max_tool_schema_bytes,
        max_timeout_s=settings.tool_timeout_s,
        max_output_chars=settings.tool_output_max_chars,
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
    start_upkeep(stores, reconciler, stack)
    return Services(
        settings=settings,
        database=stores.database,
        tenant_store=stores.tenants,
        reconciler=reconciler,
        health=health,
        tenants=tenants,
        tools=tools,
        chat=build_chat_service(settings, run, stack),
        invocations=invocations,
        mcp_gateway=McpGatewayService(
            toolbox=run.toolbox,
            invocations=invocations,
            page_size=settings.mcp_tools_page_size,
            search=settings.mcp_tool_search,
            search_over=settings.tool_search_threshold,
            search_results=settings.tool_search_results,
            approvals=ApprovalPolicy(risky_default=settings.risky_tool_approval),
        ),
        mcp_hub=run.hub,
        runs=RunService(runs=stores.runs),
        mcp_servers=run.mcp,
        model_providers=run.model_providers,
        secrets=run.secrets,
        metrics=metrics,
        limits=run.limits,
        outbound=run.outbound,
        client_tokens=client_tokens,
        catalog=run.catalog,
        importer=ToolImporter(
            tools=tools,
            outbound=run.outbound,
            cpu_s=settings.import_cpu_s,
            deadline_s=settings.import_deadline_s,
            fetch_deadline_s=settings.import_fetch_deadline_s,
        ),
        categories=CategoryService(
            categories=stores.categories,
            tools=stores.tools,
            catalog=run.catalog,
            toolbox=run.toolbox,
            max_categories=settings.max_categories_per_tenant,
            fence=run.limits.fence,
            publish=stores.publish,
        ),
        identity=identity,
        oauth_server=oauth,
        proxies=build_proxies(settings),
        approvals=ApprovalBook(run.approvals, wait_s=settings.approval_wait_s),
        mcp_tool_settings=McpToolSettingsService(
            settings=stores.mcp_tool_settings,
            toolbox=run.toolbox,
            tools=tools,
        ),
    )
