"""Malformed input gets a clear 4xx problem response, never a 500."""

from __future__ import annotations

import httpx
import pytest

from tests.support.apps import ADMIN, TenantCredentials
from tests.support.documents import external_tool

PROBLEM = "application/problem+json"


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"{not json", 400),
        (b'{"tool_id": NaN}', 400),
        (b'{"tool_id": Infinity}', 400),
        (b'{"tool_id": -Infinity}', 400),
        (b"", 422),
        (b"[]", 422),
        (b'"a string"', 422),
        (
            b'{"tool_id": "x", "type": "function", "function": {"name": "roll_dice", '
            b'"parameters": {"properties": {"d": {"type": "integer"}}, "required": ["d"]}}, '
            b'"tags": [1e400]}',
            400,
        ),
        (b"\xff\xfe\x00garbage", 400),
    ],
)
async def test_malformed_bodies(
    client: httpx.AsyncClient, acme: TenantCredentials, raw: bytes, status: int
) -> None:
    response = await client.post(
        "/tools/create",
        content=raw,
        headers={**acme.headers, "content-type": "application/json"},
    )
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert set(body) >= {"type", "title", "status", "detail"} and body["status"] == status


async def test_big_integers_in_the_body_are_422(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    raw = external_tool()
    raw["function"]["parameters"]["properties"]["days"]["min_items"] = 10**30
    response = await client.post("/tools/create", json=raw, headers=acme.headers)
    assert response.status_code == 422


async def test_oversized_bodies_are_413(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    tool = external_tool()
    tool["function"]["description"] = "x" * 2_000_000
    response = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert response.status_code == 413
    assert response.headers["content-type"] == PROBLEM
    assert "1048576 bytes" in response.json()["detail"]


async def test_oversized_streamed_body_without_length_is_413(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b" " * 65536

    response = await client.post(
        "/tools/create",
        content=chunks(),
        headers={**acme.headers, "content-type": "application/json"},
    )
    assert response.status_code == 413


async def test_unknown_route_and_method(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    missing = await client.get("/nowhere")
    assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM
    wrong = await client.patch("/tools/rolldice", headers=acme.headers)
    assert wrong.status_code == 405
    assert "GET" in wrong.headers["allow"]


async def test_wrong_content_type_is_a_4xx(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    response = await client.post(
        "/tools/create",
        content=b"tool_id=x",
        headers={**acme.headers, "content-type": "application/x-www-form-urlencoded"},
    )
    assert 400 <= response.status_code < 500


async def test_admin_bad_input(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/tenants",
        content=b'{"tenant_id": NaN}',
        headers={**ADMIN, "content-type": "application/json"},
    )
    assert response.status_code == 400
    response = await client.delete("/tenants/" + "A" * 70, headers=ADMIN)
    assert response.status_code == 422


async def test_405_lists_every_method_of_the_path(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    response = await client.patch("/tools/rolldice", headers=acme.headers)
    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET, HEAD, PUT"
    response = await client.request("OPTIONS", "/tenants", headers=acme.headers)
    assert response.headers["allow"] == "GET, HEAD, POST"


@pytest.mark.parametrize("tool_id", ["ids", "create"])
async def test_route_names_are_reserved_tool_ids(
    client: httpx.AsyncClient, acme: TenantCredentials, tool_id: str
) -> None:
    response = await client.post("/tools/create", json=external_tool(tool_id), headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.tool_id"


@pytest.mark.slow
async def test_a_literal_path_allows_only_its_own_methods(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    response = await client.patch("/tools/ids", headers=acme.headers)
    assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD"


async def test_one_title_per_status(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    schema_422 = await client.get("/tools/?limit=0", headers=acme.headers)  # FastAPI's check
    rule_422 = await client.post(
        "/tools/create", headers=acme.headers, json=external_tool(tool_id="ids")
    )  # ours
    assert schema_422.json()["title"] == rule_422.json()["title"] == "Unprocessable Content"


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [33, 252, 600])
@pytest.mark.parametrize(
    ("path", "template"),
    [
        # message content parts (orjson, which writes model traffic, stops near 255 levels)
        ("/chat", '{"messages": [{"role": "user", "content": [{"type": "text", "x": %s}]}]}'),
        ("/tools/rolldice/invoke", '{"arguments": {"d": %s}}'),
    ],
)
async def test_deep_nesting_is_422_at_the_documented_depth(
    client: httpx.AsyncClient, acme: TenantCredentials, path: str, template: str, depth: int
) -> None:
    raw = (template % _nested(depth)).encode()
    headers = {**acme.headers, "content-type": "application/json"}
    response = await client.post(path, content=raw, headers=headers)
    assert response.status_code == 422, response.text
    assert "nested deeper than 32 levels" in response.text
    at_limit = (template % _nested(32)).encode()
    if path.endswith("/invoke"):  # accepted, and checked against the tool's schema
        answered = await client.post(path, content=at_limit, headers=headers)
        assert answered.status_code == 200 and answered.json()["status"] == "error"


@pytest.mark.parametrize(
    "moment",
    ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+23:59"],
)
@pytest.mark.parametrize("route", ["/runs", "/tools/rolldice/stats"])
@pytest.mark.parametrize("field", ["since", "until"])
async def test_dates_beyond_the_range_in_utc_are_422(
    client: httpx.AsyncClient, acme: TenantCredentials, moment: str, route: str, field: str
) -> None:
    response = await client.get(route, params={field: moment}, headers=acme.headers)
    assert response.status_code == 422, response.text
    assert "years 1 to 9999" in response.text


async def test_a_date_without_an_offset_is_utc(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    for route in ("/runs", "/tools/rolldice/stats"):
        response = await client.get(
            route, params={"since": "2026-01-01T00:00:00"}, headers=acme.headers
        )
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("query", "since"),
    [
        ({"until": "0001-01-01T00:00:00Z"}, "0001-01-01T00:00:00Z"),
        ({"until": "0001-01-01T12:30:00Z"}, "0001-01-01T00:00:00Z"),
        ({"until": "0001-01-01T23:59:59.999999Z"}, "0001-01-01T00:00:00Z"),
        ({"until": "0001-01-02T00:00:00Z"}, "0001-01-01T00:00:00Z"),
        ({"until": "9999-12-31T23:59:59.999999Z"}, "9999-12-30T23:59:59.999999Z"),
        ({"since": "9999-12-31T23:59:59.999999Z"}, "9999-12-31T23:59:59.999999Z"),
        (
            {"since": "0001-01-01T00:00:00Z", "until": "9999-12-31T23:59:59Z"},
            "0001-01-01T00:00:00Z",
        ),
    ],
)
async def test_stats_windows_at_the_ends_of_the_calendar(
    client: httpx.AsyncClient, acme: TenantCredentials, query: dict[str, str], since: str
) -> None:
    """The default window is the day before `until`; on the first day there is none."""
    response = await client.get("/tools/rolldice/stats", params=query, headers=acme.headers)
    assert response.status_code == 200, response.text
    assert response.json()["since"] == since
    assert response.json()["calls"] == 0


@pytest.mark.parametrize(
    ("raw", "content_type", "with_key"),
    [
        (b"{not json", "application/json", True),
        (b"{not json", "application/json", False),  # not JSON: 400 before the key is checked
        (b'{"a": NaN}', "application/json; charset=utf-8", True),
        (b"\xff\xfe\x00garbage", "application/json", True),
        (b"", "application/json", True),
        (b"", "application/json", False),
        (b"null", "application/json", True),
        (b"{}", "application/json", False),
        (b"{}", "text/plain", True),
        (b"{}", "", True),
    ],
)
async def test_chat_answers_bad_bodies_as_every_body_route_does(
    client: httpx.AsyncClient,
    acme: TenantCredentials,
    raw: bytes,
    content_type: str,
    with_key: bool,
) -> None:
    """`POST /chat` is answered by a route ahead of FastAPI's (app/api/hot_routes.py): a body it
    cannot read gets the answer a FastAPI body route gives, in the same order of checks."""
    headers = {**(acme.headers if with_key else {}), "content-type": content_type}
    answers = []
    for path in ("/chat", "/tools/create"):
        response = await client.post(path, content=raw, headers=headers)
        body = response.json()
        answers.append((response.status_code, body["detail"], body.get("errors")))
    if answers[0][0] == 422:  # the schemas differ; where the problem is does not
        answers = [
            (status, detail, [e["path"] for e in errors]) for status, detail, errors in answers
        ]
    assert answers[0] == answers[1]
