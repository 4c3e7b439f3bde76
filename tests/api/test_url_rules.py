"""One URL rule (`url_problems`) for every place a tenant names an outbound URL: a tool write, an
MCP server write and the OpenAPI import fetch refuse the same URLs with the same words."""

from __future__ import annotations

import httpx
import pytest

from tests.support.apps import TenantCredentials
from tests.support.documents import external_tool

REFUSED = [
    "https://user:pw@api.example.com/openapi.json",  # credentials (the URL as written)
    "http://127.0.0.1/openapi.json",  # a loopback address
    "http://localhost/openapi.json",  # a local name
    "http://169.254.169.254/latest",  # the metadata address
    "http://api.example.com:6379/openapi.json",  # a blocked port
    "http://api.example.com:99999/openapi.json",  # no port at all
]


async def _url_messages(response: httpx.Response, path: str) -> list[str]:
    assert response.status_code == 422, response.text
    return [e["message"] for e in response.json()["errors"] if e["path"] == path]


@pytest.mark.parametrize("url", REFUSED)
async def test_a_url_is_refused_alike_by_tool_writes_mcp_server_writes_and_the_import(
    client: httpx.AsyncClient, acme: TenantCredentials, url: str
) -> None:
    tool = external_tool()
    tool["function"]["url"] = url
    created = await client.post("/tools/create", json=tool, headers=acme.headers)
    replaced = await client.put("/tools/weather-api", json=tool, headers=acme.headers)
    server = {"name": "docs", "type": "streamable-http", "url": url}
    registered = await client.post("/mcp-servers", json=server, headers=acme.headers)
    imported = await client.post("/tools/import", json={"url": url}, headers=acme.headers)

    at_tool_write = await _url_messages(created, "$.function.url")
    assert at_tool_write, created.json()
    assert await _url_messages(replaced, "$.function.url") == at_tool_write
    assert await _url_messages(registered, "$.url") == at_tool_write
    assert await _url_messages(imported, "$.url") == at_tool_write
    assert imported.json()["detail"] == "The document's URL is not allowed."
