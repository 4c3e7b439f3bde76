"""Two replicas on one database: caches are fresh at once locally, within their TTL elsewhere."""

from __future__ import annotations

import asyncio

from tests.conftest import (
    ADMIN,
    create_tenant,
    external_tool,
    http_client,
    make_settings,
    running_app,
)
from tests.support import functions
from tests.support.secantus import SecantusServer

TTL_S = 0.5


async def test_rotation_and_tool_edits_reach_the_other_replica_within_the_ttl(
    secantus_server: SecantusServer,
) -> None:
    settings = make_settings(secantus_server.url, auth_cache_ttl_s=TTL_S, tool_cache_ttl_s=TTL_S)
    async with (
        running_app(settings, functions.registry) as app_a,
        running_app(settings, functions.registry) as app_b,
        http_client(app_a) as a,
        http_client(app_b) as b,
    ):
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
