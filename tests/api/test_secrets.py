"""/secrets: values go in sealed (AES-GCM, bound to tenant and name) and never come out;
tool definitions refer to them; `python -m app rotate-secrets` re-seals under a new key."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.crypto import SecretBox, new_key, parse_key
from app.deps import Services
from tests.support.apps import (
    ADMIN,
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.documents import external_tool
from tests.support.functions import registry as test_functions
from tests.support.processes import run_app
from tests.support.secantus import SecantusServer

CANARY = "sk-canary-7f3e9b21d4c8a6e0"
ROOT = Path(__file__).resolve().parents[2]


def services(app: FastAPI) -> Services:
    result: Services = app.state.services
    return result


async def raw_documents(app: FastAPI, tenant_id: str, resource: str) -> list[dict[str, Any]]:
    collection = services(app).database.scoped(resource, tenant_id)
    return [doc async for doc in collection.find({"tenant_id": tenant_id}, {"_id": 0})]


@pytest.mark.all_stores
async def test_put_list_delete_never_return_values_and_store_them_sealed(
    app: FastAPI, client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    created = await client.put("/secrets/weather_key", json={"value": CANARY}, headers=acme.headers)
    assert created.status_code == 201, created.text
    assert set(created.json()) == {"name", "created_at", "updated_at"}
    replaced = await client.put(
        "/secrets/weather_key", json={"value": CANARY + "-2"}, headers=acme.headers
    )
    assert replaced.status_code == 200
    assert replaced.json()["created_at"] == created.json()["created_at"]
    listed = await client.get("/secrets", headers=acme.headers)
    assert [s["name"] for s in listed.json()] == ["weather_key"]
    for response in (created, replaced, listed):
        assert CANARY not in response.text
    [stored] = await raw_documents(app, "acme", "secrets")
    assert stored["sealed"].startswith("v1.") and CANARY not in str(stored)
    # Opening it needs the tenant and the name it was sealed for.
    values = await services(app).secrets.resolve({"weather_key"}, tenant_id="acme")
    assert values == {"weather_key": CANARY + "-2"}
    # Another tenant sees nothing of it, and its own secret of that name is separate.
    assert (await client.get("/secrets", headers=globex.headers)).json() == []
    gone = await client.delete("/secrets/weather_key", headers=globex.headers)
    assert gone.status_code == 404
    assert (await client.delete("/secrets/weather_key", headers=acme.headers)).status_code == 204
    assert (await client.delete("/secrets/weather_key", headers=acme.headers)).status_code == 404
    assert (await client.get("/secrets", headers=acme.headers)).json() == []


@pytest.mark.all_stores
async def test_a_ciphertext_copied_to_another_tenant_or_name_does_not_open(
    app: FastAPI,
    client: httpx.AsyncClient,
    acme: TenantCredentials,
    globex: TenantCredentials,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await client.put("/secrets/key", json={"value": CANARY}, headers=acme.headers)
    await client.put("/secrets/key", json={"value": "globex-own"}, headers=globex.headers)
    await client.put("/secrets/other", json={"value": "acme-other"}, headers=acme.headers)
    [sealed] = [
        d["sealed"] for d in await raw_documents(app, "acme", "secrets") if d["name"] == "key"
    ]
    database = services(app).database
    # An attacker with write access to the database swaps ciphertexts around.
    await database.scoped("secrets", "globex").update_one(
        {"tenant_id": "globex", "name": "key"}, {"$set": {"sealed": sealed}}
    )
    await database.scoped("secrets", "acme").update_one(
        {"tenant_id": "acme", "name": "other"}, {"$set": {"sealed": sealed}}
    )
    with caplog.at_level(logging.DEBUG):  # every logger, the driver's command log included
        assert await services(app).secrets.resolve({"key"}, tenant_id="globex") == {"key": None}
        assert await services(app).secrets.resolve({"other"}, tenant_id="acme") == {"other": None}
        assert await services(app).secrets.resolve({"key"}, tenant_id="acme") == {"key": CANARY}
    assert "secret 'other' cannot be opened" in caplog.text
    assert CANARY not in caplog.text
    app_lines = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("app"))
    assert sealed not in app_lines


@pytest.fixture
async def capped(mongo_url: str | None) -> AsyncIterator[tuple[httpx.AsyncClient, Settings]]:
    settings = make_settings(mongo_url, max_secrets_per_tenant=3, max_secret_bytes=64)
    async with running_app(settings, test_functions) as app, http_client(app) as client:
        yield client, settings


async def test_caps_on_count_and_size_hold_at_the_limit_and_refuse_one_more(
    capped: tuple[httpx.AsyncClient, Settings],
) -> None:
    client, _ = capped
    acme = await create_tenant(client, "acme")
    for index in range(3):
        response = await client.put(f"/secrets/s{index}", json={"value": "x"}, headers=acme.headers)
        assert response.status_code == 201
    fourth = await client.put("/secrets/s3", json={"value": "x"}, headers=acme.headers)
    assert fourth.status_code == 409 and "MAX_SECRETS_PER_TENANT" in fourth.json()["detail"]
    # Replacing an existing one is not a new secret.
    again = await client.put("/secrets/s0", json={"value": "y" * 64}, headers=acme.headers)
    assert again.status_code == 200
    too_big = await client.put("/secrets/s0", json={"value": "y" * 65}, headers=acme.headers)
    assert too_big.status_code == 422 and too_big.json()["errors"][0]["path"] == "$.value"
    # Concurrent first writes of new names cannot pass the cap together.
    await client.delete("/secrets/s2", headers=acme.headers)
    racing = await asyncio.gather(
        *(client.put(f"/secrets/r{i}", json={"value": "x"}, headers=acme.headers) for i in range(8))
    )
    assert sorted(r.status_code for r in racing) == [201] + [409] * 7
    # Another tenant has its own count.
    globex = await create_tenant(client, "globex")
    assert (
        await client.put("/secrets/s0", json={"value": "x"}, headers=globex.headers)
    ).status_code == 201


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/secrets/bad.name", {"value": "x"}, 422),
        ("/secrets/ok", {"value": ""}, 422),
        ("/secrets/ok", {"value": 12}, 422),
        ("/secrets/ok", {"value": "x", "extra": 1}, 422),
        ("/secrets/ok", {"value": "a\u0000b"}, 422),
        ("/secrets/ok", {}, 422),
    ],
)
async def test_bad_puts_are_4xx(
    client: httpx.AsyncClient, acme: TenantCredentials, path: str, body: Any, status: int
) -> None:
    response = await client.put(path, json=body, headers=acme.headers)
    assert response.status_code == status, response.text


async def test_secrets_need_a_tenant_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/secrets")).status_code == 401
    assert (await client.get("/secrets", headers=ADMIN)).status_code == 403


async def test_deleting_a_tenant_deletes_its_secrets(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    await client.put("/secrets/key", json={"value": CANARY}, headers=acme.headers)
    assert (await client.delete("/tenants/acme", headers=ADMIN)).status_code == 204
    again = await create_tenant(client, "acme")
    assert (await client.get("/secrets", headers=again.headers)).json() == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"headers": {"Host": "evil.example"}}, "$.function.headers.Host"),
        ({"headers": {"X-Key": "{secret:bad name}"}}, "$.function.headers.X-Key"),
        ({"headers": {"X-Key": "{secret:}"}}, "$.function.headers.X-Key"),
        ({"headers": {"X-Key": "a\r\nInjected: 1"}}, "$.function.headers.X-Key"),
        ({"headers": {"Bad Name": "x"}}, "$.function.headers.Bad Name.[key]"),
    ],
)
async def test_header_templates_are_checked(
    client: httpx.AsyncClient, acme: TenantCredentials, change: dict[str, Any], path: str
) -> None:
    tool = external_tool()
    tool["function"].update(change)
    response = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert response.status_code == 422, response.text
    assert [e["path"] for e in response.json()["errors"]] == [path]


async def test_headers_only_on_external_tools_and_secret_parameters_are_strings(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    tool = await client.get("/tools/rolldice", headers=acme.headers)
    body = {k: tool.json()[k] for k in ("type", "function", "context_parameters", "tags")}
    body["function"]["headers"] = {"X-Key": "{secret:k}"}
    response = await client.put("/tools/rolldice", json=body, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.function.headers"
    ext = external_tool(context_parameters=[{"name": "n", "type": "integer", "secret": "k"}])
    response = await client.post("/tools/create", json=ext, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.context_parameters[0].type"
    fine = external_tool(context_parameters=[{"name": "api_key", "secret": "weather_key"}])
    fine["function"]["headers"] = {"Authorization": "Bearer {secret:weather_key}"}
    created = await client.post("/tools/create", json=fine, headers=acme.headers)
    assert created.status_code == 201, created.text
    # The template is shown (it names the secret); a value never exists in the tool.
    assert created.json()["function"]["headers"] == {"Authorization": "Bearer {secret:weather_key}"}


# --- key rotation, over a real database -------------------------------------------------------


def _rotate(
    url: str, database: str, current: str, old: str = ""
) -> subprocess.CompletedProcess[str]:
    return run_app(
        "rotate-secrets",
        MONGODB_URL=url,
        MONGODB_DATABASE=database,
        SECRETS_KEY=current,
        SECRETS_OLD_KEYS=old,
    )


@pytest.mark.processes
@pytest.mark.slow
async def test_rotation_re_seals_secrets_and_mcp_headers_under_the_new_key(
    secantus_server: SecantusServer,
) -> None:
    old_key, new = new_key(), new_key()
    first = make_settings(secantus_server.url, secrets_key=old_key)
    database = first.mongodb_database
    async with running_app(first, test_functions) as app, http_client(app) as client:
        acme = await create_tenant(client, "acme")
        await client.put("/secrets/key", json={"value": CANARY}, headers=acme.headers)
        mcp = {
            "name": "docs",
            "type": "streamable-http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer mcp-canary-0123456789"},
        }
        assert (
            await client.post("/mcp-servers", json=mcp, headers=acme.headers)
        ).status_code == 201
        token = await client.post(
            "/client-tokens",
            json={"name": "alice", "context_arguments": {"user_id": "token-canary-user"}},
            headers=acme.headers,
        )
        assert token.status_code == 201
        bearer = {"Authorization": f"Bearer {token.json()['token']}"}
        tokens = services(app).database.collection("client_tokens")
        assert "token-canary-user" not in str(await tokens.find_one({}))
        [server_doc] = await raw_documents(app, "acme", "mcp_servers")
        assert "mcp-canary" not in str(server_doc)
        assert server_doc["headers"]["Authorization"].startswith("v1.")

        # Without the old key, rotation cannot open anything: it says what, never a value.
        refused = await asyncio.to_thread(_rotate, secantus_server.url, database, new)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "acme/secrets/key" in refused.stdout and "acme/mcp-servers/docs" in refused.stdout
        assert f"acme/client_tokens/{token.json()['token_id']}" in refused.stdout
        assert CANARY not in refused.stdout + refused.stderr

        done = await asyncio.to_thread(_rotate, secantus_server.url, database, new, old_key)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "re-encrypted 3 value(s)" in done.stdout
        again = await asyncio.to_thread(_rotate, secantus_server.url, database, new, old_key)
        assert "re-encrypted 0 value(s)" in again.stdout and "3 already current" in again.stdout

        [stored] = await raw_documents(app, "acme", "secrets")
        assert SecretBox(parse_key(new, setting="new")).needs_resealing(stored["sealed"]) is False

        # (Nested: each test app drops the database when it stops.) The service with only the
        # new key reads everything; with only the old key it reads nothing.
        rotated = make_settings(secantus_server.url, secrets_key=new, mongodb_database=database)
        stale = make_settings(secantus_server.url, secrets_key=old_key, mongodb_database=database)
        async with (
            running_app(rotated, test_functions) as new_app,
            http_client(new_app) as new_client,
            running_app(stale, test_functions) as old_app,
            http_client(old_app) as old_client,
        ):
            values = await services(new_app).secrets.resolve({"key"}, tenant_id="acme")
            assert values == {"key": CANARY}
            shown = await new_client.get("/mcp-servers/docs", headers=acme.headers)
            assert shown.json()["headers"] == {"Authorization": "****6789"}
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            listed = await new_client.post("/mcp", json=listing, headers=bearer)  # still opens
            assert listed.status_code == 200 and listed.json()["result"]["tools"], listed.text
            unreadable = await services(old_app).secrets.resolve({"key"}, tenant_id="acme")
            assert unreadable == {"key": None}
            broken = await old_client.get("/mcp-servers/docs", headers=acme.headers)
            assert broken.status_code == 503 and "SECRETS_OLD_KEYS" in broken.json()["detail"]


def test_keys_are_checked_without_echoing_them() -> None:
    with pytest.raises(ValueError, match="SECRETS_KEY must decode to 32 bytes") as caught:
        make_settings(None, secrets_key="c2hvcnQ=", admin_api_key="admin-canary-key-000000000")
    assert "admin-canary" not in str(caught.value)
    with pytest.raises(ValueError, match=r"SECRETS_OLD_KEYS\[1\]"):
        make_settings(None, secrets_old_keys=f"{new_key()},nope")
    production = {
        "app_env": "production",
        "admin_api_key": "a" * 40,
        "api_key_secret": "b" * 40,
    }
    with pytest.raises(ValueError, match="SECRETS_KEY is missing"):
        make_settings(None, **production)
    Settings(_env_file=None, **production, secrets_key=new_key())  # type: ignore[call-arg]
