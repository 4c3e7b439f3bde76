"""`/categories`: CRUD per tenant, several enabled at once, deletion with its tools (dry run,
confirmation), the `default` category's rules, the hints a chat sends, and abuse."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.documents import external_tool
from tests.support.toolkit import Kit, toolkit_app

CHARTS = {"name": "charts", "description": "Charts", "usage_hints": "Use these to draw charts."}


@pytest.fixture
async def kit() -> AsyncIterator[Kit]:
    async with toolkit_app() as running:
        yield running


async def _names(kit: Kit, **query: Any) -> dict[str, Any]:
    answer = await kit.http.get("/categories", headers=kit.acme.headers, params=query)
    assert answer.status_code == 200, answer.text
    return {c["name"]: c for c in answer.json()}


async def test_default_and_declared_categories_are_seeded(kit: Kit) -> None:
    found = await _names(kit)
    assert set(found) == {"default", "reports"}  # `reports`: declared by the functions
    assert found["reports"]["enabled"] is True and found["reports"]["tools"] == 2
    assert found["default"]["tools"] == 5


async def test_create_read_replace(kit: Kit) -> None:
    created = await kit.post("/categories", CHARTS)
    assert created.status_code == 201, created.text
    assert created.json()["enabled"] is True and created.json()["tools"] == 0
    replaced = await kit.http.put(
        "/categories/charts",
        json={"description": "Plots", "enabled": False, "usage_hints": "Plot."},
        headers=kit.acme.headers,
    )
    assert replaced.status_code == 200, replaced.text
    got = (await kit.http.get("/categories/charts", headers=kit.acme.headers)).json()
    assert (got["description"], got["enabled"], got["usage_hints"]) == ("Plots", False, "Plot.")
    renamed = await kit.http.put(
        "/categories/charts", json={"name": "maps"}, headers=kit.acme.headers
    )
    assert renamed.status_code == 422 and renamed.json()["errors"][0]["path"] == "$.name"


async def test_duplicates_and_default_are_409(kit: Kit) -> None:
    assert (await kit.post("/categories", CHARTS)).status_code == 201
    again = await kit.post("/categories", CHARTS)
    assert again.status_code == 409 and "already exists" in again.json()["detail"]
    default = await kit.post("/categories", {"name": "default"})
    assert default.status_code == 409 and "always exists" in default.json()["detail"]


async def test_default_cannot_be_disabled_or_deleted(kit: Kit) -> None:
    headers = kit.acme.headers
    put = await kit.http.put("/categories/default", json={"enabled": False}, headers=headers)
    patch = await kit.http.patch(
        "/categories", json={"enabled": {"default": False}}, headers=headers
    )
    delete = await kit.http.delete("/categories/default?confirm=true", headers=headers)
    for answer in (put, patch, delete):
        assert answer.status_code == 422, answer.text
        assert "cannot be disabled or deleted" in answer.json()["detail"]
    hints = {"usage_hints": "Arithmetic first.", "description": "Everyday"}
    kept = await kit.http.put("/categories/default", json=hints, headers=headers)
    assert kept.status_code == 200 and kept.json()["usage_hints"] == "Arithmetic first."


async def test_patch_sets_several_at_once_or_none(kit: Kit) -> None:
    await kit.post("/categories", CHARTS)
    headers = kit.acme.headers
    both = {"enabled": {"charts": False, "reports": False}}
    answer = await kit.http.patch("/categories", json=both, headers=headers)
    assert answer.status_code == 200, answer.text
    assert [(c["name"], c["enabled"]) for c in answer.json()] == [
        ("charts", False),
        ("reports", False),
    ]
    mixed = {"enabled": {"charts": True, "nope": True}}
    unknown = await kit.http.patch("/categories", json=mixed, headers=headers)
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    assert (await _names(kit))["charts"]["enabled"] is False  # none of it was applied


async def test_delete_dry_run_then_409_then_confirm(kit: Kit) -> None:
    headers = kit.acme.headers
    dry = await kit.http.delete("/categories/reports?dry_run=true", headers=headers)
    assert dry.status_code == 200, dry.text
    assert dry.json() == {
        "name": "reports",
        "dry_run": True,
        "deleted_tools": ["inventory", "sales"],
    }
    refused = await kit.http.delete("/categories/reports", headers=headers)
    assert refused.status_code == 409 and "holds 2 tool(s)" in refused.json()["detail"]
    assert (await kit.http.get("/tools/sales", headers=headers)).status_code == 200
    done = await kit.http.delete("/categories/reports?confirm=true", headers=headers)
    assert done.status_code == 200 and done.json()["deleted_tools"] == ["inventory", "sales"]
    for path in ("/tools/sales", "/tools/inventory", "/categories/reports"):
        assert (await kit.http.get(path, headers=headers)).status_code == 404, path
    await kit.post("/categories", CHARTS)  # an empty category needs no confirmation
    assert (await kit.http.delete("/categories/charts", headers=headers)).status_code == 200


async def test_a_tool_names_a_category_the_tenant_has(kit: Kit) -> None:
    unknown = await kit.post("/tools/create", external_tool(category="charts"))
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["path"] == "$.category"
    await kit.post("/categories", CHARTS)
    created = await kit.post("/tools/create", external_tool(category="charts"))
    assert created.status_code == 201 and created.json()["category"] == "charts"
    plain = await kit.post("/tools/create", external_tool("plain-api"))
    assert plain.json()["category"] == "default"


async def test_a_second_tenant_never_reaches_the_first_ones_categories(kit: Kit) -> None:
    await kit.post("/categories", CHARTS)
    other = kit.globex.headers
    assert "charts" not in {
        c["name"] for c in (await kit.http.get("/categories", headers=other)).json()
    }
    assert (await kit.http.get("/categories/charts", headers=other)).status_code == 404
    put = await kit.http.put("/categories/charts", json={"enabled": False}, headers=other)
    assert put.status_code == 404
    patch = await kit.http.patch("/categories", json={"enabled": {"charts": False}}, headers=other)
    assert patch.status_code == 404
    assert (
        await kit.http.delete("/categories/charts?confirm=true", headers=other)
    ).status_code == 404
    # globex's own `reports` went, acme's stayed
    assert (
        await kit.http.delete("/categories/reports?confirm=true", headers=other)
    ).status_code == 200
    assert (await _names(kit))["charts"]["enabled"] is True
    assert (await kit.http.get("/tools/sales", headers=kit.acme.headers)).status_code == 200
    tool = await kit.post("/tools/create", external_tool(category="charts"), kit.globex)
    assert tool.status_code == 422  # acme's category is not globex's


@pytest.mark.parametrize(
    "body",
    [
        {"name": "charts", "enabled": "yes"},
        {"name": "charts", "enabled": 1},
        {"name": "charts", "usage_hints": ["a"]},
        {"name": "charts", "usage_hints": "x" * 8193},
        {"name": "a b"},
        {"name": "x" * 65},
        {"name": {"$ne": 1}},
        {"name": "charts", "extra": 1},
        [],
    ],
)
async def test_malformed_categories_are_422(kit: Kit, body: Any) -> None:
    answer = await kit.post("/categories", body)
    assert answer.status_code == 422, answer.text


@pytest.mark.parametrize(
    "body",
    [
        {"enabled": {"charts": "false"}},
        {"enabled": {"charts": None}},
        {"enabled": {}},
        {"enabled": {f"c{i}": True for i in range(257)}},
        {"enabled": {"a/b": True}},
        {"enabled": [["charts", False]]},
    ],
)
async def test_malformed_patches_are_422(kit: Kit, body: Any) -> None:
    answer = await kit.http.patch("/categories", json=body, headers=kit.acme.headers)
    assert answer.status_code == 422, answer.text


@pytest.mark.parametrize("path", ["/categories/a%20b", "/categories/" + "x" * 65])
async def test_bad_names_in_the_path_are_422(kit: Kit, path: str) -> None:
    assert (await kit.http.get(path, headers=kit.acme.headers)).status_code == 422


@pytest.fixture
async def small() -> AsyncIterator[Kit]:
    async with toolkit_app(max_categories_per_tenant=3) as running:
        yield running


async def test_the_category_cap_is_409(small: Kit) -> None:
    assert (await small.post("/categories", {"name": "one"})).status_code == 201  # 3 of 3
    capped = await small.post("/categories", {"name": "two"})
    assert capped.status_code == 409 and "MAX_CATEGORIES_PER_TENANT" in capped.json()["detail"]


async def test_hints_are_one_block_of_sections(kit: Kit) -> None:
    headers = kit.acme.headers
    empty = (await kit.http.get("/categories/hints", headers=headers)).json()
    assert empty == {"categories": [], "content": None}
    await kit.http.put(
        "/categories/reports", json={"usage_hints": "Use for numbers."}, headers=headers
    )
    await kit.http.put("/categories/default", json={"usage_hints": "Everyday."}, headers=headers)
    hints = (await kit.http.get("/categories/hints", headers=headers)).json()
    assert hints == {
        "categories": ["default", "reports"],
        "content": "## default tools\nEveryday.\n\n## reports tools\nUse for numbers.",
    }
    only = await kit.http.get("/categories/hints?tool_ids=sales", headers=headers)
    assert only.json()["categories"] == ["reports"]
    await kit.http.patch("/categories", json={"enabled": {"reports": False}}, headers=headers)
    off = (await kit.http.get("/categories/hints", headers=headers)).json()
    assert off["categories"] == ["default"]  # a disabled category's tools are not in play
    refused = await kit.http.get("/categories/hints?tool_ids=sales", headers=headers)
    assert refused.status_code == 422  # as the chat would answer
    other = (await kit.http.get("/categories/hints", headers=kit.globex.headers)).json()
    assert other == {"categories": [], "content": None}


@pytest.mark.parametrize(
    "query",
    [
        "tool_ids=" + "&tool_ids=".join(f"t{i}" for i in range(129)),
        "tags=" + "&tags=".join(f"t{i}" for i in range(33)),
        "tool_ids=a%20b",
        "tool_ids=" + "x" * 65,
        "tags=%00",
    ],
)
async def test_bad_hint_queries_are_422(kit: Kit, query: str) -> None:
    answer = await kit.http.get(f"/categories/hints?{query}", headers=kit.acme.headers)
    assert answer.status_code == 422, answer.text


BILLING_API = {
    "openapi": "3.1.0",
    "info": {"title": "Billing", "version": "1"},
    "servers": [{"url": "http://127.0.0.1:8080/billing"}],
    "paths": {
        "/invoices": {"get": {"operationId": "list_invoices", "summary": "List invoices"}},
        "/invoices/{id}": {
            "delete": {
                "operationId": "void_invoice",
                "summary": "Void an invoice",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
            }
        },
    },
}


async def test_an_import_puts_its_tools_in_one_category(kit: Kit) -> None:
    """An imported API lives in the category named at import: the category must be the
    tenant's own (another tenant's is not enough), it counts the tools, disabling it hides
    them from chats, and deleting it removes them."""
    headers = kit.acme.headers
    body = {"document": BILLING_API, "category": "billing"}
    assert (await kit.post("/categories", {"name": "billing"}, who=kit.globex)).status_code == 201
    missing = await kit.post("/tools/import", body)
    assert missing.status_code == 422, missing.text
    assert {
        "path": "$.category",
        "message": "the tenant has no category 'billing' (POST /categories)",
    } in missing.json()["errors"]
    assert (await kit.post("/categories", {"name": "billing", "usage_hints": "Bills."})).is_success
    dry = await kit.post("/tools/import", {**body, "dry_run": True})
    assert {t["category"] for t in dry.json()["tools"]} == {"billing"}
    stored = await kit.post("/tools/import", body)
    assert stored.status_code == 200, stored.text
    assert {t["tool_id"]: t["category"] for t in stored.json()["tools"]} == {
        "list_invoices": "billing",
        "void_invoice": "billing",
    }
    assert (await _names(kit))["billing"]["tools"] == 2
    assert "## billing tools" in (await kit.http.get("/categories/hints", headers=headers)).text
    await kit.http.put("/categories/billing", json={"enabled": False}, headers=headers)
    assert "## billing tools" not in (await kit.http.get("/categories/hints", headers=headers)).text
    done = await kit.http.delete("/categories/billing?confirm=true", headers=headers)
    assert done.json()["deleted_tools"] == ["list_invoices", "void_invoice"]
    assert (await kit.http.get("/tools/void_invoice", headers=headers)).status_code == 404
    plain = await kit.post("/tools/import", {"document": BILLING_API, "dry_run": True})
    assert {t["category"] for t in plain.json()["tools"]} == {"default"}
    confused = await kit.post("/tools/import", {**body, "category": ["billing"]})
    assert confused.status_code == 422 and confused.json()["errors"][0]["path"] == "$.category"
