"""Probes and the OpenAPI manual."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.all_stores


async def test_healthz_reports_the_store(client: httpx.AsyncClient, store: str) -> None:
    body = (await client.get("/healthz")).json()
    assert body["status"] == "ok"
    assert body["store"] == ("memory" if store == "memory" else "mongodb")
    assert ("warning" in body) == (store == "memory")
    assert body["database"] == "reachable" and "database_unreachable_s" not in body


async def test_readyz_is_ok_with_a_live_database(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200 and response.json()["status"] == "ok"


async def test_openapi_documents_every_route(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    operations = [
        (path, method, op) for path, item in spec["paths"].items() for method, op in item.items()
    ]
    assert len(operations) >= 12
    for path, method, op in operations:
        assert op.get("summary") and op.get("description"), (method, path)
        if path.startswith(("/tools", "/tenants")):
            assert {"401", "403"} <= set(op["responses"]), (method, path)
    security = spec["components"]["securitySchemes"]
    assert {"TenantKey", "AdminKey"} <= set(security)
    assert (await client.get("/docs")).status_code == 200
