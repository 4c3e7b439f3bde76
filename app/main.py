"""The application factory and its lifespan. Nothing runs at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import health, tenants, tools
from app.api.middleware import BodySizeLimitMiddleware
from app.api.problems import install_error_handlers
from app.config import Settings, get_settings
from app.deps import Services
from app.repositories.database import Database
from app.repositories.tenants import TenantRepository
from app.repositories.tools import ToolRepository
from app.services.seeding import Seeder
from app.services.tenants import TenantService
from app.services.tools import ToolService
from app.tools.registry import FunctionDictionaryError, FunctionRegistry, load_registry

logger = logging.getLogger("app")


def configure_logging(level: str) -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logger.setLevel(level.upper())


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


def _warn_about_development_setup(settings: Settings) -> None:
    for name in settings.development_fallbacks():
        logger.warning(
            "%s is not set: using its documented development value (see README); "
            "never do this in production",
            name,
        )
    if settings.uses_memory_store:
        logger.warning("MONGODB_URL is not set: using the in-memory store; data is lost on exit")


async def build_services(settings: Settings, registry: FunctionRegistry) -> Services:
    """Connect, check indexes and seed every tenant; the result is what routes share."""
    database = Database.from_settings(settings)
    try:
        tenant_repo, tool_repo = TenantRepository(database), ToolRepository(database)
        seeder = Seeder(registry=registry, tenants=tenant_repo, tools=tool_repo)
        prepared = await seeder.prepare_all()
        logger.info("seeded %d function tool(s) into %d tenant(s)", len(registry), prepared)
    except BaseException:
        await database.close()
        raise
    return Services(
        settings=settings,
        database=database,
        registry=registry,
        tenants=TenantService(
            tenants=tenant_repo,
            tools=tool_repo,
            seeder=seeder,
            key_secret=settings.effective_api_key_secret,
            admin_key=settings.effective_admin_api_key,
        ),
        tools=ToolService(tools=tool_repo, registry=registry),
    )


def create_app(
    settings: Settings | None = None, *, registry: FunctionRegistry | None = None
) -> FastAPI:
    """Build the application; `registry` replaces FUNCTIONS_MODULE (tests use it)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.log_level)
        checked = _load_checked_registry(settings, registry)
        _warn_about_development_setup(settings)
        services = await build_services(settings, checked)
        app.state.services = services
        try:
            yield
        finally:
            await services.database.close()

    app = FastAPI(
        title="toolgate",
        version="0.1.0",
        summary="Define, store, validate and run the tools an LLM may call.",
        lifespan=lifespan,
    )
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    for router in (health.router, tenants.router, tools.router):
        app.include_router(router)
    return app
