"""`search_tools` on `/mcp` (issue 49), for a client token (or MCP_TOOL_SEARCH) that asks for
it: the listing is the `default` category's tools and the search tool; a search finds the
caller's tools by the chats' ranking and rules; a client with a search of its own keeps the
plain listing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.catalogs import large_catalog, store_catalog

ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
async def mcp() -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str], Any]]:
    async with (
        running_app(make_settings(None), functions.registry) as app,
        http_client(app) as http,
    ):
        acme = await create_tenant(http, "acme")
        await store_catalog(app, "acme", large_catalog(120, "https://api.example.com/x"))
        yield http, acme.headers, app


async def _token(http: httpx.AsyncClient, headers: dict[str, str], **fields: Any) -> dict[str, str]:
    made = await http.post("/client-tokens", json={"name": "agent", **fields}, headers=headers)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}", **ACCEPT}


async def _rpc(http: httpx.AsyncClient, bearer: dict[str, str], method: str, **params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}
    response = await http.post("/mcp", json=body, headers=bearer)
    assert response.status_code == 200, response.text
    return response.json()["result"]


async def test_a_token_that_asks_gets_the_search_tool_and_finds_what_it_needs(
    mcp: tuple[httpx.AsyncClient, dict[str, str], Any],
) -> None:
    http, headers, _ = mcp
    bearer = await _token(http, headers, tool_search=True)
    listed = await _rpc(http, bearer, "tools/list")
    names = [tool["name"] for tool in listed["tools"]]
    assert names[0] == "search_tools" and "weather_forecast" not in names
    assert len(names) <= 65  # the default category's tools are too many: search only
    found = await _rpc(
        http, bearer, "tools/call", name="search_tools",
        arguments={"query": "weather forecast for a city"},
    )  # fmt: skip
    assert found["isError"] is False
    tools = orjson.loads(found["content"][0]["text"])["tools"]
    forecast = next(tool for tool in tools if tool["name"] == "weather_forecast")
    assert forecast["inputSchema"]["properties"]["city"]["type"] == "string"


async def test_a_search_keeps_to_the_tokens_selection(
    mcp: tuple[httpx.AsyncClient, dict[str, str], Any],
) -> None:
    http, headers, _ = mcp
    bearer = await _token(http, headers, tool_search=True, tool_ids=["weather-alerts"])
    found = await _rpc(
        http, bearer, "tools/call", name="search_tools",
        arguments={"query": "weather forecast for a city"},
    )  # fmt: skip
    names = [tool["name"] for tool in orjson.loads(found["content"][0]["text"])["tools"]]
    assert names == ["weather_alerts"]  # the only one it may use


@pytest.mark.parametrize(
    "query", ["", 7, None, "x" * 10_000], ids=["empty", "number", "none", "long"]
)
async def test_a_bad_query_is_the_tools_error_never_a_crash(
    mcp: tuple[httpx.AsyncClient, dict[str, str], Any], query: Any
) -> None:
    http, headers, _ = mcp
    bearer = await _token(http, headers, tool_search=True)
    found = await _rpc(http, bearer, "tools/call", name="search_tools", arguments={"query": query})
    if query == "x" * 10_000:
        assert found["isError"] is False  # cut to its first 500 characters
    else:
        assert found["isError"] is True and "query" in found["content"][0]["text"]


async def test_without_asking_the_listing_is_plain(
    mcp: tuple[httpx.AsyncClient, dict[str, str], Any],
) -> None:
    http, headers, _ = mcp
    plain = await _token(http, headers)
    listed = await _rpc(http, plain, "tools/list")
    names = [tool["name"] for tool in listed["tools"]]
    assert "search_tools" not in names and "weather_forecast" in names and len(names) > 120
