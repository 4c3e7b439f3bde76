"""Tool parameters in JSON Schema (issue 29, part 1): a hand-written tool with a nested object
and an array of objects works in a chat, in invoke and over `/mcp`, in every provider format;
an argument that breaks a pattern or a bound is `invalid_arguments` naming its path; schemas
that leave the subset, nest too deep, grow too large or refer to themselves are 4xx."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.mcp.test_mcp_gateway import _envelope
from tests.support import fake_model as script
from tests.support import upstream as upstream_api
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.fixtures.chat import chat, model_client
from tests.support.servers import ThreadedServer

ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "minLength": 1},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    },
    "required": ["zip"],
    "additionalProperties": False,
}
ORDER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "address": {"$ref": "#/$defs/Address", "description": "Where it goes."},
        "lines": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "format": "uuid"},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                    "gift": {"type": ["boolean", "null"], "default": False},
                },
                "required": ["sku", "qty"],
            },
        },
        "speed": {"enum": [1, 2, 3]},
        "channel": {"const": "web"},
        "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
    },
    "required": ["address", "lines"],
    "$defs": {"Address": ADDRESS},
}
__all__ = ["chat", "model_client"]  # the chat fixtures, as tests/chat/conftest.py imports them
SKU = "123e4567-e89b-12d3-a456-426614174000"
GOOD = {"address": {"zip": "75001"}, "lines": [{"sku": SKU, "qty": 2}], "speed": 2}


def order_tool(url: str) -> dict[str, Any]:
    return {
        "tool_id": "place-order",
        "type": "external",
        "function": {
            "name": "place_order",
            "description": "Place an order.",
            "parameters": copy.deepcopy(ORDER_PARAMETERS),
            "url": url,
            "method": "POST",
        },
    }


async def invoke(chat: ChatClient, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = await chat.http.post(
        "/tools/place-order/invoke", json={"arguments": arguments}, headers=chat.tenant.headers
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_a_nested_tool_in_invoke_chat_and_mcp(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(order_tool(f"{upstream.url}/echo"))
    done = await invoke(chat, GOOD)
    assert done["status"] == "ok", done
    assert json.loads(done["content"])["json"] == GOOD

    fake.reset(script.tool_calls(("place_order", GOOD)), script.text("placed"))
    body = (await chat.chat(tool_ids=["place-order"])).json()
    assert body["tool_calls"][0]["status"] == "ok", body["tool_calls"]
    sent = fake.requests[0]["tools"][0]["function"]["parameters"]
    assert sent["properties"]["lines"]["items"]["properties"]["qty"]["maximum"] == 99
    assert sent["$defs"] == {"Address": ADDRESS}

    headers = {**chat.tenant.headers}
    listed_body, extra = _envelope("tools/list", {}, "2025-11-25")
    listed = await chat.http.post("/mcp", json=listed_body, headers={**headers, **extra})
    [served] = [t for t in listed.json()["result"]["tools"] if t["name"] == "place_order"]
    assert served["inputSchema"]["properties"]["address"] == {
        "$ref": "#/$defs/Address",
        "description": "Where it goes.",
    }
    call_body, extra = _envelope(
        "tools/call", {"name": "place_order", "arguments": GOOD}, "2025-11-25"
    )
    called = (await chat.http.post("/mcp", json=call_body, headers={**headers, **extra})).json()
    assert called["result"]["isError"] is False, called
    upstream_api.RECEIVED.clear()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"address": {"zip": "7500"}}, "'address.zip': \"7500\" does not match"),
        ({"lines": [{"sku": SKU, "qty": 100}]}, "'lines[0].qty': 100 is greater than"),
        ({"lines": [{"sku": SKU, "qty": 0}]}, "'lines[0].qty': 0 is less than"),
        ({"lines": [{"sku": "nope", "qty": 1}]}, "'lines[0].sku'"),
        ({"lines": []}, "'lines': [] has less than 1 item"),
        ({"lines": [{"qty": 1}]}, "'lines[0]' is missing its required member 'sku'"),
        ({"address": {"zip": "75001", "x": 1}}, "'address' has unknown member 'x'"),
        ({"speed": 4}, "'speed' must be one of 1, 2, 3"),
        ({"channel": "app"}, "'channel'"),
        ({"note": "x" * 21}, "'note'"),
        ({"lines": [{"sku": SKU, "qty": "2"}]}, "'lines[0].qty' must be an integer"),
        ({"lines": [{"sku": SKU, "qty": 1, "gift": "y"}]}, "'lines[0].gift' must be a boolean"),
    ],
)
async def test_a_broken_pattern_or_bound_is_invalid_arguments_naming_the_path(
    chat: ChatClient, upstream: ThreadedServer, change: dict[str, Any], message: str
) -> None:
    await chat.add_tool(order_tool(f"{upstream.url}/echo"))
    done = await invoke(chat, {**GOOD, **change})
    assert done["status"] == "error" and done["error"]["kind"] == "invalid_arguments", done
    assert message in done["error"]["message"], done["error"]["message"]


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
async def test_every_provider_format_takes_the_nested_tool(chat: ChatClient, provider: str) -> None:
    await chat.add_tool(order_tool("https://api.example.com/orders"))
    shown = await chat.http.get(
        f"/tools/place-order?format={provider}", headers=chat.tenant.headers
    )
    assert shown.status_code == 200, shown.text
    declaration = shown.json()
    if provider == "gemini":
        parameters = declaration["parameters"]
        assert "$ref" not in json.dumps(parameters) and "$defs" not in parameters
        address = parameters["properties"]["address"]
        assert address["type"] == "OBJECT" and address["required"] == ["zip"]
        assert address["properties"]["zip"]["pattern"] == "^[0-9]{5}$"
        line = parameters["properties"]["lines"]["items"]
        assert line["properties"]["qty"] == {"type": "INTEGER", "minimum": 1, "maximum": 99}
        assert line["properties"]["gift"]["nullable"] is True
        assert line["properties"]["sku"]["description"] == "(format: uuid)"
        assert parameters["properties"]["channel"] == {
            "type": "STRING",
            "format": "enum",
            "enum": ["web"],
        }
        assert parameters["properties"]["speed"]["description"] == "(one of: 1, 2, 3)"
        assert parameters["properties"]["note"] == {
            "type": "STRING",
            "maxLength": "20",
            "nullable": True,
        }
    else:
        schema = (
            declaration.get("input_schema")
            or declaration.get("parameters")
            or declaration["function"]["parameters"]
        )
        assert schema["$defs"] == {"Address": ADDRESS}
        assert schema["properties"]["lines"] == ORDER_PARAMETERS["properties"]["lines"]
    fetched = (await chat.http.get("/tools/place-order", headers=chat.tenant.headers)).json()
    assert fetched["incompatible_providers"] == {  # convertible, but for strict mode
        "openai-strict": ["note|0: maxLength", "$defs.Address.street: minLength"]
    }


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"a": node}}
    return node


def _wide(count: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            f"p{i}": {
                "type": "object",
                "properties": {f"q{j}": {"type": "string"} for j in range(50)},
            }
            for i in range(count)
        },
    }


def _many(count: int) -> dict[str, Any]:
    """`count` subschemas in few bytes: anyOf of anyOf of empty schemas."""
    return {"anyOf": [{"anyOf": [{} for _ in range(50)]} for _ in range(count // 50)]}


@pytest.mark.parametrize(
    ("parameter", "defs", "path", "message"),
    [
        (_deep(30), None, ".properties.a", "nest deeper than 24 levels"),
        (_wide(60), None, "$.function", "MAX_TOOL_SCHEMA_BYTES"),
        (_many(2100), None, "$.function.parameters", "more than 2000 subschemas"),
        (
            {"$ref": "#/$defs/A"},
            {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
            "$defs",
            "cycle",
        ),
        (
            {"$ref": "#/$defs/T"},
            {
                "T": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}},
                }
            },
            "$defs.T",
            "cycle",
        ),
        ({"$ref": "https://example.com/s.json"}, None, ".$ref", "#/$defs/NAME"),
        ({"$ref": "#/$defs/Missing"}, None, ".$ref", "#/$defs/NAME"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "in": "query"}}},
            None,
            ".a.in",
            "top-level",
        ),
        ({"type": "string", "patternProperties": {}}, None, ".patternProperties", "Extra inputs"),
        ({"items": {"type": "string", "not": {}}}, None, ".items.not", "not a keyword"),
        ({"type": "string", "pattern": "(unclosed"}, None, ".pattern", "regular expression"),
        ({"type": "integer", "enum": [1, "two"]}, None, ".enum", "integer"),
        ({"type": "string", "minimum": 1}, None, ".minimum", "only allowed on numbers"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, None, ".minimum", "greater than"),
        ({"type": ["string", "string"]}, None, ".type", "type is one of"),
        ({"type": "object", "properties": {"a b": {"type": "string"}}}, None, ".properties", "a b"),
        ({"anyOf": []}, None, ".anyOf", ""),
        ({"type": "object", "required": ["z"], "properties": {}}, None, ".required", "'z'"),
    ],
)
async def test_schemas_outside_the_subset_are_422_with_the_path(
    chat: ChatClient,
    parameter: dict[str, Any],
    defs: dict[str, Any] | None,
    path: str,
    message: str,
) -> None:
    tool = order_tool("https://api.example.com/orders")
    parameters: dict[str, Any] = {"type": "object", "properties": {"x": parameter}}
    if defs is not None:
        parameters["$defs"] = defs
    tool["function"]["parameters"] = parameters
    answer = await chat.http.post("/tools/create", json=tool, headers=chat.tenant.headers)
    assert answer.status_code == 422, answer.text
    errors = answer.json()["errors"]
    assert any(path in e["path"] and message in e["message"] for e in errors), errors


async def test_a_schema_nested_past_the_json_gate_is_4xx(chat: ChatClient) -> None:
    tool = order_tool("https://api.example.com/orders")
    tool["function"]["parameters"] = {"type": "object", "properties": {"x": _deep(400)}}
    body = json.dumps(tool)
    answer = await chat.http.post(
        "/tools/create",
        content=body,
        headers={**chat.tenant.headers, "content-type": "application/json"},
    )
    assert 400 <= answer.status_code < 500, answer.text


async def test_context_parameters_stay_scalars_or_arrays(chat: ChatClient) -> None:
    tool = order_tool("https://api.example.com/orders")
    tool["context_parameters"] = [{"name": "user", "type": "object"}]
    answer = await chat.http.post("/tools/create", json=tool, headers=chat.tenant.headers)
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["path"].startswith("$.context_parameters[0].type")
