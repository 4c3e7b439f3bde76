"""The application factory and its lifespan. Nothing runs at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.api import chat, health, mcp_servers, runs, secrets, tenants, tools
from app.api.middleware import BodySizeLimitMiddleware, RequestContextMiddleware
from app.api.problems import install_error_handlers
from app.chat.http_client import HTTPModelClient
from app.chat.loop import ChatLoop, LoopLimits
from app.chat.model import ModelClient
from app.chat.openai_sdk import OpenAISDKClient
from app.config import Settings, get_settings
from app.crypto import SecretBox
from app.deps import Services
from app.limits import ConcurrencyLimiter, RateLimiter, TenantLimits
from app.logs import configure_logging
from app.mcp.config import McpConfigError, McpServer, load_operator_servers
from app.mcp.hub import McpHub, McpLimits
from app.metrics import Metrics
from app.repositories.database import Database
from app.repositories.mcp_servers import McpServerRepository
from app.repositories.runs import MemoryRunRepository, RunRepository, RunStore
from app.repositories.secrets import SecretRepository
from app.repositories.tenants import TenantRepository
from app.repositories.tools import ToolRepository
from app.services.catalog import ToolCatalog
from app.services.chat import ChatService
from app.services.mcp_servers import McpServerService
from app.services.runs import RunRecorder, RunService
from app.services.secrets import SecretService
from app.services.seeding import Seeder
from app.services.tenants import TenantService
from app.services.tools import ToolService
from app.tools.executors import ToolRunner
from app.tools.netguard import OutboundPolicy, guarded_transport
from app.tools.registry import FunctionDictionaryError, FunctionRegistry, load_registry

logger = logging.getLogger("app")


def _load_checked_registry(
    settings: Settings, registry: FunctionRegistry | None
) -> FunctionRegistry:
    registry = registry if registry is not None else load_registry(settings.functions_module)
    problems = registry.problems()
    if problems:
        error = FunctionDictionaryError(problems)
        logger.error("refusing to start: %s", error)
        raise error
    return registry


def _load_mcp_servers(settings: Settings) -> dict[str, McpServer]:
    try:
        servers = load_operator_servers(settings.mcp_servers_json, settings.mcp_servers_file)
    except McpConfigError as exc:
        logger.error("refusing to start: %s", exc)
        raise
    if servers:
        logger.info("MCP servers configured by the operator: %s", ", ".join(sorted(servers)))
    return servers


def _warn_about_development_setup(settings: Settings) -> None:
    for name in settings.development_fallbacks():
        logger.warning(
            "%s is not set: using its documented development value (see README); "
            "never do this in production",
            name,
        )
    if settings.uses_memory_store:
        logger.warning("MONGODB_URL is not set: using the in-memory store; data is lost on exit")


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


def build_secret_service(settings: Settings, repository: SecretRepository) -> SecretService:
    current, old = settings.secret_keys()
    return SecretService(
        secrets=repository,
        box=SecretBox(current, old),
        max_count=settings.max_secrets_per_tenant,
        max_bytes=settings.max_secret_bytes,
    )


async def build_services(
    settings: Settings,
    registry: FunctionRegistry,
    stack: AsyncExitStack,
    mcp_operator: dict[str, McpServer] | None = None,
    metrics: Metrics | None = None,
) -> Services:
    """Connect, check indexes and seed every tenant; build the clients the routes share.

    Everything built is registered on `stack`, which closes it when the app stops.
    """
    database = Database.from_settings(settings)
    stack.push_async_callback(database.close)
    tenant_repo, tool_repo = TenantRepository(database), ToolRepository(database)
    mcp_repo = McpServerRepository(database)
    secret_repo = SecretRepository(database)
    secret_service = build_secret_service(settings, secret_repo)
    seeder = Seeder(registry=registry, tenants=tenant_repo, tools=tool_repo)
    catalog = ToolCatalog(tools=tool_repo, ttl_s=settings.tool_cache_ttl_s)
    prepared = await seeder.prepare_all()
    logger.info("seeded %d function tool(s) into %d tenant(s)", len(registry), prepared)

    policy = OutboundPolicy(settings.outbound_allow)
    http = build_tool_http_client(settings, policy)
    stack.push_async_callback(http.aclose)
    threads = ThreadPoolExecutor(max_workers=settings.tool_threads, thread_name_prefix="tool")
    stack.callback(threads.shutdown, wait=False, cancel_futures=True)
    model = build_model_client(settings)
    if model is None:
        logger.warning(
            "no model endpoint configured (OPENAI_BASE_URL/OPENAI_API_KEY): POST /chat answers 503"
        )
    else:
        stack.push_async_callback(model.close)
    runner = ToolRunner(
        registry=registry,
        http=http,
        threads=threads,
        response_max_bytes=settings.tool_response_max_bytes,
    )
    limits = LoopLimits(
        tool_timeout_s=settings.tool_timeout_s,
        tool_output_max_chars=settings.tool_output_max_chars,
        deadline_s=settings.chat_deadline_s,
        token_budget=settings.chat_token_budget,
    )
    metrics = metrics or Metrics()
    loop = ChatLoop(model=model, runner=runner, limits=limits, metrics=metrics) if model else None
    hub = McpHub(
        policy=policy,
        limits=McpLimits(
            connect_timeout_s=settings.mcp_connect_timeout_s,
            cache_ttl_s=settings.mcp_tools_cache_ttl_s,
        ),
    )
    stack.push_async_callback(hub.aclose)
    tenant_limits = TenantLimits(
        chats=RateLimiter(settings.rate_limit_chat_per_minute, what="chats"),
        writes=RateLimiter(settings.rate_limit_writes_per_minute, what="writes"),
        concurrent_chats=ConcurrencyLimiter(settings.max_concurrent_chats_per_tenant),
    )
    metrics.track(
        active_chats=lambda: tenant_limits.concurrent_chats.total,
        mcp_sessions=lambda: hub.open_sessions,
    )
    mcp_service = McpServerService(
        servers=mcp_repo,
        operator=mcp_operator or {},
        hub=hub,
        policy=policy,
        box=secret_service.box,
        max_servers=settings.max_mcp_servers_per_tenant,
    )
    run_repo: RunStore = (
        MemoryRunRepository(limit=settings.run_memory_limit)
        if database.in_memory
        else RunRepository(database, retention_days=settings.run_retention_days)
    )
    recorder = RunRecorder(run_repo)
    recorder.start()
    stack.push_async_callback(recorder.close)  # closed before the database: records flushed
    return Services(
        settings=settings,
        database=database,
        registry=registry,
        tenants=TenantService(
            tenants=tenant_repo,
            tools=tool_repo,
            seeder=seeder,
            catalog=catalog,
            runs=run_repo,
            mcp_servers=mcp_repo,
            secrets=secret_repo,
            key_secret=settings.effective_api_key_secret,
            admin_key=settings.effective_admin_api_key,
            auth_cache_ttl_s=settings.auth_cache_ttl_s,
        ),
        tools=ToolService(
            tools=tool_repo,
            registry=registry,
            policy=policy,
            catalog=catalog,
            max_tools=settings.max_tools_per_tenant,
            max_schema_bytes=settings.max_tool_schema_bytes,
        ),
        chat=ChatService(
            catalog=catalog,
            loop=loop,
            default_model=settings.openai_model,
            max_iterations_cap=settings.chat_max_iterations,
            recorder=recorder,
            keep_messages=settings.run_store_messages,
            mcp=mcp_service,
            secrets=secret_service,
            metrics=metrics,
        ),
        runs=RunService(runs=run_repo),
        mcp_servers=mcp_service,
        secrets=secret_service,
        metrics=metrics,
        limits=tenant_limits,
    )


def _document_configured_limits(app: FastAPI, settings: Settings) -> None:
    """The OpenAPI document states this deployment's limits where a schema can hold them, so a
    client (or a fuzzer) reading it knows what the server accepts."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = build()["components"]["schemas"]
            chat = schemas["ChatRequest"]["properties"]["max_iterations"]
            for option in chat.get("anyOf", [chat]):
                if option.get("type") == "integer":
                    option["maximum"] = settings.chat_max_iterations
            secret = schemas["SecretPut"]["properties"]["value"]
            secret["maxLength"] = settings.max_secret_bytes  # characters; bytes are checked too
        assert app.openapi_schema is not None, "FastAPI.openapi() caches what it builds"
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    settings: Settings | None = None, *, registry: FunctionRegistry | None = None
) -> FastAPI:
    """Build the application; `registry` replaces FUNCTIONS_MODULE (tests use it)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.log_level, settings.log_format)
        checked = _load_checked_registry(settings, registry)
        operator = _load_mcp_servers(settings)
        _warn_about_development_setup(settings)
        async with AsyncExitStack() as stack:
            app.state.services = await build_services(
                settings, checked, stack, operator, app.state.metrics
            )
            yield

    app = FastAPI(
        title="toolgate",
        version="0.1.0",
        summary="Define, store, validate and run the tools an LLM may call.",
        lifespan=lifespan,
        # FastAPI's native OpenTelemetry hooks cost CPU on every request; off unless wanted.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        docs_url="/docs" if settings.docs_enabled else None,
        redoc_url="/redoc" if settings.docs_enabled else None,
        openapi_url="/openapi.json" if settings.docs_enabled else None,
    )
    app.state.metrics = Metrics()
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.cors_allow_origins:  # browsers on other origins get nothing unless listed
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allow_origins,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID", "X-Run-ID", "Retry-After"],
            max_age=600,
        )
    # Outermost: every answer carries the id, and every request is logged and counted.
    app.add_middleware(
        RequestContextMiddleware, metrics=app.state.metrics, access_log=settings.access_log
    )
    install_error_handlers(app)
    _document_configured_limits(app, settings)
    # Hot routes first (matching walks routes in order); /ping stays first as the yardstick.
    for module in (health, tools, chat, runs, mcp_servers, secrets, tenants):
        app.include_router(module.router)
    return app
