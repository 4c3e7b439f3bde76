"""Tenant administration: creation, keys (HMAC only, rotation), deletion."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.errors import DatabaseUnavailable
from app.repositories.secrets import SecretRepository
from app.repositories.tools import ToolRepository
from tests.support.apps import ADMIN, KEY_SECRET, TenantCredentials, answered, create_tenant
from tests.support.documents import external_tool

pytestmark = pytest.mark.all_stores


async def test_create_tenant_returns_a_strong_key_stored_only_as_hmac(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(client, "acme")
    assert tenant.api_key.startswith("tg_") and len(tenant.api_key) >= 3 + 43  # 32 random bytes
    store = app.state.services.tenant_store
    expected = hmac.new(KEY_SECRET.encode(), tenant.api_key.encode(), hashlib.sha256).hexdigest()
    owner = await store.find_by_key_hash(expected)
    assert owner is not None and owner.tenant_id == "acme"
    assert await store.find_by_key_hash(tenant.api_key) is None  # never the key itself
    other = await create_tenant(client, "globex")
    assert other.api_key != tenant.api_key


async def test_duplicate_tenant_is_409(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    response = await answered(
        lambda: client.post("/tenants", json={"tenant_id": "acme"}, headers=ADMIN)
    )
    assert response.status_code == 409
    assert response.json()["detail"] == "tenant 'acme' already exists"


@pytest.mark.parametrize(
    "tenant_id", ["A", "Acme", "a", "x" * 64, "a.b", "a b", "ünï", "", 7, None, "a\u0000b"]
)
async def test_invalid_tenant_ids_are_422(client: httpx.AsyncClient, tenant_id: object) -> None:
    response = await client.post("/tenants", json={"tenant_id": tenant_id}, headers=ADMIN)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.tenant_id"


async def test_valid_tenant_id_edges(client: httpx.AsyncClient) -> None:
    for tenant_id in ["ab", "x" * 63, "a-b_c9"]:
        await create_tenant(client, tenant_id)
    listing = (await client.get("/tenants?limit=2", headers=ADMIN)).json()
    assert listing["total"] == 3 and [t["tenant_id"] for t in listing["items"]] == ["a-b_c9", "ab"]
    assert "api_key" not in str(listing) and "key_hash" not in str(listing)


async def test_rotation_replaces_the_key_at_once(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    rotated = await client.post("/tenants/acme/keys", headers=ADMIN)
    assert rotated.status_code == 200
    new_key = rotated.json()["api_key"]
    assert new_key != acme.api_key
    assert (await client.get("/tools/ids", headers=acme.headers)).status_code == 401
    fresh = {"Authorization": f"Bearer {new_key}"}
    assert (await client.get("/tools/ids", headers=fresh)).status_code == 200
    assert (await client.post("/tenants/nobody/keys", headers=ADMIN)).status_code == 404


async def test_delete_tenant_removes_its_tools_and_key(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    assert (await client.delete("/tenants/acme", headers=ADMIN)).status_code == 204
    assert (await client.get("/tools/ids", headers=acme.headers)).status_code == 401
    assert (await client.delete("/tenants/acme", headers=ADMIN)).status_code == 404

    reborn = await create_tenant(client, "acme")
    ids = {t["tool_id"] for t in (await client.get("/tools/ids", headers=reborn.headers)).json()}
    assert "weather-api" not in ids and "rolldice" in ids


async def _client_token(client: httpx.AsyncClient, tenant: TenantCredentials) -> dict[str, str]:
    created = await client.post(
        "/client-tokens", json={"name": "t", "context_arguments": {}}, headers=tenant.headers
    )
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


async def _opens(client: httpx.AsyncClient, bearer: dict[str, str]) -> tuple[bool, bool]:
    """Whether the token opens /mcp and /chat (anything but 401)."""
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    mcp = await client.post("/mcp", json=ping, headers=bearer)
    chat = await client.post(
        "/chat", json={"messages": [{"role": "user", "content": "hi"}]}, headers=bearer
    )
    return mcp.status_code != 401, chat.status_code != 401


async def test_rotation_revokes_client_tokens_at_once(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    bearers = [await _client_token(client, acme) for _ in range(2)]
    assert [await _opens(client, bearer) for bearer in bearers] == [(True, True)] * 2  # cached
    rotated = await client.post("/tenants/acme/keys", headers=ADMIN)
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["client_tokens_revoked"] == 2
    assert rotated.json()["client_tokens_kept"] == 0
    assert [await _opens(client, bearer) for bearer in bearers] == [(False, False)] * 2
    fresh = {"Authorization": f"Bearer {rotated.json()['api_key']}"}
    assert (await client.get("/client-tokens", headers=fresh)).json() == []


async def test_rotation_keeps_client_tokens_when_asked(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    bearer = await _client_token(client, acme)
    rotated = await client.post(
        "/tenants/acme/keys", json={"keep_client_tokens": True}, headers=ADMIN
    )
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["client_tokens_kept"] == 1
    assert rotated.json()["client_tokens_revoked"] == 0
    assert await _opens(client, bearer) == (True, True)
    refused = await client.post("/tenants/acme/keys", json={"keep": True}, headers=ADMIN)
    assert refused.status_code == 422


async def test_a_new_tenant_never_inherits_what_an_earlier_one_of_its_id_left(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """A delete that crashed half-way left records of `acme` behind: the new `acme` starts
    empty (its creation purges them before it seeds its tools)."""
    database = app.state.services.database
    await SecretRepository(database).put("old", "sealed", tenant_id="acme")
    await ToolRepository(database).insert(external_tool("left-over"), tenant_id="acme")
    acme = await create_tenant(client, "acme")
    assert (await client.get("/secrets", headers=acme.headers)).json() == []
    ids = {t["tool_id"] for t in (await client.get("/tools/ids", headers=acme.headers)).json()}
    assert "left-over" not in ids and "rolldice" in ids


async def test_a_tenant_whose_reconciliation_fails_is_created_and_reconciled_at_first_use(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fails while the new tenant is seeded: the tenant exists and its key is
    returned (a 503 would leave a tenant nobody holds the key of); its first use finishes it."""
    seeding = ToolRepository.insert_if_absent

    async def unavailable(*args: Any, **kwargs: Any) -> str:
        raise DatabaseUnavailable(too_slow=True)

    monkeypatch.setattr(ToolRepository, "insert_if_absent", unavailable)
    acme = await create_tenant(client, "acme")
    monkeypatch.setattr(ToolRepository, "insert_if_absent", seeding)
    ids = {t["tool_id"] for t in (await client.get("/tools/ids", headers=acme.headers)).json()}
    assert "rolldice" in ids
