"""POST /tools/import with schemas that contain themselves (trees, linked lists, mutual
recursion) and Path Item `$ref`s that cannot be followed: recursion unfolded to a stated depth,
every cut and every skip with a precise reason."""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.tools.openapi_schema import RECURSION_DEPTH
from tests.api.test_import_coverage import _document, dry
from tests.support.apps import TenantCredentials

NODE = "#/components/schemas/Node"


def _body(schema: dict[str, Any], operation_id: str = "putNode") -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "requestBody": {"content": {"application/json": {"schema": schema}}},
        }
    }


def _depth(schema: dict[str, Any], member: str) -> int:
    """How many times `member` nests inside itself in a converted schema."""
    levels = 0
    while member in (schema.get("properties") or {}):
        schema = schema["properties"][member]
        levels += 1
    return levels


async def test_a_tree_is_unfolded_to_the_stated_depth_and_the_cut_is_noted(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    node = {
        "type": "object",
        "required": ["name", "children"],
        "properties": {
            "name": {"type": "string"},
            "parent": {"$ref": NODE},
            "children": {"type": "array", "items": {"$ref": NODE}},
        },
    }
    document = _document({"/nodes": _body({"$ref": NODE})}, {"schemas": {"Node": node}})
    answer = await dry(client, acme, document=document)
    assert answer["skipped"] == []
    parameters = answer["tools"][0]["function"]["parameters"]
    assert parameters["required"] == ["name", "children"]
    assert _depth(parameters, "parent") == RECURSION_DEPTH - 1
    innermost = parameters["properties"]["children"]["items"]
    assert innermost["properties"]["children"]["maxItems"] == 0  # the tree ends there
    notes = " ".join(n["note"] for n in answer["notes"])
    assert f"'parent.parent' contains its own schema ({NODE}) more than {RECURSION_DEPTH}" in notes
    assert "an empty list there" in notes
    stored = await client.post("/tools/import", json={"document": document}, headers=acme.headers)
    assert stored.status_code == 200, stored.text
    call = await client.post(
        "/tools/putNode/invoke",
        json={"arguments": {"name": "a", "children": [{"name": "b", "children": [1]}]}},
        headers=acme.headers,
    )
    assert "invalid_arguments" in call.text and "children" in call.text, call.text


async def test_a_member_required_at_every_level_skips_with_the_reason(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    node = {"type": "object", "required": ["next"], "properties": {"next": {"$ref": NODE}}}
    paths = {"/nodes": _body({"$ref": NODE}), "/ok": {"get": {"operationId": "ok"}}}
    answer = await dry(client, acme, document=_document(paths, {"schemas": {"Node": node}}))
    assert [t["tool_id"] for t in answer["tools"]] == ["ok"]
    [skip] = answer["skipped"]
    assert skip["reason"] == (
        f"'next.next' contains its own schema ({NODE}) more than {RECURSION_DEPTH} levels deep,"
        " required at every level: no finite value fits"
    )


async def test_mutual_recursion_among_many_schemas_stays_small(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """40 schemas each holding all 40 (an unfolding without sharing would be 40^depth)."""
    names = [f"S{i}" for i in range(40)]
    schemas = {
        name: {
            "type": "object",
            "properties": {o.lower(): {"$ref": f"#/components/schemas/{o}"} for o in names},
        }
        for name in names
    }
    paths = {"/s": _body({"$ref": "#/components/schemas/S0"}, "putS")}
    answer = await client.post(
        "/tools/import",
        json={"document": _document(paths, {"schemas": schemas}), "dry_run": True},
        headers=acme.headers,
    )
    assert answer.status_code in (200, 422), answer.text
    assert len(answer.content) < 2_000_000
    found = answer.json()
    made = found.get("tools") or []
    reasons = [s["reason"] for s in found.get("skipped") or []]
    assert made or reasons, found
    if made:
        assert len(json.dumps(made[0]["function"]["parameters"])) <= 30_000


async def test_a_path_item_ref_that_cannot_be_followed_is_a_skip_with_the_reason(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    paths = {
        "/outside": {"$ref": "other.yaml#/paths/~1x"},
        "/nothing": {"$ref": "#/components/pathItems/Missing"},
        "/scalar": {"$ref": "#/components/pathItems/Text"},
        "/fine": {"$ref": "#/components/pathItems/Fine"},
    }
    components = {"pathItems": {"Text": "hello", "Fine": {"get": {"operationId": "fine"}}}}
    answer = await dry(client, acme, document=_document(paths, components))
    assert [t["tool_id"] for t in answer["tools"]] == ["fine"]
    reasons = {s["operation"]: s["reason"] for s in answer["skipped"]}
    prefix = "its Path Item $ref cannot be followed: "
    assert reasons == {
        "* /outside": prefix + "$ref 'other.yaml#/paths/~1x' points outside the document"
        " (not supported)",
        "* /nothing": prefix + "$ref '#/components/pathItems/Missing' points at nothing",
        "* /scalar": prefix + "its Path Item $ref points at a string, not a Path Item",
    }


async def test_body_shapes_a_tool_cannot_take_are_named_and_narrowing_parts_merged(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    thing = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "n": {"type": "integer"}},
    }
    paths = {
        "/narrowed": _body(
            {"allOf": [{"$ref": "#/components/schemas/Thing"}, {"required": ["title"]}]}, "narrowed"
        ),
        "/list": _body({"type": "array", "items": thing}, "list"),
        "/choice": _body({"anyOf": [thing, {"type": "string"}, {"type": "integer"}]}, "choice"),
        "/mixed": _body({"allOf": [thing, {"type": "string"}]}, "mixed"),
        "/nullable": _body({"type": ["string", "null"]}, "nullable"),
    }
    answer = await dry(client, acme, document=_document(paths, {"schemas": {"Thing": thing}}))
    tools = {t["tool_id"]: t["function"] for t in answer["tools"]}
    assert tools["narrowed"]["parameters"]["required"] == ["title"]
    # A body that is not one object of named members is one parameter, `body`, sent whole.
    for name in ("list", "choice", "nullable"):
        assert tools[name]["body_parameter"] == "body"
        assert list(tools[name]["parameters"]["properties"]) == ["body"]
    assert tools["list"]["parameters"]["properties"]["body"]["type"] == "array"
    assert len(tools["choice"]["parameters"]["properties"]["body"]["anyOf"]) == 3
    assert {s["operation_id"]: s["reason"] for s in answer["skipped"]} == {
        "mixed": "the body is an allOf whose part 1 is a string, not an object",
    }


async def test_a_body_choice_of_one_schema_is_that_schema(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    """GitHub's description has nine (`oneOf: [{contexts: [...]}]`)."""
    only = {
        "type": "object",
        "required": ["contexts"],
        "properties": {"contexts": {"type": "array", "items": {"type": "string"}}},
    }
    paths = {"/one": _body({"oneOf": [only]}, "one"), "/any": _body({"anyOf": [only]}, "any")}
    answer = await dry(client, acme, document=_document(paths))
    assert answer["skipped"] == []
    for tool in answer["tools"]:
        parameters = tool["function"]["parameters"]
        assert parameters["required"] == ["contexts"]
        assert parameters["properties"]["contexts"]["items"] == {"type": "string"}
