"""Operating the service: request ids, CORS allow-list, docs toggle."""

from __future__ import annotations

import re

import httpx
import pytest

from app.kit.crypto import new_key
from tests.support.apps import ADMIN, http_client, make_settings, running_app
from tests.support.functions import registry


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/ping", {}, 200),
        ("GET", "/tools/", {}, 401),
        ("GET", "/nowhere", {}, 404),
        ("POST", "/tenants", {**ADMIN, "Content-Length": "99999999"}, 413),
    ],
)
async def test_every_answer_has_a_request_id(
    client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    response = await client.request(method, path, headers=headers)
    assert response.status_code == status
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])


async def test_a_sane_request_id_is_kept_and_others_replaced(client: httpx.AsyncClient) -> None:
    kept = await client.get("/ping", headers={"X-Request-ID": "trace-42.a:b_c"})
    assert kept.headers["x-request-id"] == "trace-42.a:b_c"
    for bad in ("x" * 129, "has space", 'quote"', "semi;colon", "<script>"):
        response = await client.get("/ping", headers={"X-Request-ID": bad})
        assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"]), bad
        assert response.headers.get_list("x-request-id") == [response.headers["x-request-id"]]


async def test_cors_is_closed_by_default(client: httpx.AsyncClient) -> None:
    preflight = {"Origin": "https://admin.example", "Access-Control-Request-Method": "GET"}
    response = await client.options("/tools/", headers=preflight)
    assert "access-control-allow-origin" not in response.headers
    simple = await client.get("/ping", headers={"Origin": "https://admin.example"})
    assert "access-control-allow-origin" not in simple.headers


async def test_cors_allows_listed_origins_only() -> None:
    settings = make_settings(None, cors_allow_origins="https://admin.example")
    async with running_app(settings, registry) as app, http_client(app) as client:
        preflight = {
            "Origin": "https://admin.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        }
        allowed = await client.options("/tools/create", headers=preflight)
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://admin.example"
        other = await client.options(
            "/tools/create", headers={**preflight, "Origin": "https://evil.example"}
        )
        assert other.status_code == 400
        assert "access-control-allow-origin" not in other.headers
        simple = await client.get("/ping", headers={"Origin": "https://admin.example"})
        assert simple.headers["access-control-allow-origin"] == "https://admin.example"
        assert "X-Request-ID" in simple.headers["access-control-expose-headers"]


async def test_docs_can_be_turned_off() -> None:
    async with (
        running_app(make_settings(None, docs_enabled=False), registry) as app,
        http_client(app) as client,
    ):
        for path in ("/docs", "/redoc", "/openapi.json", "/docs/assets/swagger-ui-bundle.js"):
            assert (await client.get(path)).status_code == 404, path
        assert (await client.get("/ping")).status_code == 200


@pytest.mark.parametrize(
    ("app_env", "docs_enabled", "served"),
    [
        ("production", None, False),  # the default in production: no map of the API
        ("production", True, True),  # the operator said so
        ("development", None, True),
        ("development", False, False),
    ],
)
async def test_docs_are_off_in_production_unless_turned_on(
    app_env: str, docs_enabled: bool | None, served: bool
) -> None:
    production = {
        "admin_api_key": "a" * 40,
        "api_key_secret": "b" * 40,
        "secrets_key": new_key(),
    }
    settings = make_settings(
        None,
        app_env=app_env,
        docs_enabled=docs_enabled,
        **(production if app_env == "production" else {}),
    )
    async with running_app(settings, registry) as app, http_client(app) as client:
        for path in ("/docs", "/redoc", "/openapi.json"):
            expected = 200 if served else 404
            assert (await client.get(path)).status_code == expected, path


def test_an_empty_docs_enabled_is_unset() -> None:
    assert make_settings(None, docs_enabled="").docs_served is True
    assert make_settings(None, docs_enabled="false").docs_served is False
