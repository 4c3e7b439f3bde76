"""Fixtures: the app on each database backend, an HTTP client over ASGITransport, tenants."""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from pymongo import AsyncMongoClient

from app.config import ENV_FILE_VARIABLE, Settings
from app.logs import QUIET_LOGGERS, JsonFormatter
from app.main import create_app
from app.tools.builtin import registry as builtin_registry
from app.tools.registry import FunctionRegistry
from tests.support import functions
from tests.support.fake_model import FakeModel
from tests.support.secantus import SecantusServer, executable
from tests.support.servers import ThreadedServer
from tests.support.upstream import upstream_app

ADMIN_KEY = "test-admin-key-0123456789abcdef0123456789"
KEY_SECRET = "test-key-secret-0123456789abcdef0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

STORES = ["memory", "secantus", "mongod"]


def pytest_configure(config: pytest.Config) -> None:
    """Hermetic settings: neither a developer's `.env` nor an exported setting reaches a test,
    nor a service process a test starts (they inherit this environment)."""
    fields = {name.lower() for name in Settings.model_fields}
    for variable in list(os.environ):
        if variable.lower() in fields:
            del os.environ[variable]
    os.environ[ENV_FILE_VARIABLE] = ""


@pytest.fixture(scope="session")
def secantus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecantusServer]:
    if executable() is None:
        pytest.fail("secantusd-py is missing: install the dev extras (pip install -e '.[dev]')")
    server = SecantusServer(tmp_path_factory.mktemp("secantus") / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongod_url() -> Iterator[str]:
    """A real mongod: MONGODB_TEST_URL, or mongo:8 through testcontainers where Docker runs."""
    if url := os.environ.get("MONGODB_TEST_URL"):
        yield url
        return
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        pytest.skip("no real mongod: MONGODB_TEST_URL is unset and no Docker engine is running")
    from testcontainers.mongodb import MongoDbContainer

    with MongoDbContainer("mongo:8") as container:
        yield container.get_connection_url()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Suites marked all_stores run once per backend; everything else uses the in-memory store.
    if "store" in metafunc.fixturenames and metafunc.definition.get_closest_marker("all_stores"):
        metafunc.parametrize("store", STORES)


@pytest.fixture
def store() -> str:
    return "memory"


@pytest.fixture
async def mongo_url(store: str, request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """The URL of the backend under test (None for the in-memory store); data dropped after."""
    if store == "memory":
        yield None
        return
    fixture = "secantus_server" if store == "secantus" else "mongod_url"
    value = request.getfixturevalue(fixture)
    url = value.url if isinstance(value, SecantusServer) else str(value)
    yield url


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
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
def settings(mongo_url: str | None) -> Settings:
    return make_settings(mongo_url)


@pytest.fixture
def registry() -> FunctionRegistry:
    return builtin_registry


@asynccontextmanager
async def running_app(settings: Settings, registry: FunctionRegistry) -> AsyncIterator[FastAPI]:
    """The app with its lifespan entered; the test database is dropped afterwards."""
    app = create_app(settings, registry=registry)
    async with app.router.lifespan_context(app):
        yield app
    if settings.mongodb_url:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            settings.mongodb_url, serverSelectionTimeoutMS=2000
        )
        try:
            await client.drop_database(settings.mongodb_database)
        finally:
            await client.close()


def http_client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture
async def app(settings: Settings, registry: FunctionRegistry) -> AsyncIterator[FastAPI]:
    async with running_app(settings, registry) as running:
        yield running


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(app) as http:
        yield http


@dataclass(frozen=True)
class TenantCredentials:
    tenant_id: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


async def create_tenant(client: httpx.AsyncClient, tenant_id: str) -> TenantCredentials:
    response = await client.post("/tenants", json={"tenant_id": tenant_id}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return TenantCredentials(tenant_id, response.json()["api_key"])


@pytest.fixture
async def acme(client: httpx.AsyncClient) -> TenantCredentials:
    return await create_tenant(client, "acme")


@pytest.fixture
async def globex(client: httpx.AsyncClient) -> TenantCredentials:
    return await create_tenant(client, "globex")


def external_tool(tool_id: str = "weather-api", **overrides: Any) -> dict[str, Any]:
    """A valid external tool document; overrides replace top-level fields."""
    return {
        "tool_id": tool_id,
        "type": "external",
        "function": {
            "name": tool_id.replace("-", "_"),
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                    "days": {
                        "type": "array",
                        "items": {"type": "string"},
                        "min_items": 1,
                        "max_items": 7,
                    },
                },
                "required": ["city"],
            },
            "url": "https://api.example.com/weather",
            "method": "GET",
        },
        "context_parameters": [{"name": "user_id", "type": "string"}],
        "tags": ["weather"],
        **overrides,
    }


@pytest.fixture(scope="session")
def upstream() -> Iterator[ThreadedServer]:
    """A real HTTP API on 127.0.0.1 for external tools (tests/support/upstream.py)."""
    server = ThreadedServer(upstream_app).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_model_server() -> Iterator[tuple[FakeModel, ThreadedServer]]:
    """The scripted OpenAI-compatible model, served on 127.0.0.1 (chat and MCP suites)."""
    fake = FakeModel()
    server = ThreadedServer(fake).start()
    yield fake, server
    server.stop()


@pytest.fixture
def fake(fake_model_server: tuple[FakeModel, ThreadedServer]) -> FakeModel:
    fake_model_server[0].reset()
    functions.RECEIVED.clear()
    functions.TIMELINE.clear()
    functions.CANCELLED.clear()
    return fake_model_server[0]


class JsonLines(logging.Handler):
    """Every record of every logger, formatted by the service's own formatter."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def entries(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.lines]


@pytest.fixture
def json_logs() -> Iterator[JsonLines]:
    """Captures at DEBUG, the chattiest libraries included: redaction must hold even there."""
    handler = JsonLines()
    root = logging.getLogger()
    saved = {name: logging.getLogger(name).level for name in ("", "app", *QUIET_LOGGERS)}
    root.addHandler(handler)
    for name in saved:
        logging.getLogger(name).setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per distinct skip reason, with how many tests it covers."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "skipped"
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items()):
        terminalreporter.write_line(f"SKIPPED {count} test(s): {reason}")
