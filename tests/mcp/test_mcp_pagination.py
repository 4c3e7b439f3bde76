"""`/mcp` `tools/list` pages (issue 49): `nextCursor` as MCP defines it, ordered by name, every
tool exactly once whatever changes between pages, a cursor only this server gives, and each
tenant's own tools only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support import functions
from tests.support.apps import (
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.catalogs import filler, store_catalog

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}
PAGE = 40


@pytest.fixture
async def mcp() -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    settings = make_settings(None, mcp_tools_page_size=PAGE)
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        yield http, app


async def list_page(
    http: httpx.AsyncClient, tenant: TenantCredentials, cursor: Any = None, *, modern: bool = False
) -> httpx.Response:
    params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
    headers = {**tenant.headers, "Accept": "application/json, text/event-stream"}
    if modern:
        params["_meta"] = META
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": params}
    return await http.post("/mcp", json=body, headers=headers)


async def every_page(
    http: httpx.AsyncClient, tenant: TenantCredentials, *, modern: bool = False
) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        response = await list_page(http, tenant, cursor, modern=modern)
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        pages.append([tool["name"] for tool in result["tools"]])
        cursor = result.get("nextCursor")
        if cursor is None:
            return pages
        assert len(pages) < 100, "the cursor never ended"


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
async def test_pages_yield_every_tool_exactly_once_in_name_order(
    mcp: tuple[httpx.AsyncClient, Any], modern: bool
) -> None:
    http, app = mcp
    acme = await create_tenant(http, "acme")
    await store_catalog(app, "acme", filler(200, "https://api.example.com/x"))
    pages = await every_page(http, acme, modern=modern)
    names = [name for page in pages for name in page]
    assert len(names) == len(set(names)) == 200 + len(functions.registry)
    assert names == sorted(names)
    assert all(len(page) == PAGE for page in pages[:-1]) and 0 < len(pages[-1]) <= PAGE


async def test_tools_added_and_removed_between_pages_never_repeat_or_skip_another(
    mcp: tuple[httpx.AsyncClient, Any],
) -> None:
    http, app = mcp
    acme = await create_tenant(http, "acme")
    docs = filler(120, "https://api.example.com/x")
    await store_catalog(app, "acme", docs)
    first = (await list_page(http, acme)).json()["result"]
    seen = [tool["name"] for tool in first["tools"]]
    # Between pages: a tool before the cursor goes, and one after it comes.
    victim = next(name for name in seen if name in {d["function"]["name"] for d in docs})
    gone = await http.delete(f"/tools/{victim.replace('_', '-')}", headers=acme.headers)
    assert gone.status_code == 204, gone.text
    late = {**docs[0]["function"], "name": "zz_late"}
    added = {**docs[0], "tool_id": "zz-late", "function": late}
    await store_catalog(app, "acme", [added])
    cursor = first["nextCursor"]
    while cursor is not None:
        result = (await list_page(http, acme, cursor)).json()["result"]
        seen += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
    assert len(seen) == len(set(seen))  # none twice
    expected = {doc["function"]["name"] for doc in docs} | {e.name for e in functions.registry}
    assert expected - {victim} <= set(seen) and "zz_late" in seen  # none skipped


@pytest.mark.parametrize(
    "cursor",
    ["not-ours", "bjpu" + "A" * 5000, 12, {"deep": [[[[1]]]]}, ""],
    ids=["foreign", "oversized", "a number", "an object", "empty"],
)
async def test_a_cursor_this_server_did_not_give_is_invalid_params(
    mcp: tuple[httpx.AsyncClient, Any], cursor: Any
) -> None:
    http, _ = mcp
    acme = await create_tenant(http, "acme")
    response = await list_page(http, acme, cursor)
    assert response.status_code in (200, 400), response.text
    error = response.json()["error"]
    assert error["code"] == -32602, error  # invalid params, never an internal error


async def test_a_cursor_never_reaches_another_tenants_tools(
    mcp: tuple[httpx.AsyncClient, Any],
) -> None:
    http, app = mcp
    acme, other = await create_tenant(http, "acme"), await create_tenant(http, "other")
    await store_catalog(app, "acme", filler(100, "https://api.example.com/x"))
    cursor = (await list_page(http, acme)).json()["result"]["nextCursor"]
    result = (await list_page(http, other, cursor)).json()["result"]
    names = {tool["name"] for tool in result["tools"]}
    assert names <= {entry.name for entry in functions.registry}  # its own seeded tools only
    assert "nextCursor" not in result
