"""`GET /tools/` and `GET /tools/ids` a page at a time, filtered by category (issue 49)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from tests.support.apps import TenantCredentials
from tests.support.catalogs import filler, store_catalog


async def _catalog(app: FastAPI, count: int) -> list[str]:
    docs = filler(count, "https://api.example.com/x")
    for index, doc in enumerate(docs):
        doc["category"] = "mail" if index % 3 == 0 else "default"
    await store_catalog(app, "acme", docs)
    return sorted(doc["tool_id"] for doc in docs)


async def test_ids_come_a_page_at_a_time_with_the_total_and_the_next_link(
    app: FastAPI, client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    made = await _catalog(app, 90)
    seen: list[str] = []
    totals = set()
    path = "/tools/ids?limit=25"
    while path:
        response = await client.get(path, headers=acme.headers)
        assert response.status_code == 200, response.text
        totals.add(int(response.headers["x-total-count"]))
        seen += [item["tool_id"] for item in response.json()]
        link = response.headers.get("link", "")
        path = link[1 : link.index(">")] if link else ""
    [total] = totals
    assert len(seen) == len(set(seen)) == total > 90
    assert set(made) <= set(seen) and seen == sorted(seen)


async def test_the_category_filter_keeps_one_category_in_both_listings(
    app: FastAPI, client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    await _catalog(app, 30)
    ids = await client.get("/tools/ids?category=mail", headers=acme.headers)
    assert ids.status_code == 200 and len(ids.json()) == 10
    page = (await client.get("/tools/?category=mail&limit=4", headers=acme.headers)).json()
    assert page["total"] == 10 and len(page["items"]) == 4
    assert {item["category"] for item in page["items"]} == {"mail"}
    nothing = await client.get("/tools/?category=none-such", headers=acme.headers)
    assert nothing.json()["total"] == 0


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=10001",
        "offset=-1",
        "limit=ten",
        "category=no%20spaces",
        "category=" + "a" * 300,
    ],
)
async def test_bad_listing_parameters_are_a_422(
    client: httpx.AsyncClient, acme: TenantCredentials, query: str
) -> None:
    response = await client.get(f"/tools/ids?{query}", headers=acme.headers)
    assert response.status_code == 422, response.text


async def test_another_tenant_lists_none_of_acmes_tools(
    app: FastAPI, client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    made = await _catalog(app, 20)
    theirs = await client.get("/tools/ids?limit=10000", headers=globex.headers)
    assert not set(made) & {item["tool_id"] for item in theirs.json()}
