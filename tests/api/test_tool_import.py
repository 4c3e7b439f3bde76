"""POST /tools/import: real OpenAPI documents become external tools, and every imported tool is
called on a real local server that records the method, path, query, headers and body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import functions
from tests.support import upstream as upstream_api
from tests.support.apps import (
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.schema_samples import sample
from tests.support.servers import ThreadedServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openapi"
PETSTORE = (FIXTURES / "petstore-3.0.yaml").read_text()
SCOPES = json.loads((FIXTURES / "non-oauth-scopes-3.1.json").read_text())
SAMPLE = {"integer": 7, "number": 1.5, "boolean": True, "string": "x"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(None, outbound_allow=["127.0.0.1"], rate_limit_writes_per_minute=0)
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        yield client


async def secret(
    client: httpx.AsyncClient, tenant: TenantCredentials, name: str, value: str
) -> None:
    put = await client.put(f"/secrets/{name}", json={"value": value}, headers=tenant.headers)
    assert put.status_code in (200, 201)


async def ids(client: httpx.AsyncClient, tenant: TenantCredentials) -> set[str]:
    return {t["tool_id"] for t in (await client.get("/tools/ids", headers=tenant.headers)).json()}


async def call_each(
    client: httpx.AsyncClient, tenant: TenantCredentials, tools: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Invoke every tool with a value for each parameter; what the server received for each."""
    seen = []
    for tool in tools:
        parameters = tool["function"]["parameters"]
        defs = parameters.get("$defs")
        arguments = {n: sample(s, defs) for n, s in parameters["properties"].items()}
        upstream_api.RECEIVED.clear()
        answer = await client.post(
            f"/tools/{tool['tool_id']}/invoke",
            json={"arguments": arguments},
            headers=tenant.headers,
        )
        assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
        [received] = upstream_api.RECEIVED
        seen.append((tool, received))
    return seen


