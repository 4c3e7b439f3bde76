"""Names that differ only by case (hardening issue, item 4): receivers read header names, and
often JSON members, without regard to case, so a visible `x-user` beside a hidden `X-User`
would let the model's value win (Go's `Header.Get` takes the first)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.tools.typed import UnreadableToolError, parse_stored_tool
from tests.support.apps import create_tenant


def tool(
    properties: dict[str, Any],
    context: list[dict[str, Any]],
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": "send",
        "parameters": {"type": "object", "properties": properties},
        "url": "https://api.example.com/send",
        "method": method,
    }
    if headers:
        function["headers"] = headers
    return {
        "tool_id": "send",
        "type": "external",
        "function": function,
        "context_parameters": context,
    }


HEADER = {"type": "string", "in": "header"}
CASES = [
    pytest.param(
        tool({"x-user": HEADER}, [{"name": "X-User", "in": "header"}]),
        "$.context_parameters[0].in",
        id="visible-and-context-header",
    ),
    pytest.param(
        tool({"X-Trace": HEADER, "x-trace": HEADER}, []),
        "$.function.parameters.properties.x-trace.in",
        id="two-visible-headers",
    ),
    pytest.param(
        tool({}, [{"name": "X-Tenant", "in": "header"}, {"name": "x-tenant", "in": "header"}]),
        "$.context_parameters[1].in",
        id="two-context-headers",
    ),
    pytest.param(
        tool({}, [], headers={"X-Api-Key": "a", "x-api-key": "b"}),
        "$.function.headers.x-api-key",
        id="two-fixed-headers",
    ),
    pytest.param(
        tool({}, [{"name": "x-api-key", "in": "header"}], headers={"X-Api-Key": "a"}),
        "$.context_parameters[0].in",
        id="fixed-and-context-header",
    ),
    pytest.param(
        tool({"User_Id": {"type": "string"}}, [{"name": "user_id"}]),
        "$.context_parameters[0].in",
        id="body-member-beside-a-hidden-one",
    ),
    pytest.param(
        tool({"User_Id": {"type": "string", "in": "body"}}, [{"name": "user_id", "in": "body"}]),
        "$.context_parameters[0].in",
        id="placed-body-member-beside-a-hidden-one",
    ),
    pytest.param(
        tool({"Content-Type": HEADER}, []),
        "$.function.parameters.properties.Content-Type.in",
        id="visible-content-type",
    ),
    pytest.param(
        tool({"content-type": HEADER}, []),
        "$.function.parameters.properties.content-type.in",
        id="visible-content-type-lower",
    ),
]


@pytest.mark.parametrize(("document", "path"), CASES)
async def test_names_differing_only_by_case_are_422_at_create(
    client: httpx.AsyncClient, document: dict[str, Any], path: str
) -> None:
    acme = await create_tenant(client, "acme")
    answer = await client.post("/tools/create", json=document, headers=acme.headers)
    assert answer.status_code == 422, answer.text
    assert path in [error["path"] for error in answer.json()["errors"]], answer.json()


@pytest.mark.parametrize(("document", "path"), CASES)
def test_a_stored_tool_breaking_the_rule_never_runs(document: dict[str, Any], path: str) -> None:
    stored = {
        **document,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    with pytest.raises(UnreadableToolError) as caught:
        parse_stored_tool(stored)
    assert any(problem.startswith(f"{path}:") for problem in caught.value.problems)


@pytest.mark.parametrize(
    "document",
    [
        # Visible members differing by case (neither hidden) are distinct JSON members.
        tool({"User_Id": {"type": "string"}, "user_id": {"type": "string"}}, []),
        # Query names are not headers; a GET sends unplaced names in the query.
        tool({"User_Id": {"type": "string"}}, [{"name": "user_id"}], method="GET"),
        # The admin may set Content-Type as a fixed header or a context value.
        tool({}, [{"name": "Content-Type", "in": "header"}], headers={"Accept": "a/b"}),
    ],
)
async def test_what_the_rule_leaves_alone(
    client: httpx.AsyncClient, document: dict[str, Any]
) -> None:
    acme = await create_tenant(client, "acme")
    answer = await client.post("/tools/create", json=document, headers=acme.headers)
    assert answer.status_code == 201, answer.text


def _import_document(parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {"/x": {"get": {"operationId": "getX", "parameters": parameters}}},
    }


@pytest.mark.parametrize(
    "parameters",
    [
        [
            {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
            {"name": "x-trace", "in": "header", "schema": {"type": "string"}},
        ],
    ],
)
async def test_names_differing_only_by_case_are_422_at_import(
    client: httpx.AsyncClient, parameters: list[dict[str, Any]]
) -> None:
    acme = await create_tenant(client, "acme")
    body = {"document": _import_document(parameters)}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 422, answer.text
    ids = await client.get("/tools/ids", headers=acme.headers)
    assert "getX" not in ids.text


async def test_a_content_type_header_parameter_is_left_out_at_import(
    client: httpx.AsyncClient,
) -> None:
    """The body decides the Content-Type: a document's header parameter of that name (CircleCI,
    DigitalOcean, Blockfrost) is the client's, left out with a note, not a refused import."""
    acme = await create_tenant(client, "acme")
    parameters = [{"name": "Content-Type", "in": "header", "schema": {"type": "string"}}]
    body = {"document": _import_document(parameters)}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200, answer.text
    [tool] = answer.json()["tools"]
    assert tool["function"]["parameters"]["properties"] == {}
    assert answer.json()["notes"][0]["note"] == (
        "'Content-Type' is a header the HTTP client sets: left out"
    )
