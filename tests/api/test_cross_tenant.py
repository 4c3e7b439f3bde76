"""Tenant B can neither see nor change tenant A's tools, on every tool route."""

from __future__ import annotations

import httpx
import pytest

from tests.support.apps import ADMIN, TenantCredentials
from tests.support.documents import external_tool
from tests.support.issuer import Issuer
from tests.support.waiting import runs_recorded

pytestmark = pytest.mark.all_stores


async def test_tenant_b_gets_404_and_changes_nothing(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    created = await client.post(
        "/tools/create", json=external_tool("acme-only"), headers=acme.headers
    )
    assert created.status_code == 201
    before = created.json()

    b = globex.headers
    assert (await client.get("/tools/acme-only", headers=b)).status_code == 404
    assert (
        await client.put("/tools/acme-only", json=external_tool("acme-only"), headers=b)
    ).status_code == 404
    assert (await client.delete("/tools/acme-only", headers=b)).status_code == 404
    listing = (await client.get("/tools/?limit=500", headers=b)).json()
    assert "acme-only" not in {t["tool_id"] for t in listing["items"]}
    ids = (await client.get("/tools/ids", headers=b)).json()
    assert "acme-only" not in {t["tool_id"] for t in ids}

    # Same id and function name in B is B's own, independent tool.
    assert (
        await client.post("/tools/create", json=external_tool("acme-only"), headers=b)
    ).status_code == 201
    assert (await client.delete("/tools/acme-only", headers=b)).status_code == 204

    after = await client.get("/tools/acme-only", headers=acme.headers)
    assert after.status_code == 200 and after.json() == before


async def test_body_and_query_cannot_choose_the_tenant(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    await client.post("/tools/create", json=external_tool("acme-only"), headers=acme.headers)
    smuggled = {**external_tool("x"), "tenant_id": "acme"}
    response = await client.post("/tools/create", json=smuggled, headers=globex.headers)
    assert response.status_code == 422  # unknown field, never a tenant selector
    response = await client.get("/tools/acme-only?tenant_id=acme", headers=globex.headers)
    assert response.status_code == 404


async def test_categories_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    """Every category route, on every store: B reaches none of A's categories, and A's
    writes (PATCH several, DELETE with its tools) act on A's documents only."""
    a, b = acme.headers, globex.headers
    for headers in (a, b):
        made = await client.post("/categories", json={"name": "charts"}, headers=headers)
        assert made.status_code == 201, made.text
    await client.post("/categories", json={"name": "acme-only"}, headers=a)
    tool = external_tool("plot", category="charts")
    assert (await client.post("/tools/create", json=tool, headers=a)).status_code == 201
    assert (await client.get("/categories/acme-only", headers=b)).status_code == 404
    assert (await client.put("/categories/acme-only", json={}, headers=b)).status_code == 404
    patch = {"enabled": {"acme-only": False}}
    assert (await client.patch("/categories", json=patch, headers=b)).status_code == 404
    assert (await client.delete("/categories/acme-only", headers=b)).status_code == 404
    both = {"enabled": {"charts": False, "acme-only": False}}
    assert (await client.patch("/categories", json=both, headers=a)).status_code == 200
    theirs = (await client.get("/categories/charts", headers=b)).json()
    assert theirs["enabled"] is True and theirs["tools"] == 0
    gone = await client.delete("/categories/charts?confirm=true", headers=a)
    assert gone.json()["deleted_tools"] == ["plot"]
    assert (await client.get("/tools/plot", headers=a)).status_code == 404
    assert (await client.get("/categories/charts", headers=b)).status_code == 200


async def test_mcp_server_changes_tests_and_usage_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    """B can neither replace nor test A's MCP server, and B's usage counts none of A's runs
    (a `tenant_id` in the query chooses nothing)."""
    entry = {"type": "streamable-http", "url": "https://mcp.example.com/mcp"}
    created = await client.post(
        "/mcp-servers", json={"name": "docs", **entry}, headers=acme.headers
    )
    assert created.status_code == 201
    b = globex.headers
    assert (await client.put("/mcp-servers/docs", json=entry, headers=b)).status_code == 404
    assert (await client.post("/mcp-servers/docs/test", headers=b)).status_code == 404
    assert (await client.get("/mcp-servers/docs", headers=acme.headers)).json() == created.json()

    invoked = await client.post(
        "/tools/rolldice/invoke", json={"arguments": {"d": 6}}, headers=acme.headers
    )
    assert invoked.status_code == 200
    await runs_recorded(client, acme.headers, 1)
    theirs = (await client.get("/usage?tenant_id=acme", headers=b)).json()
    assert theirs["totals"]["calls"] == 0 and theirs["keys"] == []
    mine = (await client.get("/usage", headers=acme.headers)).json()
    assert mine["totals"]["calls"] == 1


async def test_the_tenant_mcp_endpoint_and_identity_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials, issuer: Issuer
) -> None:
    """`/mcp/{tenant_id}` takes that tenant's credentials only (every kind of B's is a 401 on
    A's), and B reaches nothing of A's identity provider."""
    opened = {"allow": ["127.0.0.1"], "force": True}  # the issuer runs on loopback
    assert (
        await client.put("/tenants/acme/outbound", json=opened, headers=ADMIN)
    ).status_code == 200
    provider = {"issuer": issuer.issuer, "jwks_uri": issuer.jwks_uri, "claims": {"user_id": "sub"}}
    assert (await client.put("/identity", json=provider, headers=acme.headers)).status_code == 200
    created = await client.post("/client-tokens", json={"name": "b"}, headers=globex.headers)
    own = {"acme": acme.api_key, "jwt": issuer.token("http://test/mcp/acme")}
    theirs = {"globex": globex.api_key, "token": created.json()["token"]}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for credential in own.values():
        headers = {"Authorization": f"Bearer {credential}"}
        assert (await client.post("/mcp/acme", json=listing, headers=headers)).status_code == 200
        assert (await client.post("/mcp/globex", json=listing, headers=headers)).status_code == 401
    for credential in theirs.values():
        headers = {"Authorization": f"Bearer {credential}"}
        assert (await client.post("/mcp/acme", json=listing, headers=headers)).status_code == 401
    b = globex.headers
    assert (await client.get("/identity", headers=b)).status_code == 404
    assert (await client.delete("/identity", headers=b)).status_code == 404
    tested = await client.post("/identity/test", json={"token": own["jwt"]}, headers=b)
    assert tested.json()["accepted"] is False  # A's token binds nothing on B
    assert (await client.get("/identity", headers=acme.headers)).json()["issuer"] == issuer.issuer
