"""Every route x {no key, bad key, rotated key, admin key, tenant key}."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.apps import ADMIN, create_tenant
from tests.support.documents import external_tool

pytestmark = pytest.mark.all_stores

TENANT_ROUTES: list[tuple[str, str, Any, int]] = [
    ("POST", "/tools/create", external_tool("fresh"), 201),
    ("GET", "/tools/", None, 200),
    ("GET", "/tools/ids", None, 200),
    ("GET", "/tools/weather-api", None, 200),
    ("PUT", "/tools/weather-api", external_tool(), 200),
    ("DELETE", "/tools/weather-api", None, 204),
]
ADMIN_ROUTES: list[tuple[str, str, Any, int]] = [
    ("POST", "/tenants", {"tenant_id": "newco"}, 201),
    ("GET", "/tenants", None, 200),
    ("POST", "/tenants/victim/keys", None, 200),
    ("DELETE", "/tenants/victim", None, 204),
]
CREDENTIALS = ["none", "malformed", "unknown", "rotated", "admin", "tenant", "basic"]


async def _headers(client: httpx.AsyncClient, kind: str) -> dict[str, str]:
    acme = await create_tenant(client, "acme")
    await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    await create_tenant(client, "victim")
    if kind == "rotated":
        old = await create_tenant(client, "rotor")
        await client.post("/tenants/rotor/keys", headers=ADMIN)
        return old.headers
    return {
        "none": {},
        "malformed": {"Authorization": "Bearer not a key"},
        "unknown": {"Authorization": "Bearer tg_" + "A" * 43},
        "admin": ADMIN,
        "tenant": acme.headers,
        "basic": {"Authorization": "Basic YWRtaW46YWRtaW4="},
    }[kind]


def _expected(kind: str, own: str, success: int) -> int:
    if kind == own:
        return success
    if kind in ("admin", "tenant"):
        return 403
    return 401


@pytest.mark.parametrize("kind", CREDENTIALS)
@pytest.mark.parametrize(("method", "path", "body", "success"), TENANT_ROUTES)
async def test_tenant_routes(
    client: httpx.AsyncClient, kind: str, method: str, path: str, body: Any, success: int
) -> None:
    headers = await _headers(client, kind)
    response = await client.request(method, path, json=body, headers=headers)
    assert response.status_code == _expected(kind, "tenant", success), response.text
    if response.status_code == 401:
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("kind", CREDENTIALS)
@pytest.mark.parametrize(("method", "path", "body", "success"), ADMIN_ROUTES)
async def test_admin_routes(
    client: httpx.AsyncClient, kind: str, method: str, path: str, body: Any, success: int
) -> None:
    headers = await _headers(client, kind)
    response = await client.request(method, path, json=body, headers=headers)
    assert response.status_code == _expected(kind, "admin", success), response.text
    if response.status_code in (401, 403):
        listing = (await client.get("/tenants", headers=ADMIN)).json()
        assert {t["tenant_id"] for t in listing["items"]} >= {"acme", "victim"}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/tools/ids", None),
        ("GET", "/tenants", None),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ("POST", "/chat", {"messages": [{"role": "user", "content": "hi"}]}),
    ],
)
async def test_two_authorization_headers_are_400(
    client: httpx.AsyncClient, method: str, path: str, body: Any
) -> None:
    """Which of two a proxy, a log or this service reads would differ: neither is taken."""
    acme = await create_tenant(client, "acme")
    valid = acme.headers["Authorization"] if path != "/tenants" else ADMIN["Authorization"]
    for pair in ([valid, "Bearer tg_" + "A" * 43], ["Bearer tg_" + "A" * 43, valid], [valid] * 2):
        headers = [("Authorization", value) for value in pair]
        response = await client.request(method, path, json=body, headers=headers)
        assert response.status_code == 400, (pair, response.text)
        assert "one Authorization header" in response.json()["detail"]


@pytest.mark.parametrize(
    "path", ["/mcp/", "/tools/ids/", "/tools/weather-api/", "/tenants/", "/runs/"]
)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_trailing_slash_is_not_redirected_before_the_credential(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    acme = await create_tenant(client, "acme")
    for headers in ({}, acme.headers):
        response = await client.request(method, path, headers=headers)
        assert response.status_code in (401, 404, 405), (headers, response.status_code)
        assert "location" not in response.headers


async def test_the_tool_list_answers_with_and_without_its_slash(client: httpx.AsyncClient) -> None:
    acme = await create_tenant(client, "acme")
    for path in ("/tools", "/tools/"):
        assert (await client.get(path)).status_code == 401
        listed = await client.get(path, headers=acme.headers)
        assert listed.status_code == 200 and listed.json()["total"] >= 1
