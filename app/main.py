"""The application factory and its lifespan. Nothing runs at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app import exit_deadline
from app.api import (
    approvals,
    categories,
    chat,
    client_tokens,
    health,
    identity,
    mcp_metadata,
    mcp_servers,
    model_providers,
    oauth,
    openai_compat,
    runs,
    secrets,
    tenants,
    tools,
    usage,
)
from app.api.console import install_console
from app.api.docs import install_docs, install_openapi
from app.api.hot_routes import hot_routes
from app.api.mcp_endpoint import TENANT_MCP, McpGateway, McpRoute
from app.api.middleware import BodySizeLimitMiddleware, RequestContextMiddleware
from app.api.problems import PROBLEM_MEDIA_TYPE, install_error_handlers
from app.api.tracing import TracingMiddleware
from app.config import Settings, get_settings
from app.container import build_services
from app.heap import settled_heap
from app.logs import configure_logging
from app.mcp.config import McpConfigError, McpServer, load_operator_servers
from app.metrics import Metrics, loop_lag_probe
from app.telemetry import tracing
from app.tools.registry import FunctionDictionaryError, FunctionRegistry, load_registry

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger("app")
OPENAPI_URL = "/openapi.json"


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
            "%s is not set: using its documented development value (docs/settings.md); "
            "never do this in production",
            name,
        )
    if settings.uses_memory_store:
        logger.warning("MONGODB_URL is not set: using the in-memory store; data is lost on exit")


def _build_routes(app: FastAPI) -> None:
    """FastAPI (0.16x) builds each included router's routes when the first request reaches
    it: about 0.3 s of CPU on the event loop, stalling every request then in flight (the loop
    watchdog of the test suite caught it). Built here, before the first request, instead; if
    FastAPI stops building them lazily, this does nothing."""
    for route in app.router.routes:
        for build in ("effective_candidates", "effective_low_priority_routes"):
            method = getattr(route, build, None)
            if callable(method):
                method()


def _problems_as_sent(spec: dict[str, Any]) -> None:
    """Error bodies are documented under the media type they are sent with; FastAPI would also
    list them under application/json, which the service never sends for a problem."""
    for item in spec["paths"].values():
        for operation in item.values():
            for code, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if (
                    code[0] in "45"
                    and PROBLEM_MEDIA_TYPE in content
                    and "application/json" in content
                ):
                    content[PROBLEM_MEDIA_TYPE] = content.pop("application/json")


def _finish_openapi(app: FastAPI, settings: Settings) -> None:
    """The OpenAPI document states this deployment's limits where a schema can hold them, so a
    client (or a fuzzer) reading it knows what the server accepts; problems under their own
    media type."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = build()
            _problems_as_sent(spec)
            schemas = spec["components"]["schemas"]
            for model in ("ChatRequest", "ToolgateOptions"):  # /chat, and /v1's extension
                chat = schemas[model]["properties"]["max_iterations"]
                for option in chat.get("anyOf", [chat]):
                    if option.get("type") == "integer":
                        option["maximum"] = settings.chat_max_iterations
            secret = schemas["SecretPut"]["properties"]["value"]
            secret["maxLength"] = settings.max_secret_bytes  # characters; bytes are checked too
        assert app.openapi_schema is not None, "FastAPI.openapi() caches what it builds"
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    settings: Settings | None = None,
    *,
    registry: FunctionRegistry | None = None,
    tune_gc: bool = False,
    span_exporter: SpanExporter | None = None,
) -> FastAPI:
    """Build the application; `registry` replaces FUNCTIONS_MODULE (tests use it). `tune_gc`:
    the app owns its process, so the garbage collector is set for serving once start-up is done
    (app/heap.py) and its shutdown ends the process in time (app/exit_deadline.py); only an
    entry point says so. `span_exporter` turns tracing on with it in place of the OTLP exporter
    (tests)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.log_level, settings.log_format)
        checked = _load_checked_registry(settings, registry)
        operator = _load_mcp_servers(settings)
        _warn_about_development_setup(settings)
        async with AsyncExitStack() as stack:
            # Entered first, left last: the spans of the shutdown are exported too.
            metrics = app.state.metrics
            await stack.enter_async_context(
                tracing(settings, metrics=metrics, exporter=span_exporter)
            )
            app.state.services = await build_services(
                settings, checked, stack, operator, app.state.metrics
            )
            await stack.enter_async_context(gateway.running())
            _build_routes(app)
            if settings.docs_served:
                # Built before the first request too: 0.3-0.6 s of CPU that holds the GIL in
                # long stretches, so even on a worker thread it stalled every request in flight.
                app.openapi()
            if tune_gc:
                stack.enter_context(settled_heap())
            # Entered last, closed first: the probe watches the loop while requests are served.
            await stack.enter_async_context(loop_lag_probe(app.state.metrics))
            if tune_gc:  # the app owns its process: the shutdown ends it in time, come what may
                stack.callback(exit_deadline.arm)
            yield

    app = FastAPI(
        title="toolgate",
        version="0.1.0",
        summary="Define, store, validate and run the tools an LLM may call.",
        lifespan=lifespan,
        # FastAPI's native OpenTelemetry hooks cost CPU on every request; off unless wanted.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        docs_url=None,  # install_docs serves both pages with local assets
        redoc_url=None,
        openapi_url=None,  # install_openapi serves it, built off the event loop
        # `/tools/ids/` and `/mcp/` are 404, not a 307 to the route answered before the
        # credential is checked.
        redirect_slashes=False,
    )
    app.state.metrics = Metrics()
    # MCP over streamable HTTP (docs/mcp.md); not a REST route, so not in the OpenAPI document.
    # Starlette serves an endpoint that is not a function as an ASGI app; every method reaches
    # it, so the credential is checked before anything is said about the method (405 but POST).
    gateway = McpGateway()
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        timeout_s=settings.body_timeout_s,
    )
    if settings.cors_allow_origins:  # browsers on other origins get nothing unless listed
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allow_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID", "X-Run-ID", "Retry-After"],
            max_age=600,
        )
    # Outermost: every answer carries the id, and every request is logged and counted.
    app.add_middleware(
        RequestContextMiddleware, metrics=app.state.metrics, access_log=settings.access_log
    )
    if settings.tracing or span_exporter is not None:  # off: no layer at all
        app.add_middleware(TracingMiddleware)  # outermost: the access log line carries its ids
    install_error_handlers(app)
    _finish_openapi(app, settings)
    # First in the routing table: `/mcp`, and the plain invoke and chat ahead of their FastAPI
    # routes (app/api/hot_routes.py); then /ping first of the routers (matching walks routes
    # in order).
    app.router.routes[:0] = [*hot_routes(gateway), McpRoute(TENANT_MCP, gateway)]
    routers = (health, tools, chat, runs, mcp_servers, model_providers, secrets, client_tokens)
    for module in (*routers, usage, categories, approvals, tenants, identity):
        app.include_router(module.router)
    app.include_router(oauth.router)  # its metadata route before /mcp's catch-all 404s
    app.router.routes.extend(oauth.routes())
    app.include_router(mcp_metadata.router)
    app.include_router(openai_compat.router)  # /v1: OpenAI's API over the tool loop
    if settings.docs_served:
        install_openapi(app, openapi_url=OPENAPI_URL)
        install_docs(app, openapi_url=OPENAPI_URL)
    install_console(app)  # static files; a client of the public API only (docs/console.md)
    return app
