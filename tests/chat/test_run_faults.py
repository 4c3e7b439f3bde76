"""Run records over the real driver: flushed on shutdown; a failed write never fails a chat."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from app.config import Settings
from app.main import create_app
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings
from tests.support.fake_model import FakeModel
from tests.support.secantus import SecantusServer
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

HELLO = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def database_server(tmp_path: Path) -> Iterator[SecantusServer]:
    server = SecantusServer(tmp_path / "data")
    server.start()
    yield server
    server.stop()


def _settings(server: SecantusServer, model: ThreadedServer, **extra: Any) -> Settings:
    return make_settings(server.url, openai_base_url=f"{model.url}/v1", openai_api_key="k", **extra)


@pytest.mark.processes
@pytest.mark.slow
async def test_records_queued_at_shutdown_are_written(
    database_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> None:
    fake.reset(repeat=script.text("hi"))
    settings = _settings(database_server, fake_model_server[1])
    app = create_app(settings, registry=functions.registry)
    async with app.router.lifespan_context(app), http_client(app) as http:
        acme = await create_tenant(http, "acme")
        ids = [
            (await http.post("/chat", json=HELLO, headers=acme.headers)).json()["run_id"]
            for _ in range(20)
        ]
    # The app has shut down right after the last answer: its records must all be there.
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(database_server.url)
    try:
        runs = client[settings.mongodb_database]["runs"]
        stored = {doc["run_id"] async for doc in runs.find({"tenant_id": "acme"}, {"run_id": 1})}
        await client.drop_database(settings.mongodb_database)
    finally:
        await client.close()
    assert stored == set(ids)


@pytest.mark.processes
@pytest.mark.slow
async def test_records_written_during_an_outage_are_stored_once_it_ends(
    database_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake.reset(repeat=script.text("hi"))
    # Long-lived caches: the chat itself needs no database once they are warm.
    settings = _settings(
        database_server,
        fake_model_server[1],
        auth_cache_ttl_s=60,
        tool_cache_ttl_s=60,
        mongodb_timeout_ms=500,
    )
    app = create_app(settings, registry=functions.registry)
    async with app.router.lifespan_context(app), http_client(app) as http:
        acme = await create_tenant(http, "acme")
        before = await http.post("/chat", json=HELLO, headers=acme.headers)
        await asyncio.to_thread(database_server.kill)
        answer = await http.post("/chat", json=HELLO, headers=acme.headers)
        assert answer.status_code == 200  # a record is never worth a failed chat
        unavailable = r"run records: database unavailable"
        await within(
            lambda: bool(re.search(unavailable, caplog.text)),
            10,
            describe=lambda: caplog.text[-2000:],
        )
        await asyncio.to_thread(
            database_server.start
        )  # back within the retries: the record is kept, not lost
        wanted = {before.json()["run_id"], answer.json()["run_id"]}
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(database_server.url)
        try:
            runs = client[settings.mongodb_database]["runs"]
            stored: list[str] = []

            async def all_stored() -> bool:
                found = runs.find({"tenant_id": "acme"}, {"run_id": 1})
                stored[:] = [doc["run_id"] async for doc in found]
                return set(stored) == wanted

            with contextlib.suppress(AssertionError):  # the assertion below says what is missing
                await within(all_stored, 20, every_s=0.2)
            await client.drop_database(settings.mongodb_database)
        finally:
            await client.close()
    assert sorted(stored) == sorted(wanted)  # each exactly once
    assert "could not write" not in caplog.text
