"""Tenant B can neither see nor change tenant A's tools, on every tool route."""

from __future__ import annotations

import httpx
import pytest

from tests.support.apps import TenantCredentials
from tests.support.documents import external_tool

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
