"""POST /tools/{tool_id}/invoke: one tool run through the same path as a model's call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from app.main import create_app
from tests.support import functions
from tests.support import upstream as upstream_api
from tests.support.apps import (
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.documents import external_tool
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded

CANARY = "canary-Vx9-secret-0042"
TenantApp = tuple[httpx.AsyncClient, TenantCredentials]


@pytest.fixture
async def tenant_app(
    request: pytest.FixtureRequest,
) -> AsyncIterator[TenantApp]:
    """The test function dictionary, loopback allowed for the real upstream; no model needed."""
    marker = request.node.get_closest_marker("settings")
    overrides: dict[str, Any] = {
        "outbound_allow": ["127.0.0.1"],
        **(marker.kwargs if marker else {}),
    }
    functions.RECEIVED.clear()
    upstream_api.RECEIVED.clear()
    async with running_app(make_settings(None, **overrides), functions.registry) as app:
        async with http_client(app) as http:
            yield http, await create_tenant(http, "acme")


async def _invoke(
    http: httpx.AsyncClient, tenant: TenantCredentials, tool_id: str, **body: Any
) -> httpx.Response:
    return await http.post(f"/tools/{tool_id}/invoke", json=body, headers=tenant.headers)


async def runs_of(
    http: httpx.AsyncClient, tenant: TenantCredentials, count: int, query: str = ""
) -> list[dict[str, Any]]:
    """The tenant's runs once `count` are recorded (records are written off the response path)."""
    return await runs_recorded(http, tenant.headers, count, f"/runs{query}")


async def _put_secret(http: httpx.AsyncClient, tenant: TenantCredentials, name: str) -> None:
    response = await http.put(f"/secrets/{name}", json={"value": CANARY}, headers=tenant.headers)
    assert response.status_code in (200, 201), response.text


