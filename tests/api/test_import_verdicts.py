"""POST /tools/import, round 3 (issue 45): a verdict per operation, schemas merged right and
bodies sent as the document says; each case is a shape a real document has (named beside it),
and each request is checked on a real local server that records what arrived."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from tests.support.servers import ThreadedServer

SERVER = "https://api.example.com"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(None, outbound_allow=["127.0.0.1"], rate_limit_writes_per_minute=0)
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        yield client


@pytest.fixture
async def acme(client: httpx.AsyncClient) -> TenantCredentials:
    return await create_tenant(client, "acme")


def document(paths: dict[str, Any], components: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": SERVER}],
        "paths": paths,
        "components": components or {},
    }


def body_operation(
    operation_id: str, content: dict[str, Any], *, required: bool = False
) -> dict[str, Any]:
    return {"operationId": operation_id, "requestBody": {"content": content, "required": required}}


async def imported(
    client: httpx.AsyncClient, tenant: TenantCredentials, **body: Any
) -> dict[str, Any]:
    answer = await client.post("/tools/import", json=body, headers=tenant.headers)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def invoke(
    client: httpx.AsyncClient, tenant: TenantCredentials, tool_id: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    upstream_api.RECEIVED.clear()
    answer = await client.post(
        f"/tools/{tool_id}/invoke", json={"arguments": arguments}, headers=tenant.headers
    )
    assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
    [received] = upstream_api.RECEIVED
    return received


async def test_an_allof_part_that_narrows_a_member_keeps_its_members_and_every_required(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """SendGrid's `POST /senders`: the second part narrows `from` to `{required: [email]}`; the
    member stays an object with `email` and `name`, `email` required, and the document's own
    example is a valid call."""
    sender = {
        "type": "object",
        "properties": {
            "nickname": {"type": "string"},
            "from": {
                "type": "object",
                "properties": {"email": {"type": "string"}, "name": {"type": "string"}},
            },
            "city": {"type": "string"},
        },
    }
    narrowing = {
        "type": "object",
        "properties": {"from": {"type": "object", "required": ["email"]}},
        "required": ["nickname", "city"],
    }
    example = {"nickname": "My Sender", "from": {"email": "a@example.com"}, "city": "Denver"}
    schema = {"allOf": [{"$ref": "#/components/schemas/Sender"}, narrowing], "example": example}
    paths = {
        "/senders": {
            "post": body_operation("createSender", {"application/json": {"schema": schema}})
        }
    }
    doc = document(paths, {"schemas": {"Sender": sender}})
    answer = await imported(client, acme, document=doc, dry_run=True)
    [tool] = answer["tools"]
    parameters = tool["function"]["parameters"]
    assert sorted(parameters["required"]) == ["city", "nickname"]
    sent_from = parameters["properties"]["from"]
    assert sent_from["required"] == ["email"]
    assert set(sent_from["properties"]) == {"email", "name"}
    assert answer["notes"] == []  # the merged schema takes the document's own example

    wrong = {**example, "from": {"name": "no email"}}  # an example the merge says is wrong
    schema_wrong = {**schema, "example": wrong}
    paths_wrong = {
        "/senders": {
            "post": body_operation("createSender", {"application/json": {"schema": schema_wrong}})
        }
    }
    noted = await imported(
        client, acme, document=document(paths_wrong, {"schemas": {"Sender": sender}}), dry_run=True
    )
    [note] = noted["notes"]
    assert note["note"].startswith("the document's example does not fit the body: ")
    assert "email" in note["note"]

    stored = await imported(client, acme, document=doc, server_url=SERVER)
    assert stored["summary"]["stored"] == 1
    refused = await client.post(
        "/tools/createSender/invoke",
        json={"arguments": {**example, "from": {"name": "no email"}}},
        headers=acme.headers,
    )
    assert refused.json()["error"]["kind"] == "invalid_arguments", refused.text
    assert "email" in refused.json()["error"]["message"]


async def test_a_form_body_follows_its_encoding(
    client: httpx.AsyncClient, acme: TenantCredentials, upstream: ThreadedServer
) -> None:
    """Stripe's form bodies say `encoding: {metadata: {style: deepObject, explode: true}}`:
    `metadata[order_id]=6735`, not `order_id=6735`; nested objects and lists alike."""
    form = {
        "schema": {
            "type": "object",
            "properties": {
                "amount": {"type": "integer"},
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                "card": {
                    "type": "object",
                    "properties": {"address": {"type": "object"}, "tags": {"type": "array"}},
                },
            },
        },
        "encoding": {
            "metadata": {"style": "deepObject", "explode": True},
            "card": {"style": "deepObject", "explode": True},
        },
    }
    paths = {
        "/echo": {"post": body_operation("charge", {"application/x-www-form-urlencoded": form})}
    }
    await imported(client, acme, document=document(paths), server_url=upstream.url)
    arguments = {
        "amount": 2000,
        "metadata": {"order_id": "6735"},
        "card": {"address": {"city": "Paris"}, "tags": ["a", "b"]},
    }
    received = await invoke(client, acme, "charge", arguments)
    assert received["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert received["body"].decode().split("&") == [
        "amount=2000",
        "metadata%5Border_id%5D=6735",
        "card%5Baddress%5D%5Bcity%5D=Paris",
        "card%5Btags%5D%5B0%5D=a",
        "card%5Btags%5D%5B1%5D=b",
    ]


async def test_a_required_body_without_members_is_sent(
    client: httpx.AsyncClient, acme: TenantCredentials, upstream: ThreadedServer
) -> None:
    """Plaid and LaunchDarkly: a required body whose schema has no members was not sent at
    all ("Body parameter is required"): it is the parameter `body`, required, sent as given."""
    content = {"application/json": {"schema": {"type": "object"}}}
    paths = {"/echo": {"post": body_operation("reset", content, required=True)}}
    answer = await imported(client, acme, document=document(paths), server_url=upstream.url)
    [tool] = answer["tools"]
    assert tool["function"]["body_parameter"] == "body"
    assert tool["function"]["parameters"]["required"] == ["body"]
    received = await invoke(client, acme, "reset", {"body": {}})
    assert received["body"] == b"{}"
    assert received["headers"]["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("media_type", "schema", "value"),
    [
        ("application/merge-patch+json", {"type": "object"}, {"spec": {"replicas": 2}}),
        (
            "application/json-patch+json",
            {"type": "array", "items": {"type": "object"}},
            [{"op": "replace", "path": "/spec/replicas", "value": 2}],
        ),
        ("*/*", {"type": "object", "properties": {"kind": {"type": "string"}}}, None),
    ],
    ids=["merge-patch", "json-patch", "any"],
)
async def test_patch_and_any_media_types_are_json_sent_with_their_own_type(
    client: httpx.AsyncClient,
    acme: TenantCredentials,
    upstream: ThreadedServer,
    media_type: str,
    schema: dict[str, Any],
    value: Any,
) -> None:
    """Kubernetes: 390 of 833 operations were skipped as "not JSON" (`*/*` and the patch
    types)."""
    paths = {"/echo": {"patch": body_operation("patchIt", {media_type: {"schema": schema}})}}
    answer = await imported(client, acme, document=document(paths), server_url=upstream.url)
    assert answer["skipped"] == [] and answer["summary"]["stored"] == 1
    arguments = {"body": value} if value is not None else {"kind": "Pod"}
    received = await invoke(client, acme, "patchIt", arguments)
    expected_type = "application/json" if media_type == "*/*" else media_type
    assert received["headers"]["content-type"] == expected_type
    assert httpx.Response(200, content=received["body"]).json() == (value or {"kind": "Pod"})


async def test_a_type_that_is_a_list_of_lists_is_a_verdict_not_a_500(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    parameter = {"name": "q", "in": "query", "schema": {"type": [["string"], "integer"]}}
    paths = {"/x": {"get": {"operationId": "listy", "parameters": [parameter]}}}
    answer = await imported(client, acme, document=document(paths), dry_run=True)
    [tool] = answer["tools"]
    assert tool["function"]["parameters"]["properties"]["q"]["type"] == "integer"


async def test_a_path_parameter_named_like_the_credential_header_is_kept(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """Stripe's `/v1/issuing/authorizations/{authorization}` with a bearer key: the credential
    fills the `Authorization` header, not the path."""
    path_parameter = {"name": "authorization", "in": "path", "required": True, "schema": {}}
    header_parameter = {"name": "Authorization", "in": "header", "schema": {"type": "string"}}
    paths = {
        "/v1/authorizations/{authorization}": {
            "get": {
                "operationId": "getAuthorization",
                "parameters": [path_parameter, header_parameter],
                "security": [{"bearer": []}],
            }
        }
    }
    schemes = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    body = {"document": document(paths, schemes), "security": {"bearer": "stripe_key"}}
    answer = await imported(client, acme, **body, dry_run=True)
    [tool] = answer["tools"]
    assert tool["function"]["parameters"]["properties"] == {"authorization": {"in": "path"}}
    assert tool["function"]["headers"] == {"Authorization": "Bearer {secret:stripe_key}"}


async def test_a_percent_encoded_ref_is_followed(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """DigitalOcean: `#/paths/~1v2~1droplets~1%7Bdroplet_id%7D/get/parameters/0` (a URI
    fragment: percent-encoded, RFC 6901 section 6); 183 of 290 operations were skipped."""
    droplet = {"name": "droplet_id", "in": "path", "required": True, "schema": {"type": "integer"}}
    paths = {
        "/v2/droplets/{droplet_id}": {
            "get": {"operationId": "getDroplet", "parameters": [droplet]}
        },
        "/v2/droplets/{droplet_id}/actions": {
            "get": {
                "operationId": "listActions",
                "parameters": [
                    {"$ref": "#/paths/~1v2~1droplets~1%7Bdroplet_id%7D/get/parameters/0"}
                ],
            }
        },
    }
    answer = await imported(client, acme, document=document(paths), dry_run=True)
    assert answer["skipped"] == []
    assert answer["summary"] == {
        "operations": 2,
        "converted": 2,
        "stored": 0,
        "skipped": 0,
        "cpu_s": answer["summary"]["cpu_s"],
    }


async def test_one_tool_that_breaks_a_rule_does_not_refuse_the_others(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """Stripe, Bitbucket, Blockfrost, Vercel and CircleCI stored 0 tools for one such tool
    each: now it is skipped (stage `rules`) and the rest are stored together."""
    taken = {
        "tool_id": "getThing",
        "type": "external",
        "function": {"name": "getThing", "url": f"{SERVER}/old", "method": "GET"},
    }
    assert (await client.post("/tools/create", json=taken, headers=acme.headers)).status_code == 201
    paths = {
        "/things": {"get": {"operationId": "getThing"}, "post": {"operationId": "makeThing"}},
    }
    answer = await imported(client, acme, document=document(paths))
    assert [t["tool_id"] for t in answer["tools"]] == ["makeThing"]
    [skip] = answer["skipped"]
    assert skip["stage"] == "rules" and skip["tool_id"] == "getThing"
    assert "'getThing' is taken" in skip["reason"]
    assert answer["summary"] == {
        "operations": 2,
        "converted": 2,
        "stored": 1,
        "skipped": 1,
        "cpu_s": answer["summary"]["cpu_s"],
    }
    verdicts = {v["operation_id"]: v["verdict"] for v in answer["operations"]}
    assert verdicts == {"makeThing": "stored", "getThing": "skipped"}


async def test_an_allof_of_allofs_keeps_every_member_and_every_required(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """Bitbucket's `commit_comment` is an allOf of `comment`, itself an allOf of `object` (which
    requires `type`): its members were lost, and a required body was not sent."""
    schemas = {
        "object": {
            "type": "object",
            "properties": {"type": {"type": "string"}},
            "required": ["type"],
        },
        "comment": {
            "allOf": [
                {"$ref": "#/components/schemas/object"},
                {"type": "object", "properties": {"content": {"type": "object"}}},
            ]
        },
        "commit_comment": {
            "allOf": [
                {"$ref": "#/components/schemas/comment"},
                {"type": "object", "properties": {"commit": {"type": "string"}}},
            ]
        },
    }
    schema = {"$ref": "#/components/schemas/commit_comment"}
    content = {"application/json": {"schema": schema}}
    paths = {"/comments": {"post": body_operation("comment", content, required=True)}}
    answer = await imported(
        client, acme, document=document(paths, {"schemas": schemas}), dry_run=True
    )
    [tool] = answer["tools"]
    parameters = tool["function"]["parameters"]
    assert set(parameters["properties"]) == {"type", "content", "commit"}
    assert parameters["required"] == ["type"]


async def test_numbers_listed_for_a_string_are_their_text(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """Zoom's `/report/telephone` `type`: `{type: string, enum: [1, 3]}`; the model was free to
    send any string, and Prism refused it."""
    parameter = {"name": "type", "in": "query", "schema": {"type": "string", "enum": [1, 3]}}
    paths = {"/report/telephone": {"get": {"operationId": "report", "parameters": [parameter]}}}
    answer = await imported(client, acme, document=document(paths), dry_run=True)
    [tool] = answer["tools"]
    assert tool["function"]["parameters"]["properties"]["type"]["enum"] == ["1", "3"]