@pytest.mark.slow
async def test_petstore_30_imports_and_every_tool_reaches_the_server_as_declared(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme = await create_tenant(client, "acme")
    await secret(client, acme, "pet_key", "pk-0123456789")
    await secret(client, acme, "pet_token", "tok-0123456789")
    before = await ids(client, acme)
    body = {
        "document_text": PETSTORE,
        "server_url": f"{upstream.url}/p/v3",
        "security": {"api_key": "pet_key", "petstore_auth": "pet_token"},
        "tags": ["petstore"],
        "dry_run": True,
    }
    dry = await client.post("/tools/import", json=body, headers=acme.headers)
    assert dry.status_code == 200, dry.text
    assert await ids(client, acme) == before  # nothing stored
    skipped = {s["operation"]: s["reason"] for s in dry.json()["skipped"]}
    assert skipped == {  # nested objects (a pet's category) and array bodies are kept now
        "POST /pet/{petId}/uploadImage": (
            "the request body is not JSON, a form or multipart (application/octet-stream)"
        ),
    }
    assert dry.json()["problems"] == []
    notes = {(n["tool_id"], n["note"]) for n in dry.json()["notes"]}
    assert (
        "updateUser",
        "'username' is both a path and a body one: left out (optional)",
    ) in notes

    done = await client.post("/tools/import", json={**body, "dry_run": False}, headers=acme.headers)
    assert done.status_code == 200, done.text
    tools = done.json()["tools"]
    assert len(tools) == 18 and await ids(client, acme) == before | {t["tool_id"] for t in tools}
    assert all(t["tags"] == ["petstore"] for t in tools)

    for tool, received in await call_each(client, acme, tools):
        function = tool["function"]
        assert received["method"] == function["method"]
        template = function["url"].removeprefix(upstream.url)
        path = template
        for name, schema in function["parameters"]["properties"].items():
            value = sample(schema)
            if schema.get("in") == "path":
                path = path.replace(f"{{{name}}}", str(value).lower())
            elif schema.get("in") == "query":
                for item in value if isinstance(value, list) else [value]:
                    assert [
                        name,
                        str(item).lower() if isinstance(item, bool) else str(item),
                    ] in received["query"]
            elif schema.get("in") == "header":
                assert received["headers"][name.lower()] == str(value)
            elif name == function.get("body_parameter"):  # the whole body (a list of users)
                assert received["json"] == value
            elif schema.get("in") == "body":
                assert received["json"][name] == value
        assert received["raw_path"] == path, (tool["tool_id"], received)

    by_id = {t["tool_id"]: t for t in tools}
    assert by_id["getPetById"]["function"]["headers"] == {"api_key": "{secret:pet_key}"}
    pair = [by_id["getPetById"], by_id["findPetsByTags"]]
    seen = {t["tool_id"]: r for t, r in await call_each(client, acme, pair)}
    assert seen["getPetById"]["headers"]["api_key"] == "pk-0123456789"
    assert seen["findPetsByTags"]["headers"]["authorization"] == "Bearer tok-0123456789"
    assert seen["findPetsByTags"]["query"] == [["tags", "abc"]]

    # A path value that tries to escape reaches the server inside one segment.
    upstream_api.RECEIVED.clear()
    answer = await client.post(
        "/tools/getUserByName/invoke",
        json={"arguments": {"username": "../admin?x=1"}},
        headers=acme.headers,
    )
    assert answer.json()["status"] == "ok"
    assert upstream_api.RECEIVED[-1]["raw_path"] == "/p/v3/user/..%2Fadmin%3Fx%3D1"

    # All or nothing: importing again collides with every id; nothing more is stored.
    again = await client.post(
        "/tools/import", json={**body, "dry_run": False}, headers=acme.headers
    )
    assert again.status_code == 422
    assert any("is taken" in e["message"] for e in again.json()["errors"])
    assert await ids(client, acme) == before | {t["tool_id"] for t in tools}


async def test_a_31_document_without_servers_or_operation_ids(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme = await create_tenant(client, "acme")
    await secret(client, acme, "jwt", "eyJ-canary")
    no_server = await client.post("/tools/import", json={"document": SCOPES}, headers=acme.headers)
    assert no_server.status_code == 422
    assert "give `server_url`" in json.dumps(no_server.json())
    unmapped = await client.post(
        "/tools/import",
        json={"document": SCOPES, "server_url": f"{upstream.url}/p"},
        headers=acme.headers,
    )
    assert unmapped.status_code == 422 and "map it to a secret" in unmapped.text
    done = await client.post(
        "/tools/import",
        json={
            "document": SCOPES,
            "server_url": f"{upstream.url}/p",
            "security": {"bearerAuth": "jwt"},
        },
        headers=acme.headers,
    )
    assert done.status_code == 200, done.text
    [tool] = done.json()["tools"]
    assert tool["tool_id"] == "get_users" and tool["function"]["method"] == "GET"
    [(_, received)] = await call_each(client, acme, [tool])
    assert received["raw_path"] == "/p/users"
    assert received["headers"]["authorization"] == "Bearer eyJ-canary"


async def test_the_services_own_openapi_document(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme = await create_tenant(client, "acme")
    await secret(client, acme, "tg_key", "tg-canary")
    own = (await client.get("/openapi.json")).json()
    assert own["openapi"].startswith("3.1")
    body = {
        "document": own,
        "server_url": f"{upstream.url}/p",
        "prefix": "tg_",
        "security": dict.fromkeys(own["components"]["securitySchemes"], "tg_key"),
        "openapi_tags": ["tools", "runs", "secrets", "client tokens"],
    }
    done = await client.post("/tools/import", json=body, headers=acme.headers)
    assert done.status_code == 200, done.text
    tools = done.json()["tools"]
    assert {"tg_get_tool_tools__tool_id__get", "tg_list_runs_runs_get"} <= {
        t["tool_id"] for t in tools
    }
    created = next(t for t in tools if t["function"]["url"].endswith("/tools/create"))
    function = created["function"]["parameters"]["properties"]["function"]  # nested: kept
    assert function["in"] == "body" and "name" in function["properties"]
    for tool, received in await call_each(client, acme, tools):
        assert received["method"] == tool["function"]["method"]
        assert received["raw_path"].startswith("/p/") and "{" not in received["raw_path"]
        assert received["headers"]["authorization"] == "Bearer tg-canary"


async def test_by_url_through_the_outbound_guard(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme = await create_tenant(client, "acme")
    body = {
        "url": f"{upstream.url}/openapi/petstore-3.0.yaml",
        "operation_ids": ["getOrderById"],
        "dry_run": True,
    }
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200, answer.text
    [tool] = answer.json()["tools"]  # the relative server `/v3` resolved against the URL
    assert tool["function"]["url"] == f"{upstream.url}/v3/store/order/{{orderId}}"
    blocked = await client.post(
        "/tools/import",
        json={**body, "url": "http://169.254.169.254/openapi.json"},
        headers=acme.headers,
    )
    assert blocked.status_code == 422 and blocked.json()["errors"][0]["path"] == "$.url"
    missing = await client.post(
        "/tools/import",
        json={**body, "url": f"{upstream.url}/openapi/nothing.yaml"},
        headers=acme.headers,
    )
    assert missing.status_code == 422 and "HTTP 404" in missing.text


def _document(paths: dict[str, Any], components: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": paths,
        "components": components or {},
    }


def _body_op(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "/things": {
            "post": {
                "operationId": "makeThing",
                "requestBody": {"content": {"application/json": {"schema": schema}}},
            }
        }
    }


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"document": {"swagger": "1.2", "paths": {}}},
            "not an OpenAPI 3.0 or 3.1 document (found swagger 1.2)",
        ),
        ({"document": {"hello": "world"}}, "not an OpenAPI 3.0 or 3.1 document"),
        ({"document_text": "a: [unclosed"}, "neither JSON nor YAML"),
        ({"document_text": "a: &x [1]\nb: *x\n"}, "YAML anchors and aliases are not accepted"),
        (
            {"document": _document(_body_op({"$ref": "other.yaml#/Thing"}))},
            "$ref 'other.yaml#/Thing' points outside the document",
        ),
        (
            {
                "document": _document(
                    _body_op({"$ref": "#/components/schemas/Node"}),
                    {
                        "schemas": {
                            "Node": {
                                "type": "object",
                                "properties": {"next": {"$ref": "#/components/schemas/Node"}},
                                "required": ["next"],
                            }
                        }
                    },
                )
            },
            "contains its own schema (#/components/schemas/Node) more than 2 levels deep",
        ),
        (
            {
                "document": _document(
                    {f"/p{i}": {"get": {"operationId": f"op{i}"}} for i in range(2000)}
                )
            },
            "2000 operations are selected; at most 500",
        ),
        ({"document": {}, "url": "https://api.example.com/x"}, "give exactly one of"),
    ],
)
async def test_bad_documents_are_422_with_the_reason_and_store_nothing(
    client: httpx.AsyncClient, body: dict[str, Any], expected: str
) -> None:
    acme = await create_tenant(client, "acme")
    before = await ids(client, acme)
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 422, answer.text
    assert expected in json.dumps(answer.json()), answer.json()
    assert await ids(client, acme) == before


