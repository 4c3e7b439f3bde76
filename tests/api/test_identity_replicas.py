"""Two replicas on one database: a tenant's identity provider, and a grant of toolgate's own
OAuth server, changed through one replica, are seen by the other within the sync interval (the
change stamps), with caches that would otherwise hold them for a minute."""

from __future__ import annotations

import pytest

from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.issuer import Issuer
from tests.support.oauth_clients import HandFlow, connect_link
from tests.support.secantus import SecantusServer
from tests.support.waiting import within

LONG_TTL_S = 60.0
SYNC_S = 0.2
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

pytestmark = [pytest.mark.slow]


async def test_identity_and_oauth_changes_reach_the_other_replica(
    secantus_server: SecantusServer, issuer: Issuer
) -> None:
    settings = make_settings(
        secantus_server.url,
        auth_cache_ttl_s=LONG_TTL_S,
        cache_sync_interval_s=SYNC_S,
        outbound_allow=["127.0.0.1"],
    )
    bound = SYNC_S + 1.0
    async with (
        running_app(settings, functions.registry) as app_a,
        running_app(settings, functions.registry) as app_b,
        http_client(app_a) as a,
        http_client(app_b) as b,
    ):
        acme = await create_tenant(a, "acme")
        provider = {"issuer": issuer.issuer, "jwks_uri": issuer.jwks_uri}
        assert (await a.put("/identity", json=provider, headers=acme.headers)).status_code == 200
        jwt = {"Authorization": f"Bearer {issuer.token('http://test/mcp/acme')}"}
        assert (await b.post("/mcp/acme", json=LIST, headers=jwt)).status_code == 200  # cached

        link = await connect_link(a, acme.headers)
        flow = HandFlow(b)  # the client signs in through replica B
        await flow.register()
        tokens = await flow.tokens("http://test/mcp/acme", link["url"])
        access = {"Authorization": f"Bearer {tokens['access_token']}"}
        assert (await b.post("/mcp/acme", json=LIST, headers=access)).status_code == 200

        async def refused(headers: dict[str, str]) -> bool:
            return (await b.post("/mcp/acme", json=LIST, headers=headers)).status_code == 401

        assert (await a.delete("/identity", headers=acme.headers)).status_code == 204
        await within(lambda: refused(jwt), bound)
        assert not await refused(access)
        revoked = await a.delete(f"/client-tokens/{link['token_id']}", headers=acme.headers)
        assert revoked.status_code == 204
        await within(lambda: refused(access), bound)
