"""External tools that fit real APIs: arguments in the path, query, headers and body (OpenAPI
import issue, item 1), checked by what a real local server received."""

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


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(None, outbound_allow=["127.0.0.1"])
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        yield client


def order_tool(url: str, method: str = "PATCH", **changes: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "tool_id": "update-order",
        "type": "external",
        "function": {
            "name": "update_order",
            "description": "Change an order's note",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "in": "path"},
                    "dry_run": {"type": "boolean", "in": "query"},
                    "X-Trace": {"type": "string", "in": "header"},
                    "note": {"type": "string", "in": "body"},
                },
                "required": ["order_id", "note"],
            },
            "url": url,
            "method": method,
        },
        "context_parameters": [{"name": "X-User", "in": "header"}],
    }
    tool["function"].update(changes)
    return tool


async def invoke(
    client: httpx.AsyncClient, tenant: TenantCredentials, arguments: dict[str, Any]
) -> dict[str, Any]:
    upstream_api.RECEIVED.clear()
    answer = await client.post(
        "/tools/update-order/invoke",
        json={"arguments": arguments, "context_arguments": {"X-User": "u-7"}},
        headers=tenant.headers,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "ok", answer.json()
    return upstream_api.RECEIVED[-1]


async def test_each_argument_reaches_its_place(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme = await create_tenant(client, "acme")
    tool = order_tool(f"{upstream.url}/p/orders/{{order_id}}/note")
    created = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert created.status_code == 201, created.text
    # Stored and shown with the placements; the model never sees them.
    shown = await client.get("/tools/update-order", headers=acme.headers)
    assert shown.json()["function"]["parameters"]["properties"]["order_id"]["in"] == "path"
    listed = await client.get("/tools/?format=openai", headers=acme.headers)
    assert '"in"' not in listed.text.replace(" ", "")

    seen = await invoke(
        client, acme, {"order_id": "A-42", "dry_run": True, "X-Trace": "t-1", "note": "hi"}
    )
    assert seen["method"] == "PATCH" and seen["raw_path"] == "/p/orders/A-42/note"
    assert seen["query"] == [["dry_run", "true"]]
    assert seen["headers"]["x-trace"] == "t-1" and seen["headers"]["x-user"] == "u-7"
    assert seen["json"] == {"note": "hi"}


@pytest.mark.parametrize(
    ("value", "segment"),
    [
        ("../admin", "..%2Fadmin"),
        ("a/b", "a%2Fb"),
        ("%2F", "%252F"),
        ("?x=", "%3Fx%3D"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("#top", "%23top"),
        ("é", "%C3%A9"),
    ],
)
async def test_a_path_value_stays_inside_its_segment(
    client: httpx.AsyncClient, upstream: ThreadedServer, value: str, segment: str
) -> None:
    acme = await create_tenant(client, "acme")
    tool = order_tool(f"{upstream.url}/p/orders/{{order_id}}/note")
    assert (await client.post("/tools/create", json=tool, headers=acme.headers)).status_code == 201
    seen = await invoke(client, acme, {"order_id": value, "note": "x"})
    assert seen["raw_path"] == f"/p/orders/{segment}/note"


async def test_without_placements_the_seed_rule_holds(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme = await create_tenant(client, "acme")
    tool = order_tool(f"{upstream.url}/p/plain", method="PATCH")
    properties = tool["function"]["parameters"]["properties"]
    for schema in properties.values():
        del schema["in"]
    tool["function"]["parameters"]["required"] = ["note"]
    del tool["context_parameters"][0]["in"]
    assert (await client.post("/tools/create", json=tool, headers=acme.headers)).status_code == 201
    seen = await invoke(client, acme, {"order_id": "1", "note": "n"})
    assert seen["query"] == [] and seen["json"] == {"order_id": "1", "note": "n", "X-User": "u-7"}


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"url": "https://api.example.com/orders/{id}"}, "$.function.url", "'{id}' needs"),
        (
            {"url": "https://api.example.com/orders"},
            "$.function.parameters.properties.order_id.in",
            "no '{order_id}'",
        ),
        (
            {"url": "https://{order_id}.example.com/x"},
            "$.function.url",
            "only the URL's path",
        ),
        (
            {"url": "https://api.example.com/o/{order_id}?q={order_id}"},
            "$.function.url",
            "only the URL's path",
        ),
        (
            {"headers": {"x-trace": "fixed"}},
            "$.function.parameters.properties.X-Trace.in",
            "already set",
        ),
    ],
)
async def test_placements_are_checked_at_create_time(
    client: httpx.AsyncClient, change: dict[str, Any], path: str, message: str
) -> None:
    acme = await create_tenant(client, "acme")
    tool = order_tool("https://api.example.com/orders/{order_id}")
    tool["function"].update(change)
    answer = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert answer.status_code == 422, answer.text
    assert any(e["path"] == path and message in e["message"] for e in answer.json()["errors"])


async def test_path_parameters_are_required_headers_are_not_reserved_functions_place_nothing(
    client: httpx.AsyncClient,
) -> None:
    acme = await create_tenant(client, "acme")
    optional = order_tool("https://api.example.com/orders/{order_id}")
    optional["function"]["parameters"]["required"] = ["note"]
    answer = await client.post("/tools/create", json=optional, headers=acme.headers)
    assert answer.status_code == 422 and "must be required" in answer.text
    reserved = order_tool("https://api.example.com/orders/{order_id}")
    reserved["context_parameters"] = [{"name": "Host", "in": "header"}]
    answer = await client.post("/tools/create", json=reserved, headers=acme.headers)
    assert answer.status_code == 422 and "$.context_parameters[0].in" in answer.text
    rolldice = (await client.get("/tools/rolldice", headers=acme.headers)).json()
    body = {k: rolldice[k] for k in ("type", "function", "context_parameters", "tags")}
    body["function"]["parameters"]["properties"]["d"]["in"] = "query"
    answer = await client.put("/tools/rolldice", json=body, headers=acme.headers)
    assert answer.status_code == 422 and "only external tools place arguments" in answer.text
