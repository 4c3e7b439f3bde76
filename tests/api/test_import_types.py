"""POST /tools/import trusts no field of a document to have its specified type: each value of a
wrong type gives 200 with the operation skipped and the reason, or 422 naming where it is; none
gives 500 (the cases the attack found; tests/api/test_import_fuzz.py tries any value anywhere)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import yaml

from tests.support import functions
from tests.support.apps import (
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)

SERVER = "https://api.example.com"
PATH = "/things/{id}"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(None, rate_limit_writes_per_minute=0)
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        yield client


@pytest.fixture
async def acme(client: httpx.AsyncClient) -> TenantCredentials:
    return await create_tenant(client, "acme")


def document() -> dict[str, Any]:
    """One operation that imports as it is; each case breaks one field."""
    member = {"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}}
    operation = {
        "operationId": "makeThing",
        "summary": "Make a thing",
        "tags": ["things"],
        "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "requestBody": {"required": True, "content": {"application/json": {"schema": member}}},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": SERVER}],
        "paths": {PATH: {"post": operation}},
        "components": {},
    }


def _operation(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: change(doc["paths"][PATH]["post"])


def _body_schema(doc: dict[str, Any]) -> dict[str, Any]:
    body = doc["paths"][PATH]["post"]["requestBody"]
    schema: dict[str, Any] = body["content"]["application/json"]["schema"]
    return schema


def _body_schema_of(operation: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = operation["requestBody"]["content"]["application/json"]["schema"]
    return schema


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda node: node.__setitem__(key, value)


SKIPPED = [
    ("summary: 5", _operation(_set("summary", 5)), "its 'summary' is a number, not a string"),
    (
        "parameters: 5",
        _operation(_set("parameters", 5)),
        "its 'parameters' is a number, not a list",
    ),
    (
        "a parameter name that is a list",
        _operation(lambda op: op["parameters"][0].__setitem__("name", ["id"])),
        "parameter 0 has no 'name' and 'in' strings",
    ),
    (
        "in: a list",
        _operation(lambda op: op["parameters"][0].__setitem__("in", ["path"])),
        "parameter 0 has no 'name' and 'in' strings",
    ),
    (
        "content: a list",
        _operation(lambda op: op["requestBody"].__setitem__("content", ["application/json"])),
        "its request body's 'content' is a list, not an object",
    ),
    (
        "a body schema that is a string",
        _operation(
            lambda op: op["requestBody"]["content"]["application/json"].__setitem__("schema", "x")
        ),
        "the body's schema is a string, not an object",
    ),
    (
        "required: [['x']]",
        _operation(lambda op: _body_schema_of(op).__setitem__("required", [["x"]])),
        "the body has a 'required' that is a list of non-names, not a list of member names",
    ),
    (
        "required: 'x'",
        _operation(lambda op: _body_schema_of(op).__setitem__("required", "x")),
        "the body has a 'required' that is a string, not a list of member names",
    ),
]


@pytest.mark.parametrize(("label", "change", "reason"), SKIPPED, ids=[c[0] for c in SKIPPED])
async def test_a_field_of_the_wrong_type_skips_its_operation_with_the_reason(
    client: httpx.AsyncClient,
    acme: TenantCredentials,
    label: str,
    change: Callable[[dict[str, Any]], None],
    reason: str,
) -> None:
    doc = document()
    change(doc)
    body = {"document": doc, "dry_run": True}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tools"] == []
    assert answer.json()["skipped"] == [
        {
            "operation": f"POST {PATH}",
            "operation_id": "makeThing",
            "reason": reason,
            "stage": "conversion",
        }
    ]


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("servers", 5, "$.servers is a number, not a list"),
        ("components", ["schemas"], "$.components is a list, not an object"),
        ("paths", "everything", "$.paths is a string, not an object"),
    ],
)
async def test_a_document_field_of_the_wrong_type_is_422_naming_it(
    client: httpx.AsyncClient, acme: TenantCredentials, field: str, value: Any, problem: str
) -> None:
    doc = {**document(), field: value}
    answer = await client.post(
        "/tools/import", json={"document_text": yaml.safe_dump(doc)}, headers=acme.headers
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [{"path": "$.document", "message": problem}]


async def test_tags_of_the_wrong_type_match_no_tag_filter(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    doc = document()
    doc["paths"][PATH]["post"]["tags"] = 5
    body = {"document": doc, "dry_run": True, "openapi_tags": ["things"]}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tools"] == [] and answer.json()["skipped"] == []
    unfiltered = await client.post(
        "/tools/import", json={"document": doc, "dry_run": True}, headers=acme.headers
    )
    assert [t["tool_id"] for t in unfiltered.json()["tools"]] == ["makeThing"]


async def test_yaml_only_values(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    """A timestamp is its ISO text, a key `1` is the path "1" (skipped: no leading `/`), and
    binary data has no JSON form: 422 naming where it is."""

    async def send(doc: dict[Any, Any]) -> httpx.Response:
        body = {"document_text": yaml.safe_dump(doc), "dry_run": True}
        return await client.post("/tools/import", json=body, headers=acme.headers)

    dated = document()
    dated["paths"][PATH]["post"]["summary"] = datetime.date(2001, 12, 14)
    answer = await send(dated)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tools"][0]["title"] == "2001-12-14"

    numbered = document()
    numbered["paths"] = {1: numbered["paths"][PATH]}
    answer = await send(numbered)
    assert answer.status_code == 200, answer.text
    assert answer.json()["skipped"][0]["reason"] == "its path '1' does not start with '/'"

    binary = document()
    binary["paths"][PATH]["post"]["summary"] = b"\x00\xff"
    answer = await send(binary)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [
        {
            "path": "$.document_text",
            "message": '$.paths["/things/{id}"].post.summary: binary data (!!binary) has no '
            "JSON form",
        }
    ]


@pytest.mark.parametrize(
    ("enum", "kept", "note"),
    [
        (5, None, "'x' has an 'enum' of a number: any value of its type is taken"),
        ([], None, "'x' has an 'enum' of 0 values: any value of its type is taken"),
        (
            [True, False],
            None,
            "'x' has an 'enum' no value of which it can take (of its type, 256 characters at "
            "most): any value of its type is taken",
        ),
        # numbers listed for a string are their text, as on the wire (Zoom)
        (["a", 1, None], ["a", "1"], "'x' has 1 'enum' value(s) not of its type: left out"),
    ],
)
async def test_an_enum_it_cannot_keep_whole_is_noted(
    client: httpx.AsyncClient, acme: TenantCredentials, enum: Any, kept: Any, note: str
) -> None:
    """A member's `enum` of the wrong type or with values of another type imports the member
    with what it can keep, and the answer's notes say what was left out."""
    doc = document()
    doc["paths"][PATH]["post"]["requestBody"]["content"]["application/json"]["schema"][
        "properties"
    ]["x"]["enum"] = enum
    body = {"document": doc, "dry_run": True}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200, answer.text
    [tool] = answer.json()["tools"]
    assert tool["function"]["parameters"]["properties"]["x"].get("enum") == kept
    assert answer.json()["notes"] == [
        {"operation": f"POST {PATH}", "tool_id": "makeThing", "note": note}
    ]