async def test_function_tool_gets_context_and_its_secret_and_is_recorded(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    await _put_secret(http, acme, "profile_token")
    profile = (await http.get("/tools/profile", headers=acme.headers)).json()
    profile["context_parameters"] = [
        {"name": "user_id"},
        {"name": "api_token", "secret": "profile_token"},
    ]
    update = {k: profile[k] for k in ("type", "function", "context_parameters", "tags", "enabled")}
    assert (await http.put("/tools/profile", json=update, headers=acme.headers)).status_code == 200

    response = await _invoke(
        http,
        acme,
        "profile",
        # The model-visible argument, plus a try at setting a context value as an argument.
        arguments={"field": "email", "user_id": "from-arguments"},
        context_arguments={"user_id": "u-42", "api_token": "from-the-caller"},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok" and body["error"] is None
    assert orjson.loads(body["content"]) == {"field": "email", "value": "Ada"}
    # The server's values won: the context value over the argument, the secret over the caller.
    assert functions.RECEIVED == [{"user_id": "u-42", "api_token": CANARY, "field": "email"}]
    runs = await runs_of(http, acme, 1)
    assert [r["run_id"] for r in runs] == [body["run_id"]]
    [run] = runs
    assert run["kind"] == "invoke" and run["stop_reason"] == "completed"
    assert run["tool_calls"][0]["tool_id"] == "profile"
    assert run["tool_calls"][0]["arguments"] == {"field": "email"}  # no context value kept
    assert CANARY not in str(runs) and "u-42" not in str(runs)
    stats = (await http.get("/tools/profile/stats", headers=acme.headers)).json()
    assert stats["calls"] == 1 and stats["errors"] == 0


async def test_external_tool_on_a_real_server_with_context_and_a_header_secret(
    tenant_app: TenantApp, upstream: ThreadedServer
) -> None:
    http, acme = tenant_app
    await _put_secret(http, acme, "weather_key")
    tool = external_tool(
        "echo",
        function={
            "name": "echo",
            "description": "Echo.",
            "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"]},
            "url": f"{upstream.url}/echo",
            "method": "GET",
            "headers": {"Authorization": "Bearer {secret:weather_key}"},
        },
    )
    created = await http.post("/tools/create", json=tool, headers=acme.headers)
    assert created.status_code == 201, created.text

    response = await _invoke(
        http, acme, "echo", arguments={"city": "Lisbon"}, context_arguments={"user_id": "user-7781"}
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok", body
    [received] = upstream_api.RECEIVED
    assert received["query"] == [("city", "Lisbon"), ("user_id", "user-7781")]
    assert received["headers"]["authorization"] == f"Bearer {CANARY}"  # type: ignore[index]
    # The upstream echoes the header back: the caller reads it redacted.
    echoed = orjson.loads(body["content"])
    assert echoed["authorization"] == "Bearer [redacted]"
    assert CANARY not in response.text and "user-7781" not in response.text


async def test_bad_arguments_missing_context_and_failures_are_error_results(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    cases = [
        ("rolldice", {"arguments": {"d": "six"}}, "invalid_arguments", "'d' must be an integer"),
        ("rolldice", {"arguments": {"faces": 6}}, "invalid_arguments", "unknown argument 'faces'"),
        ("profile", {"arguments": {}}, "missing_context", "missing context argument 'user_id'"),
        ("exploder", {"arguments": {"reason": "no"}}, "exception", "RuntimeError: kaboom: no"),
    ]
    for tool_id, body, kind, message in cases:
        response = await _invoke(http, acme, tool_id, **body)
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["status"] == "error" and result["content"] is None, result
        assert result["error"]["kind"] == kind
        assert message in result["error"]["message"]
    runs = await runs_of(http, acme, len(cases), "?status=error")
    assert len(runs) == len(cases) and all(r["kind"] == "invoke" for r in runs)


@pytest.mark.settings(tool_timeout_s=0.3)
async def test_a_slow_tool_times_out(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    response = await _invoke(http, acme, "sleeper", arguments={"seconds": 5})
    assert response.status_code == 200
    assert response.json()["error"] == {
        "kind": "timeout",
        "message": "the tool did not finish within 0.3 s",
    }


async def test_unknown_and_other_tenants_tools_are_404(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    globex = await create_tenant(http, "globex")
    tool = external_tool("globex-only")
    assert (await http.post("/tools/create", json=tool, headers=globex.headers)).status_code == 201
    for tool_id in ("no-such-tool", "globex-only", "nosuchserver__tool"):
        response = await _invoke(http, acme, tool_id, arguments={})
        assert response.status_code == 404, (tool_id, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    assert (await http.get("/runs", headers=acme.headers)).json()["items"] == []


async def test_a_disabled_tool_can_be_invoked(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    tool = (await http.get("/tools/adder", headers=acme.headers)).json()
    update = {k: tool[k] for k in ("type", "function", "context_parameters", "tags")}
    update["enabled"] = False
    assert (await http.put("/tools/adder", json=update, headers=acme.headers)).status_code == 200
    response = await _invoke(http, acme, "adder", arguments={"a": 2, "b": 3})
    assert response.json()["status"] == "ok" and response.json()["content"] == "5"


async def test_a_malformed_body_is_422(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    for body in (
        {"arguments": [1, 2]},
        {"arguments": {}, "extra": 1},
        {"context_arguments": {"a b": 1}},
    ):
        response = await http.post("/tools/adder/invoke", json=body, headers=acme.headers)
        assert response.status_code == 422, (body, response.text)


async def test_the_route_answers_alike_at_its_edges(
    tenant_app: TenantApp,
) -> None:
    """The plain invoke is served below FastAPI's routing; the requests around it (another
    method, a malformed id, no key, a body that is not JSON) get the route's usual answers."""
    http, acme = tenant_app
    for method in ("GET", "PUT", "DELETE"):
        response = await http.request(method, "/tools/adder/invoke", headers=acme.headers)
        assert response.status_code == 405, (method, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    for tool_id in ("a%0A", "x" * 65, "a.b"):
        response = await _invoke(http, acme, tool_id, arguments={})
        assert response.status_code == 422, (tool_id, response.text)
    response = await http.post("/tools/adder/invoke", json={"arguments": {}})
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    response = await http.post(
        "/tools/adder/invoke",
        content=b"{not json",
        headers={**acme.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400 and "not valid JSON" in response.json()["detail"]
    response = await _invoke(http, acme, "adder", arguments={"a": 2, "b": 3})
    assert response.headers["content-type"] == "application/json"
    assert response.json()["content"] == "5" and response.headers["x-request-id"]


def test_the_routes_are_found_by_name() -> None:
    """The hot routes stand first in the routing table under no name of their own:
    `url_path_for` finds the FastAPI routes of their paths, which stay the documented ones."""
    app = create_app(make_settings(None), registry=functions.registry)
    assert app.url_path_for("invoke_tool", tool_id="adder") == "/tools/adder/invoke"
    assert app.url_path_for("chat") == "/chat"


@pytest.mark.settings(rate_limit_chat_per_minute=2)
async def test_invocations_share_the_chat_rate_limit(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    answers = [
        (await _invoke(http, acme, "adder", arguments={"a": 1, "b": 1})).status_code
        for _ in range(3)
    ]
    assert answers == [200, 200, 429]


@pytest.mark.settings(max_concurrent_chats_per_tenant=1)
async def test_invocations_share_the_concurrent_chat_cap(
    tenant_app: TenantApp,
) -> None:
    http, acme = tenant_app
    slow = asyncio.create_task(_invoke(http, acme, "sleeper", arguments={"seconds": 0.5}))
    await asyncio.sleep(0.1)
    refused = await _invoke(http, acme, "adder", arguments={"a": 1, "b": 1})
    assert refused.status_code == 429
    assert (await slow).json()["status"] == "ok"
    after = await _invoke(http, acme, "adder", arguments={"a": 1, "b": 1})
    assert after.status_code == 200  # the slot came back
