"""Two replicas on one database: caches are fresh at once locally; elsewhere within the sync
interval (the change stamps), or within their TTL with the sync off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from app.config import Settings
from tests.support import functions
from tests.support.apps import ADMIN, create_tenant, http_client, make_settings, running_app
from tests.support.documents import external_tool
from tests.support.secantus import SecantusServer
from tests.support.waiting import within

TTL_S = 0.5


@asynccontextmanager
async def two_replicas(
    settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two apps on one database: replicas A and B."""
    async with (
        running_app(settings, functions.registry) as app_a,
        running_app(settings, functions.registry) as app_b,
        http_client(app_a) as a,
        http_client(app_b) as b,
    ):
        yield a, b


@pytest.mark.slow
async def test_without_the_sync_changes_reach_the_other_replica_within_the_ttl(
    secantus_server: SecantusServer,
) -> None:
    settings = make_settings(
        secantus_server.url,
        auth_cache_ttl_s=TTL_S,
        tool_cache_ttl_s=TTL_S,
        cache_sync_interval_s=0,
    )
    async with two_replicas(settings) as (a, b):
        acme = await create_tenant(a, "acme")
        assert (await b.get("/tools/ids", headers=acme.headers)).status_code == 200  # B caches

        created = await a.post("/tools/create", json=external_tool(), headers=acme.headers)
        assert created.status_code == 201
        assert (await a.get("/tools/weather-api", headers=acme.headers)).status_code == 200

        rotated = await a.post("/tenants/acme/keys", headers=ADMIN)
        new = {"Authorization": f"Bearer {rotated.json()['api_key']}"}
        assert (await a.get("/tools/ids", headers=acme.headers)).status_code == 401  # at once
        assert (await b.get("/tools/ids", headers=new)).status_code == 200
        # The documented window: B honours A's rotation only once its cached entry expires.
        assert (await b.get("/tools/ids", headers=acme.headers)).status_code == 200

        await asyncio.sleep(TTL_S + 0.1)
        assert (await b.get("/tools/ids", headers=acme.headers)).status_code == 401
        assert (await b.get("/tools/weather-api", headers=new)).status_code == 200


SYNC_S = 0.3
LONG_TTL_S = 60.0


@pytest.mark.slow
async def test_with_the_sync_changes_reach_the_other_replica_within_the_interval(
    secantus_server: SecantusServer,
) -> None:
    """TTLs of a minute: only the change stamps can make B see A's writes this fast."""
    settings = make_settings(
        secantus_server.url,
        auth_cache_ttl_s=LONG_TTL_S,
        tool_cache_ttl_s=LONG_TTL_S,
        cache_sync_interval_s=SYNC_S,
    )
    bound = SYNC_S + 1.0  # one interval, plus the poll and this machine's noise
    async with two_replicas(settings) as (a, b):
        acme = await create_tenant(a, "acme")
        token = (
            await a.post("/client-tokens", json={"name": "alice"}, headers=acme.headers)
        ).json()
        bearer = {"Authorization": f"Bearer {token['token']}"}

        async def b_status(path: str, headers: dict[str, str]) -> int:
            return (await b.get(path, headers=headers)).status_code

        # B caches the key, the tools, the token.
        async def b_lists_the_tool() -> bool:
            listed = (await b.get("/tools/ids", headers=acme.headers)).json()
            return "weather-api" in {tool["tool_id"] for tool in listed}

        assert not await b_lists_the_tool()
        listed = await b.post("/mcp", json=LIST, headers=bearer)
        assert listed.status_code == 200

        created = await a.post("/tools/create", json=external_tool(), headers=acme.headers)
        assert created.status_code == 201

        await within(b_lists_the_tool, bound)

        revoked = await a.delete(f"/client-tokens/{token['token_id']}", headers=acme.headers)
        assert revoked.status_code == 204

        async def token_refused() -> bool:
            return (await b.post("/mcp", json=LIST, headers=bearer)).status_code == 401

        await within(token_refused, bound)

        rotated = await a.post("/tenants/acme/keys", headers=ADMIN)
        new = {"Authorization": f"Bearer {rotated.json()['api_key']}"}

        async def old_key_refused() -> bool:
            return await b_status("/tools/ids", acme.headers) == 401

        await within(old_key_refused, bound)
        assert await b_status("/tools/ids", new) == 200


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
