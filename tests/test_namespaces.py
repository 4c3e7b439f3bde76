"""Namespaces (collections + indexes) a tenant adds once it has used every feature, counted on
SecantusDB over every database of the installation: at most 3, on both tool placements (the
layout before added 16 at creation and up to 29: tests/fixtures/legacy_layout)."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient

from app.config import Settings
from app.tools.builtin import registry
from tests.support import fake_model as script
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.secantus import SecantusServer
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

pytestmark = [pytest.mark.processes, pytest.mark.slow]

MOST_PER_TENANT = 3


async def namespaces(settings: Settings) -> int:
    """Collections and indexes of the installation: its database and its tenants' own."""
    assert settings.mongodb_url is not None
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongodb_url)
    total = 0
    try:
        for name in await client.list_database_names():
            if name != settings.mongodb_database and not name.startswith(
                f"{settings.mongodb_database}-"
            ):
                continue
            for collection in await client[name].list_collection_names():
                indexes = await (await client[name][collection].list_indexes()).to_list(None)
                total += 1 + len(indexes)
    finally:
        await client.close()
    return total


async def use_every_feature(
    client: httpx.AsyncClient, tenant_id: str, fake: FakeModel, upstream: str
) -> None:
    """Tools, categories, secrets, a model provider, an MCP server, a client token, runs and a
    chat that stops for a person's approval."""
    tenant = await create_tenant(client, tenant_id)
    auth = tenant.headers

    async def ok(method: str, path: str, body: Any = None) -> dict[str, Any]:
        answer = await client.request(method, path, json=body, headers=auth)
        assert answer.status_code < 300, f"{method} {path}: {answer.text}"
        return answer.json() if answer.content else {}

    await ok("POST", "/categories", {"name": "reports"})
    await ok(
        "POST", "/tools/create", {**external("weather", f"{upstream}/echo"), "category": "reports"}
    )
    await ok("POST", "/tools/create", external("purge", f"{upstream}/echo", method="DELETE"))
    await ok("PUT", "/secrets/key", {"value": "sk-1"})
    provider = {
        "api": "chat_completions",
        "base_url": "https://models.example.com/v1",
        "api_key_secret": "key",
        "default_model": "m",
    }
    await ok("PUT", "/model-providers/own", provider)
    await ok(
        "POST",
        "/mcp-servers",
        {"name": "docs", "type": "streamable-http", "url": "https://mcp.example.com/mcp"},
    )
    await ok("POST", "/client-tokens", {"name": "widget"})
    run = await ok("POST", "/tools/rolldice/invoke", {"arguments": {"d": 6}})
    fake.reset(script.tool_calls(("purge", {})))
    stopped = await ok("POST", "/chat", {"messages": [{"role": "user", "content": "go"}]})
    assert stopped["stop_reason"] == "approval_required", stopped

    async def recorded() -> bool:
        found = await client.get(f"/runs/{run['run_id']}", headers=auth)
        return found.status_code == 200

    await within(recorded, 10)


@pytest.mark.parametrize("placement", ["one_database", "database_per_tenant"])
async def test_a_tenant_that_used_every_feature_adds_at_most_three_namespaces(
    secantus_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    upstream: ThreadedServer,
    placement: str,
) -> None:
    settings = make_settings(
        secantus_server.url,
        mongodb_timeout_ms=10_000,
        tool_collections=placement,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        outbound_allow=["127.0.0.1"],
    )
    async with running_app(settings, registry) as app, http_client(app) as client:
        await use_every_feature(client, "first", fake, upstream.url)
        assert await app.state.services.database.ensure_indexes() == []  # shared ones made
        counts = [await namespaces(settings)]
        for tenant_id in ("second", "third"):
            await use_every_feature(client, tenant_id, fake, upstream.url)
            counts.append(await namespaces(settings))
    added = [after - before for before, after in itertools.pairwise(counts)]
    assert added == [MOST_PER_TENANT, MOST_PER_TENANT], counts
