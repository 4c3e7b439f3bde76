"""The app under test: its settings, its lifespan, an HTTP client over ASGITransport, tenants."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace.export import SpanExporter
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from pymongo import AsyncMongoClient

from app.config import Settings
from app.main import create_app
from app.tools.registry import FunctionRegistry
from tests.support.waiting import within

ADMIN_KEY = "test-admin-key-0123456789abcdef0123456789"
KEY_SECRET = "test-key-secret-0123456789abcdef0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


class _ArgumentSettings(Settings):
    """Settings from a test's arguments alone: no environment, dotenv file or secrets directory
    read (the suite's environment holds no setting anyway: tests/test_hermetic.py). Reading
    them took 6.3 ms of every test's settings, now 1.5 ms in all."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def make_settings(mongo_url: str | None = None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "app_env": "development",
        "mongodb_url": mongo_url,
        "mongodb_database": f"test_{uuid.uuid4().hex[:12]}",
        "admin_api_key": ADMIN_KEY,
        "api_key_secret": KEY_SECRET,
        "run_journal_dir": str(Path(tempfile.gettempdir()) / "toolgate-test-run-journal"),
        **overrides,
    }
    # A limit check on the shared test server waits as long as the driver's other calls
    # (MONGODB_TIMEOUT_MS): a test of tools or chats must not turn into a test of how busy the
    # machine is (measured in CI: one POST /tenants took 1.9 s, past the 0.5 s default, and the
    # next write was a 503). The tests of the timeout set their own.
    values.setdefault("limits_check_timeout_s", values.get("mongodb_timeout_ms", 2000) / 1000)
    return _ArgumentSettings(**values)


@asynccontextmanager
async def running_app(
    settings: Settings, registry: FunctionRegistry, *, span_exporter: SpanExporter | None = None
) -> AsyncIterator[FastAPI]:
    """The app with its lifespan entered; the test database is dropped afterwards."""
    from tests.support.loop_watchdog import lifespan_unwatched  # a plugin: imported by pytest

    app = create_app(settings, registry=registry, span_exporter=span_exporter)
    lifespan = app.router.lifespan_context(app)
    with lifespan_unwatched():
        await lifespan.__aenter__()
    try:
        yield app
    except BaseException as exc:
        with lifespan_unwatched():
            if not await lifespan.__aexit__(type(exc), exc, exc.__traceback__):
                raise
    else:
        with lifespan_unwatched():
            await lifespan.__aexit__(None, None, None)
    if settings.mongodb_url:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            settings.mongodb_url, serverSelectionTimeoutMS=2000
        )
        try:
            await drop_installation(client, settings.mongodb_database)
        finally:
            await client.close()


async def drop_installation(client: AsyncMongoClient[dict[str, Any]], database: str) -> None:
    """The test's database, and its tenants' own (TOOL_COLLECTIONS=database_per_tenant)."""
    for name in await client.list_database_names():
        if name == database or name.startswith(f"{database}-"):
            await client.drop_database(name)


def http_client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@dataclass(frozen=True)
class TenantCredentials:
    tenant_id: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


async def answered(send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
    """`send()`'s answer, asked again while it is a 503 (the test's database not answering
    yet or for a moment, as a loaded machine's may), within a generous bound, as a client
    would; a request the database refused at once had no effect, so asking again is safe."""
    answers: list[httpx.Response] = []

    async def settled() -> bool:
        answers.append(await send())
        return answers[-1].status_code != 503

    await within(settled, 60, every_s=0.2, describe=lambda: answers[-1].text)
    return answers[-1]


async def create_tenant(client: httpx.AsyncClient, tenant_id: str) -> TenantCredentials:
    """The tenant, created as a client would (`answered`)."""
    response = await answered(
        lambda: client.post("/tenants", json={"tenant_id": tenant_id}, headers=ADMIN)
    )
    assert response.status_code == 201, response.text
    return TenantCredentials(tenant_id, response.json()["api_key"])
