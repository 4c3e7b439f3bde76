"""Per-tenant limits on the admin routes, each at the limit and at limit+1: write rate, tools
per tenant, tool-schema size, MCP servers per tenant, body size."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from app.schemas.tools import FunctionSpec
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.documents import external_tool
from tests.support.functions import registry as test_functions

SEEDED = len(test_functions)


async def limited_client(
    mongo_url: str | None = None, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(mongo_url, **overrides)
    async with running_app(settings, test_functions) as app, http_client(app) as client:
        yield client


@pytest.fixture
async def writes_3() -> AsyncIterator[httpx.AsyncClient]:
    async for client in limited_client(rate_limit_writes_per_minute=3):
        yield client


async def test_write_rate_limit_allows_the_limit_then_429_with_retry_after(
    writes_3: httpx.AsyncClient,
) -> None:
    client = writes_3
    acme, globex = await create_tenant(client, "acme"), await create_tenant(client, "globex")
    statuses = []
    for name in ("a", "b", "c", "d"):
        response = await client.put(f"/secrets/{name}", json={"value": "v"}, headers=acme.headers)
        statuses.append(response.status_code)
    assert statuses == [201, 201, 201, 429]
    limited = response
    assert limited.headers["content-type"] == "application/problem+json"
    # 3 a minute: a token is back in 20 s.
    assert 1 <= int(limited.headers["Retry-After"]) <= 20
    assert "3 a minute" in limited.json()["detail"]
    # Every kind of write shares the budget; reads do not count; other tenants are untouched.
    tool = await client.post("/tools/create", json=external_tool(), headers=acme.headers)
    assert tool.status_code == 429
    assert (await client.delete("/secrets/a", headers=acme.headers)).status_code == 429
    assert (await client.get("/secrets", headers=acme.headers)).status_code == 200
    other = await client.post("/tools/create", json=external_tool(), headers=globex.headers)
    assert other.status_code == 201


@pytest.fixture
async def small_caps(mongo_url: str | None) -> AsyncIterator[httpx.AsyncClient]:
    async for client in limited_client(
        mongo_url,
        max_tools_per_tenant=SEEDED + 2,
        max_mcp_servers_per_tenant=2,
        max_tool_schema_bytes=1024,
    ):
        yield client


async def test_tools_per_tenant_cap(small_caps: httpx.AsyncClient) -> None:
    client = small_caps
    acme = await create_tenant(client, "acme")

    async def create(tool_id: str) -> httpx.Response:
        return await client.post("/tools/create", json=external_tool(tool_id), headers=acme.headers)

    assert [(await create(t)).status_code for t in ("one", "two")] == [201, 201]
    refused = await create("three")
    assert refused.status_code == 409 and "MAX_TOOLS_PER_TENANT" in refused.json()["detail"]
    assert (await client.delete("/tools/one", headers=acme.headers)).status_code == 204
    assert (await create("three")).status_code == 201


async def test_tool_schema_size_cap(small_caps: httpx.AsyncClient) -> None:
    client = small_caps
    acme = await create_tenant(client, "acme")

    def sized(size: int) -> dict[str, Any]:
        tool = external_tool()
        tool["function"]["description"] = ""
        base = len(
            orjson.dumps(
                FunctionSpec.model_validate(tool["function"]).model_dump(exclude_none=True)
            )
        )
        tool["function"]["description"] = "d" * (size - base)
        return tool

    too_big = await client.post("/tools/create", json=sized(1025), headers=acme.headers)
    assert too_big.status_code == 422
    [error] = too_big.json()["errors"]
    assert error["path"] == "$.function" and "1025 bytes" in error["message"]
    at_limit = await client.post("/tools/create", json=sized(1024), headers=acme.headers)
    assert at_limit.status_code == 201, at_limit.text
    # An update is held to the same limit.
    body = sized(1025)
    del body["tool_id"]
    updated = await client.put(
        f"/tools/{at_limit.json()['tool_id']}", json=body, headers=acme.headers
    )
    assert updated.status_code == 422


@pytest.mark.slow
async def test_mcp_servers_per_tenant_cap(small_caps: httpx.AsyncClient) -> None:
    client = small_caps
    acme = await create_tenant(client, "acme")

    async def register(name: str) -> int:
        body = {"name": name, "type": "streamable-http", "url": f"https://{name}.example.com/mcp"}
        return (await client.post("/mcp-servers", json=body, headers=acme.headers)).status_code

    assert [await register("a"), await register("b"), await register("c")] == [201, 201, 409]
    assert (await client.delete("/mcp-servers/a", headers=acme.headers)).status_code == 204
    assert await register("c") == 201


@pytest.fixture
async def small_bodies() -> AsyncIterator[httpx.AsyncClient]:
    async for client in limited_client(max_body_bytes=2048):
        yield client


@pytest.mark.parametrize("chunked", [False, True])
async def test_body_size_limit_at_the_limit_and_one_byte_more(
    small_bodies: httpx.AsyncClient, chunked: bool
) -> None:
    client = small_bodies
    acme = await create_tenant(client, "acme")

    def body(size: int) -> bytes:
        data = orjson.dumps({"value": "v"})
        return data + b" " * (size - len(data))  # JSON allows trailing whitespace

    async def pieces(data: bytes) -> AsyncIterable[bytes]:
        for start in range(0, len(data), 500):
            yield data[start : start + 500]

    async def put(size: int) -> httpx.Response:
        data = body(size)
        return await client.put(
            "/secrets/k",
            content=pieces(data) if chunked else data,
            headers={**acme.headers, "content-type": "application/json"},
        )

    assert (await put(2048)).status_code in (200, 201)
    over = await put(2049)
    assert over.status_code == 413 and "2048 bytes" in over.json()["detail"]


@pytest.mark.slow
@pytest.mark.all_stores  # a real database interleaves the count and the insert
async def test_caps_hold_under_concurrent_creates(small_caps: httpx.AsyncClient) -> None:
    """Ten creates at once against a cap with room for two: two succeed, eight are 409."""
    client = small_caps
    acme = await create_tenant(client, "acme")
    tools = await asyncio.gather(
        *(
            client.post("/tools/create", json=external_tool(f"t{i}"), headers=acme.headers)
            for i in range(10)
        )
    )
    assert sorted(r.status_code for r in tools) == [201] * 2 + [409] * 8
    servers = await asyncio.gather(
        *(
            client.post(
                "/mcp-servers",
                json={"name": f"s{i}", "type": "sse", "url": f"https://s{i}.example.com/sse"},
                headers=acme.headers,
            )
            for i in range(10)
        )
    )
    assert sorted(r.status_code for r in servers) == [201] * 2 + [409] * 8
