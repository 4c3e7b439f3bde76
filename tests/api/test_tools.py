"""The /tools routes on every backend: CRUD, rules with JSON paths, conflicts, seeding."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.support.apps import TenantCredentials
from tests.support.documents import external_tool

pytestmark = pytest.mark.all_stores

SEEDED = {"calculator", "current-time", "rolldice", "web-fetch", "web-search"}


async def test_new_tenant_has_the_seeded_function_tools(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    response = await client.get("/tools/ids", headers=acme.headers)
    assert response.status_code == 200
    assert {t["tool_id"] for t in response.json()} == SEEDED
    assert {"tool_id": "rolldice", "name": "roll_dice", "type": "function", "enabled": True} in (
        response.json()
    )


async def test_create_get_update_delete_roundtrip(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    created = await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["function"]["parameters"]["properties"]["days"]["min_items"] == 1
    assert body["context_parameters"] == [{"name": "user_id", "type": "string"}]
    assert "url" in body["function"] and "null" not in created.text

    fetched = await client.get("/tools/weather-api", headers=acme.headers)
    assert fetched.status_code == 200
    assert fetched.json() == body

    replacement = external_tool(tags=["weather", "v2"], enabled=False)
    replacement["function"]["method"] = "post"
    del replacement["tool_id"]
    updated = await client.put("/tools/weather-api", json=replacement, headers=acme.headers)
    assert updated.status_code == 200, updated.text
    assert updated.json()["tags"] == ["weather", "v2"]
    assert updated.json()["enabled"] is False
    assert updated.json()["function"]["method"] == "POST"
    assert updated.json()["created_at"] == body["created_at"]
    changed = datetime.fromisoformat(updated.json()["updated_at"])
    assert changed >= datetime.fromisoformat(body["updated_at"])  # as times: "Z" sorts after "+"

    deleted = await client.delete("/tools/weather-api", headers=acme.headers)
    assert deleted.status_code == 204
    assert (await client.get("/tools/weather-api", headers=acme.headers)).status_code == 404
    assert (await client.delete("/tools/weather-api", headers=acme.headers)).status_code == 404


async def test_list_paginates_and_filters(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    for index in range(5):
        tool = external_tool(f"ext-{index}", tags=["even"] if index % 2 == 0 else ["odd"])
        assert (
            await client.post("/tools/create", json=tool, headers=acme.headers)
        ).status_code == 201
    page = (await client.get("/tools/?limit=3&offset=2", headers=acme.headers)).json()
    assert page["total"] == 10 and page["limit"] == 3 and page["offset"] == 2
    all_ids = sorted(SEEDED | {f"ext-{i}" for i in range(5)})
    assert [t["tool_id"] for t in page["items"]] == all_ids[2:5]

    external = (await client.get("/tools/?type=external", headers=acme.headers)).json()
    assert external["total"] == 5
    even = (await client.get("/tools/?tag=even", headers=acme.headers)).json()
    assert [t["tool_id"] for t in even["items"]] == ["ext-0", "ext-2", "ext-4"]
    functions = (await client.get("/tools/?type=function", headers=acme.headers)).json()
    assert {t["tool_id"] for t in functions["items"]} == SEEDED


@pytest.mark.parametrize(
    ("query", "where"),
    [
        ("limit=0", "query.limit"),
        ("limit=501", "query.limit"),
        ("offset=-1", "query.offset"),
        ("type=lambda", "query.type"),
        ("limit=99999999999999999999999", "query.limit"),
        ("tag=%00", "query.tag"),
    ],
)
async def test_list_rejects_bad_query(
    client: httpx.AsyncClient, acme: TenantCredentials, query: str, where: str
) -> None:
    response = await client.get(f"/tools/?{query}", headers=acme.headers)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["path"] == where


async def test_duplicate_tool_id_and_function_name_conflict(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    assert (
        await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    ).status_code == 201
    again = await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    assert again.status_code == 409
    assert "tool_id 'weather-api'" in again.json()["detail"]

    same_name = external_tool("other-id")
    same_name["function"]["name"] = "weather_api"
    clash = await client.post("/tools/create", json=same_name, headers=acme.headers)
    assert clash.status_code == 409
    assert "function name 'weather_api'" in clash.json()["detail"]

    # A replace that would take another tool's function name conflicts as well.
    other = external_tool("second")
    assert (await client.post("/tools/create", json=other, headers=acme.headers)).status_code == 201
    other["function"]["name"] = "weather_api"
    del other["tool_id"]
    clash = await client.put("/tools/second", json=other, headers=acme.headers)
    assert clash.status_code == 409


async def test_concurrent_creates_of_one_id_yield_one_tool(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    responses = await asyncio.gather(
        *(
            client.post("/tools/create", json=external_tool(), headers=acme.headers)
            for _ in range(10)
        )
    )
    assert sorted(r.status_code for r in responses) == [201] + [409] * 9
    page = (await client.get("/tools/?type=external", headers=acme.headers)).json()
    assert page["total"] == 1


def _with(path: list[str | int], value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    tool = base or external_tool()
    target: Any = tool
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return tool


INVALID_TOOLS = [
    pytest.param(_with(["function", "name"], "has space"), "$.function.name", id="bad-name"),
    pytest.param(_with(["function", "name"], "x" * 65), "$.function.name", id="long-name"),
    pytest.param(
        _with(["function", "parameters", "required"], ["city", "ghost"]),
        "$.function.parameters.required[1]",
        id="required-not-defined",
    ),
    pytest.param(
        _with(["context_parameters"], [{"name": "city"}]),
        "$.context_parameters[0].name",
        id="context-shadows-property",
    ),
    pytest.param(_with(["function", "url"], "ftp://example.com/x"), "$.function.url", id="ftp-url"),
    pytest.param(_with(["function", "url"], "/relative"), "$.function.url", id="relative-url"),
    pytest.param(
        _with(["function", "url"], "https://user:pw@example.com/"),
        "$.function.url",
        id="userinfo-url",
    ),
    pytest.param(_with(["function", "method"], None), "$.function.method", id="no-method"),
    pytest.param(_with(["function", "method"], "TRACE"), "$.function.method", id="bad-method"),
    pytest.param(
        _with(["function", "parameters", "properties", "city", "type"], "tuple"),
        "$.function.parameters.properties.city.type",
        id="unknown-type",
    ),
    pytest.param(
        _with(["function", "parameters", "properties", "n"], {"type": "integer", "enum": ["a"]}),
        "$.function.parameters.properties.n.enum",
        id="enum-on-integer",
    ),
    pytest.param(
        _with(["function", "parameters", "properties", "days", "min_items"], 9),
        "$.function.parameters.properties.days.min_items",
        id="min-above-max",
    ),
    pytest.param(
        _with(["function", "parameters", "properties", "days", "max_items"], 2**70),
        "$.function.parameters.properties.days.max_items",
        id="int-beyond-64-bits",
    ),
    pytest.param(
        _with(["function", "parameters", "properties", "a\u0000b"], {"type": "string"}),
        "$.function.parameters.properties.a\u0000b.[key]",
        id="nul-in-key",
    ),
    pytest.param(_with(["function", "surprise"], 1), "$.function.surprise", id="unknown-field"),
    pytest.param(_with(["enabled"], "yes"), "$.enabled", id="wrong-type"),
    pytest.param(_with(["tool_id"], "a/b"), "$.tool_id", id="bad-tool-id"),
    pytest.param(_with(["tags"], ["ok", "not ok"]), "$.tags[1]", id="bad-tag"),
]


@pytest.mark.parametrize(("tool", "path"), INVALID_TOOLS)
async def test_invalid_tools_are_422_with_the_json_path(
    client: httpx.AsyncClient, acme: TenantCredentials, tool: dict[str, Any], path: str
) -> None:
    response = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["status"] == 422 and problem["title"] and problem["detail"]
    assert path in [error["path"] for error in problem["errors"]], problem["errors"]


async def test_function_tool_must_name_a_server_function(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    tool = {
        "tool_id": "shell",
        "type": "function",
        "function": {"name": "os_system", "parameters": {"properties": {}}},
    }
    response = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.function.name"
    assert "roll_dice" in response.json()["errors"][0]["message"]


async def test_function_tool_must_match_the_signature(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    tool = {
        "tool_id": "dice2",
        "type": "function",
        "function": {
            "name": "roll_dice",
            "parameters": {"properties": {"d": {"type": "string"}}, "required": ["d"]},
        },
    }
    # roll_dice is already seeded under its name: free the name first.
    assert (await client.delete("/tools/rolldice", headers=acme.headers)).status_code == 204
    response = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert response.status_code == 422
    assert "annotates it int" in response.json()["errors"][0]["message"]

    tool["function"]["parameters"]["properties"]["d"]["type"] = "integer"
    tool["function"]["description"] = "Roll a die for the board game."
    created = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert created.status_code == 201, created.text

    tool["function"]["url"] = "https://example.com"
    del tool["tool_id"]
    response = await client.put("/tools/dice2", json=tool, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.function.url"


async def test_update_cannot_change_tool_id_or_reach_missing_tools(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    renamed = await client.put(
        "/tools/weather-api", json=external_tool("renamed"), headers=acme.headers
    )
    assert renamed.status_code == 422
    assert renamed.json()["errors"][0]["path"] == "$.tool_id"
    same = await client.put("/tools/weather-api", json=external_tool(), headers=acme.headers)
    assert same.status_code == 200
    missing = await client.put("/tools/nope", json=external_tool("nope"), headers=acme.headers)
    assert missing.status_code == 404


async def test_malformed_tool_id_in_path_is_a_clear_4xx(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    response = await client.get("/tools/" + "x" * 65, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "path.tool_id"


@pytest.mark.parametrize("url", ["https://xn--bcher-kva.example/books", "https://bücher.example/"])
async def test_internationalized_domain_names_are_accepted(
    client: httpx.AsyncClient, acme: TenantCredentials, url: str
) -> None:
    tool = external_tool()
    tool["function"]["url"] = url
    created = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert created.status_code == 201, created.text
