"""Tenant B can neither see nor change tenant A's objects, on every route of every resource:
tools (a collection per tenant), and categories, secrets, MCP servers, model providers, client
tokens, runs and waiting approvals (shared collections, every query filtered on the tenant).
Each test runs on every store and on both placements of the tool collections
(TOOL_COLLECTIONS: one database, a database per tenant)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.repositories.approvals import ApprovalRepository
from tests.support.apps import ADMIN, TenantCredentials, make_settings
from tests.support.documents import external_tool
from tests.support.issuer import Issuer
from tests.support.waiting import runs_recorded, within

pytestmark = pytest.mark.all_stores


@pytest.fixture(params=["one_database", "database_per_tenant"])
def settings(mongo_url: str | None, request: pytest.FixtureRequest) -> Settings:
    """The suite's settings, with each placement of the tenants' tool collections."""
    if mongo_url is None:
        return make_settings(None, tool_collections=request.param)
    return make_settings(mongo_url, mongodb_timeout_ms=10_000, tool_collections=request.param)


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


async def test_secrets_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    a, b = acme.headers, globex.headers
    assert (await client.put("/secrets/key", json={"value": "a-1"}, headers=a)).status_code == 201
    assert (await client.get("/secrets", headers=b)).json() == []
    assert (await client.delete("/secrets/key", headers=b)).status_code == 404
    assert (await client.put("/secrets/key", json={"value": "b-1"}, headers=b)).status_code == 201
    assert [s["name"] for s in (await client.get("/secrets", headers=a)).json()] == ["key"]
    assert (await client.delete("/secrets/key", headers=b)).status_code == 204
    assert [s["name"] for s in (await client.get("/secrets", headers=a)).json()] == ["key"]


async def test_model_providers_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    a, b = acme.headers, globex.headers
    await client.put("/secrets/key", json={"value": "sk-a"}, headers=a)
    provider = {
        "api": "chat_completions",
        "base_url": "https://models.example.com/v1",
        "api_key_secret": "key",
        "default_model": "m",
    }
    made = await client.put("/model-providers/own", json=provider, headers=a)
    assert made.status_code == 201, made.text
    assert (await client.get("/model-providers/own", headers=b)).status_code == 404
    assert (await client.get("/model-providers", headers=b)).json() == []
    assert (await client.delete("/model-providers/own", headers=b)).status_code == 404
    # B cannot point a provider of its own at A's secret either.
    theirs = await client.put("/model-providers/own", json=provider, headers=b)
    assert theirs.status_code == 422, theirs.text
    assert (await client.get("/model-providers/own", headers=a)).status_code == 200


async def test_mcp_servers_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    a, b = acme.headers, globex.headers
    server = {"name": "docs", "type": "streamable-http", "url": "https://mcp.example.com/mcp"}
    made = await client.post("/mcp-servers", json=server, headers=a)
    assert made.status_code == 201, made.text
    assert (await client.get("/mcp-servers/docs", headers=b)).status_code == 404
    assert (await client.get("/mcp-servers", headers=b)).json() == []
    assert (await client.delete("/mcp-servers/docs", headers=b)).status_code == 404
    assert (await client.post("/mcp-servers", json=server, headers=b)).status_code == 201
    assert (await client.delete("/mcp-servers/docs", headers=b)).status_code == 204
    assert (await client.get("/mcp-servers/docs", headers=a)).status_code == 200


async def test_client_tokens_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    a, b = acme.headers, globex.headers
    made = await client.post("/client-tokens", json={"name": "widget"}, headers=a)
    assert made.status_code == 201, made.text
    token_id = made.json()["token_id"]
    assert (await client.get("/client-tokens", headers=b)).json() == []
    assert (await client.delete(f"/client-tokens/{token_id}", headers=b)).status_code == 404
    assert [t["token_id"] for t in (await client.get("/client-tokens", headers=a)).json()] == [
        token_id
    ]


async def test_runs_are_the_tenants_own(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    a, b = acme.headers, globex.headers
    invoked = await client.post("/tools/rolldice/invoke", json={"arguments": {"d": 6}}, headers=a)
    assert invoked.status_code == 200, invoked.text
    run_id = invoked.json()["run_id"]

    async def recorded() -> bool:
        return (await client.get(f"/runs/{run_id}", headers=a)).status_code == 200

    await within(recorded, 10)
    assert (await client.get(f"/runs/{run_id}", headers=b)).status_code == 404
    assert (await client.get("/runs", headers=b)).json()["items"] == []
    stats = (await client.get("/tools/rolldice/stats", headers=b)).json()
    assert stats["calls"] == 0  # B's own rolldice: A's calls are not counted


async def test_waiting_approvals_are_the_tenants_own(app: FastAPI) -> None:
    """A continuation of another tenant never takes the calls a chat of A stopped for."""
    approvals = ApprovalRepository(app.state.services.database)
    now = datetime.now(UTC)
    held = {"key": "k", "holder": None, "calls": [], "held_at": now}
    await approvals.hold({**held, "expires_at": now + timedelta(hours=1)}, tenant_id="acme")
    assert await approvals.take("k", None, now, tenant_id="globex") is None
    taken = await approvals.take("k", None, now, tenant_id="acme")
    assert taken is not None and "tenant_id" not in taken
