"""POST /tools/import at the coverage of issue 29: nested and choice schemas kept, forms and
multipart bodies, optional parts left out with a note, stable suffixes, reserved ids, the cap
after the selection, Path Item `$ref`s, optional-first security and Swagger 2.0."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.apps import TenantCredentials


def _document(paths: dict[str, Any], components: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": paths,
        "components": components or {},
    }


async def dry(client: httpx.AsyncClient, tenant: TenantCredentials, **body: Any) -> dict[str, Any]:
    answer = await client.post(
        "/tools/import", json={**body, "dry_run": True}, headers=tenant.headers
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["problems"] == [], answer.json()["problems"]
    return dict(answer.json())


LINE = {
    "type": "object",
    "required": ["sku"],
    "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "qty": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
        "note": {"type": "string", "nullable": True},
        "odd name": {"type": "string"},
        "id": {"type": "string", "readOnly": True},
    },
}


async def test_nested_and_choice_schemas_are_kept(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    body_schema = {
        "allOf": [
            {"type": "object", "properties": {"lines": {"type": "array", "items": LINE}}},
            {
                "type": "object",
                "required": ["to"],
                "properties": {
                    "to": {
                        "oneOf": [
                            {"type": "string", "format": "email"},
                            {"type": "object", "properties": {"id": {"type": "integer"}}},
                        ]
                    }
                },
            },
        ]
    }
    paths = {
        "/orders": {
            "post": {
                "operationId": "createOrder",
                "requestBody": {"content": {"application/json": {"schema": body_schema}}},
            }
        }
    }
    answer = await dry(client, acme, document=_document(paths))
    [tool] = answer["tools"]
    parameters = tool["function"]["parameters"]
    assert parameters["required"] == ["to"]  # kept required without requestBody.required
    line = parameters["properties"]["lines"]["items"]
    assert line["properties"]["qty"] == {"type": "integer", "exclusiveMinimum": 0}
    assert line["properties"]["note"] == {"type": ["string", "null"]}
    assert set(line["properties"]) == {"sku", "qty", "note"}  # read-only and odd names out
    assert len(parameters["properties"]["to"]["oneOf"]) == 2
    notes = [n["note"] for n in answer["notes"]]
    assert any("lines[].odd name' is not a name tools accept" in n for n in notes), notes


async def test_forms_and_multipart_bodies(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    form = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    parts = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "file": {"type": "string", "format": "binary"}},
    }
    paths = {
        "/f": {
            "post": {
                "operationId": "form",
                "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": form}}},
            }
        },
        "/m": {
            "post": {
                "operationId": "parts",
                "requestBody": {"content": {"multipart/form-data": {"schema": parts}}},
            }
        },
    }
    answer = await dry(client, acme, document=_document(paths))
    tools = {t["tool_id"]: t["function"] for t in answer["tools"]}
    assert tools["form"]["body_type"] == "form"
    assert tools["form"]["parameters"]["required"] == ["name"]
    assert tools["parts"]["body_type"] == "multipart"
    assert set(tools["parts"]["parameters"]["properties"]) == {"title"}
    assert "the file 'file' is left out (optional)" in [n["note"] for n in answer["notes"]]


async def test_collisions_get_a_stable_suffix_and_reserved_ids_are_never_given(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    paths = {
        "/a": {"get": {"operationId": "import"}, "post": {"operationId": "same"}},
        "/b": {"get": {"operationId": "same"}, "post": {"operationId": "same"}},
    }
    answer = await dry(client, acme, document=_document(paths))
    assert [t["tool_id"] for t in answer["tools"]] == ["import_2", "same", "same_2", "same_3"]
    stored = await client.post(
        "/tools/import", json={"document": _document(paths)}, headers=acme.headers
    )
    assert stored.status_code == 200, stored.text


async def test_the_cap_counts_the_selection_and_path_item_refs_are_followed(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    paths: dict[str, Any] = {f"/p{i}": {"get": {"operationId": f"op{i}"}} for i in range(600)}
    paths["/shared"] = {"$ref": "#/components/pathItems/Shared"}
    components = {"pathItems": {"Shared": {"get": {"operationId": "viaRef", "tags": ["x"]}}}}
    answer = await dry(
        client, acme, document=_document(paths, components), operation_ids=["op3", "viaRef"]
    )
    assert sorted(t["tool_id"] for t in answer["tools"]) == ["op3", "viaRef"]


async def test_optional_first_security_still_sends_the_mapped_credential(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    paths = {"/x": {"get": {"operationId": "x", "security": [{}, {"key": []}]}}}
    components = {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}}}
    mapped = await dry(client, acme, document=_document(paths, components), security={"key": "k"})
    assert mapped["tools"][0]["function"]["headers"] == {"X-Key": "{secret:k}"}
    unmapped = await dry(client, acme, document=_document(paths, components))
    assert "headers" not in unmapped["tools"][0]["function"]


async def test_swagger_2_is_converted(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    swagger = {
        "swagger": "2.0",
        "info": {"title": "s", "version": "1"},
        "host": "api.example.com",
        "basePath": "/v1",
        "schemes": ["https"],
        "securityDefinitions": {"basic": {"type": "basic"}},
        "security": [{"basic": []}],
        "definitions": {
            "Pet": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}},
            }
        },
        "paths": {
            "/pets": {
                "get": {
                    "operationId": "listPets",
                    "parameters": [
                        {
                            "name": "tags",
                            "in": "query",
                            "type": "array",
                            "items": {"type": "string"},
                            "collectionFormat": "pipes",
                        }
                    ],
                },
                "post": {
                    "operationId": "addPet",
                    "parameters": [
                        {
                            "name": "body",
                            "in": "body",
                            "required": True,
                            "schema": {"$ref": "#/definitions/Pet"},
                        }
                    ],
                },
            },
            "/pets/{id}/photo": {
                "post": {
                    "operationId": "addPhoto",
                    "consumes": ["multipart/form-data"],
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "type": "integer"},
                        {"name": "caption", "in": "formData", "type": "string", "required": True},
                        {"name": "file", "in": "formData", "type": "file"},
                    ],
                }
            },
        },
    }
    answer = await dry(client, acme, document=swagger, security={"basic": "creds"})
    tools = {t["tool_id"]: t["function"] for t in answer["tools"]}
    assert tools["listPets"]["url"] == "https://api.example.com/v1/pets"
    assert tools["listPets"]["headers"] == {"Authorization": "Basic {secret:creds}"}
    assert tools["listPets"]["parameters"]["properties"]["tags"]["style"] == "pipeDelimited"
    assert tools["addPet"]["parameters"]["required"] == ["name"]
    assert tools["addPhoto"]["body_type"] == "multipart"
    assert set(tools["addPhoto"]["parameters"]["properties"]) == {"id", "caption"}