async def test_a_10_mb_document_is_refused_before_it_is_read(client: httpx.AsyncClient) -> None:
    acme = await create_tenant(client, "acme")
    big = b'{"document_text": "' + b"x" * 10_000_000 + b'"}'  # not encoded on the loop
    headers = {**acme.headers, "Content-Type": "application/json"}
    answer = await client.post("/tools/import", content=big, headers=headers)
    assert answer.status_code == 413


async def test_unexpressible_operations_are_skipped_not_mangled(client: httpx.AsyncClient) -> None:
    acme = await create_tenant(client, "acme")
    paths = {
        "/a": {
            "post": {
                "operationId": "withOneOf",
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": {"oneOf": [{"type": "object"}, {"type": "string"}]}
                        }
                    }
                },
            }
        },
        "/b": {
            "post": {
                "operationId": "withForm",
                "requestBody": {"content": {"multipart/form-data": {"schema": {"type": "object"}}}},
            }
        },
        "/c": {
            "get": {
                "operationId": "withCookie",
                "parameters": [{"name": "session", "in": "cookie", "required": True, "schema": {}}],
            }
        },
        "/d/{id}": {
            "get": {
                "operationId": "fine",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
                ],
            }
        },
    }
    answer = await client.post(
        "/tools/import", json={"document": _document(paths), "dry_run": True}, headers=acme.headers
    )
    assert answer.status_code == 200, answer.text
    reasons = {s["operation_id"]: s["reason"] for s in answer.json()["skipped"]}
    assert reasons == {"withCookie": "the cookie parameter 'session' cannot be sent"}
    tools = {t["tool_id"]: t for t in answer.json()["tools"]}
    assert tools["withForm"]["function"]["body_type"] == "multipart"
    assert tools["withOneOf"]["function"]["body_parameter"] == "body"  # a choice: sent whole
    properties = tools["fine"]["function"]["parameters"]["properties"]
    assert properties["id"] == {"type": "integer", "in": "path"}


@pytest.mark.slow
async def test_the_tool_cap_holds_for_a_whole_import() -> None:
    # Room for 5 beside the 11 seeded functions of the test dictionary: Petstore gives 14.
    settings = make_settings(None, max_tools_per_tenant=16, rate_limit_writes_per_minute=0)
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        acme = await create_tenant(client, "acme")
        before = await ids(client, acme)
        body = {"document_text": PETSTORE, "server_url": "https://petstore.example.com/v3"}
        dry = await client.post(
            "/tools/import", json={**body, "dry_run": True}, headers=acme.headers
        )
        assert dry.status_code == 200 and "MAX_TOOLS_PER_TENANT" in json.dumps(
            dry.json()["problems"]
        )
        answer = await client.post("/tools/import", json=body, headers=acme.headers)
        assert answer.status_code == 422 and "room for" in answer.text
        assert await ids(client, acme) == before
        picked = {**body, "operation_ids": ["getOrderById", "deleteOrder"]}
        assert (
            await client.post("/tools/import", json=picked, headers=acme.headers)
        ).status_code == 200


async def test_a_parameter_that_is_also_the_credential_is_dropped(
    client: httpx.AsyncClient,
) -> None:
    acme = await create_tenant(client, "acme")
    doc = _document(
        {
            "/x": {
                "get": {
                    "operationId": "withKey",
                    "security": [{"key": []}],
                    "parameters": [
                        {"name": "api_key", "in": "header", "schema": {"type": "string"}}
                    ],
                }
            }
        },
        {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "api_key"}}},
    )
    body = {"document": doc, "security": {"key": "k"}, "dry_run": True}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200 and answer.json()["skipped"] == []
    [tool] = answer.json()["tools"]
    assert tool["function"]["parameters"]["properties"] == {}  # the credential fills it
    assert tool["function"]["headers"] == {"api_key": "{secret:k}"}
    assert answer.json()["notes"][0]["note"] == (
        "'api_key' is filled by the mapped credential: left out"
    )
