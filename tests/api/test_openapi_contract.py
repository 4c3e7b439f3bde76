"""The OpenAPI document tells the truth: problems under the media type they are sent with, an
example on every request body that works as sent, and schema and validation agreeing on each
field of those examples (null and absent alike)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from app.fake_model import FakeModelApp
from app.main import create_app
from app.schemas import examples
from app.tools.builtin import registry as builtin_registry
from tests.support.apps import ADMIN, make_settings
from tests.support.servers import ThreadedServer

PROBLEM = "application/problem+json"
# Path parameters and first steps that make each example meaningful (as their summaries say).
# A first step is only ever an example shown earlier on the page: on a fresh tenant, each
# example works as sent, or after the one before it (never after an undocumented step).
PATH_VALUES = {"tool_id": "rolldice", "name": "helpdesk_token", "tenant_id": "contract"}
EXAMPLE_PATHS = {
    ("/tools/{tool_id}/invoke", "with_context"): {"tool_id": "weather-api"},
    ("/categories/{name}", "default"): {"name": "default"},
    ("/mcp-servers/{name}", "disable"): {"name": "docs"},
}
FIRST_STEPS: dict[tuple[str, str], tuple[str, str, Any]] = {
    ("/tools/{tool_id}/invoke", "with_context"): (
        "POST",
        "/tools/create",
        examples.TOOL_CREATE["external"]["value"],
    ),
    ("/model-providers/{name}", "anthropic"): ("PUT", "/secrets/anthropic_key", {"value": "k"}),
    ("/categories", "disable"): ("POST", "/categories", {"name": "charts"}),
    ("/mcp-servers/{name}", "disable"): (
        "POST",
        "/mcp-servers",
        examples.MCP_SERVER["http"]["value"],
    ),
}
_fresh = itertools.count(1)
OPERATOR_DECISIONS = ("/approvals/{approval_id}/decisions", "approve")
EXAMPLE_CALL_ID = examples.OPERATOR_DECISIONS["approve"]["value"]["decisions"][0]["call_id"]
# Rules that relate one field to another, which JSON Schema cannot state for names chosen by
# the client; each is in the schema's descriptions and answered with a 422 naming the field.
CROSS_FIELD_RULES = (
    "is required but not defined in properties",  # required names must be properties
    "() takes ",  # a function tool declares its function's parameters...
    " is optional but ",  # ...and makes required exactly the ones without a default
    # An imported document is free-form JSON in the schema; being OpenAPI 3.x is checked after.
    "not an OpenAPI 3.0 or 3.1 document",
    # Without a `jwks_uri`, the issuer must publish OIDC discovery (read when it is written).
    "OIDC discovery at ",
)


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    """The demo fake model (`python -m app fake-model`), on a real port."""
    model = FakeModelApp(tool="roll_dice", arguments='{"d": 6}', calls=1, latency_s=0)
    server = ThreadedServer(model).start()
    yield f"{server.url}/v1"
    server.stop()


@pytest.fixture
async def service(model_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Any]]]:
    settings = make_settings(
        openai_base_url=model_url,
        openai_api_key="sk-test",
        rate_limit_chat_per_minute=0,
        rate_limit_writes_per_minute=0,
        max_concurrent_chats_per_tenant=0,
        access_log=False,
    )
    app = create_app(settings, registry=builtin_registry)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            tenant = {"tenant_id": PATH_VALUES["tenant_id"]}  # for /tenants/{tenant_id}/...
            assert (await client.post("/tenants", json=tenant, headers=ADMIN)).status_code == 201
            yield client, app.openapi()


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def _validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Validator:
    root = {**schema, "components": spec["components"]}
    return jsonschema.Draft202012Validator(root)


async def _schema_accepts(validator: jsonschema.Validator, body: Any) -> bool:
    """Validated on a thread: the test's loop is the app's, watched for stalls."""
    return await asyncio.to_thread(lambda: not list(validator.iter_errors(body)))


async def _tenant(client: httpx.AsyncClient) -> dict[str, str]:
    created = await client.post("/tenants", json={"tenant_id": f"t{next(_fresh)}"}, headers=ADMIN)
    return {"Authorization": f"Bearer {created.json()['api_key']}"}


def _with_fresh_ids(path: str, body: Any) -> Any:
    """Creates would collide with the previous one: each gets its own id."""
    field = {
        "/tools/create": "tool_id",
        "/mcp-servers": "name",
        "/tenants": "tenant_id",
        "/categories": "name",
    }.get(path)
    if isinstance(body, dict):
        body = dict(body)
        if field and isinstance(body.get(field), str):
            body[field] = f"{body[field]}{next(_fresh)}"
    return body


async def _operator_call_waiting(
    client: httpx.AsyncClient, auth: dict[str, str], body: Any
) -> tuple[dict[str, str], Any]:
    """What an operator's decision needs: `rolldice` set to wait for an operator, a client
    token's chat stopped for its call (the demo model calls it); the stop's id for the path,
    and `body` with the example's call id replaced by the call's own."""
    tool = (await client.get("/tools/rolldice", headers=auth)).json()
    kept = ("type", "function", "context_parameters", "tags", "category", "enabled")
    document = {key: tool[key] for key in kept if key in tool} | {"approval": "operator"}
    assert (await client.put("/tools/rolldice", json=document, headers=auth)).status_code == 200
    made = await client.post("/client-tokens", json={"name": "u"}, headers=auth)
    bearer = {"Authorization": f"Bearer {made.json()['token']}"}
    hello = {"messages": [{"role": "user", "content": "Roll a die"}]}
    stopped = (await client.post("/chat", json=hello, headers=bearer)).json()
    assert stopped["stop_reason"] == "approval_required", stopped
    [item] = (await client.get("/approvals", headers=auth)).json()["items"]
    text = orjson.dumps(body).decode().replace(EXAMPLE_CALL_ID, item["calls"][0]["id"])
    return {"approval_id": item["approval_id"]}, orjson.loads(text)


async def _send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: Any,
    auth: dict[str, str],
    values: dict[str, str] | None = None,
) -> httpx.Response:
    url = path.format(**{**PATH_VALUES, **(values or {})})
    headers = ADMIN if path.startswith("/tenants") else auth
    return await client.request(method, url, json=body, headers=headers)


@pytest.mark.slow
def test_problems_are_documented_as_sent() -> None:
    spec = create_app(make_settings(), registry=builtin_registry).openapi()
    for method, path, operation in _operations(spec):
        for code, response in operation["responses"].items():
            probe = (path, code) in {("/readyz", "503"), ("/healthz", "503")}  # their own body
            if code[0] not in "45" or probe:
                continue
            if path.startswith("/v1/"):  # OpenAI's API: OpenAI's error shape, as sent
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/OpenAIError"}, (path, code)
                continue
            assert list(response.get("content", {})) == [PROBLEM], (method, path, code)
            schema = response["content"][PROBLEM]["schema"]
            assert schema == {"$ref": "#/components/schemas/Problem"}, (method, path, code)


async def test_every_request_example_works_as_sent(
    service: tuple[httpx.AsyncClient, dict[str, Any]],
) -> None:
    client, spec = service
    bodies = [
        (method, path, operation["requestBody"]["content"]["application/json"])
        for method, path, operation in _operations(spec)
        if "requestBody" in operation
    ]
    assert {path for _, path, _ in bodies} >= {"/tools/create", "/chat", "/tenants"}
    for method, path, media in bodies:
        assert media.get("examples"), f"{method} {path} has no request example"
        validator = _validator(spec, media["schema"])
        for name, example in media["examples"].items():
            body = example["value"]
            assert await _schema_accepts(validator, body), (method, path, name)
            auth = await _tenant(client)  # each example on a fresh tenant
            if step := FIRST_STEPS.get((path, name)):
                assert (await _send(client, *step, auth)).status_code < 300
            values = EXAMPLE_PATHS.get((path, name))
            if (path, name) == OPERATOR_DECISIONS:
                values, body = await _operator_call_waiting(client, auth, body)
            response = await _send(client, method, path, body, auth, values)
            assert response.status_code < 300, (method, path, name, response.text)
            if path == "/chat" and not body.get("stream"):
                answer = response.json()
                assert answer["stop_reason"] == "completed", answer
                assert answer["tool_calls"][0]["status"] == "ok", answer
            if path == "/chat" and body.get("stream"):
                assert "event: done" in response.text


def _mutations(body: Any, at: tuple[str | int, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Each field of an example set to null, and (for object members) left out."""
    if isinstance(body, dict):
        for key, value in body.items():
            where = (*at, key)
            for label, replace in (("null", True), ("absent", False)):
                mutated = copy.deepcopy(body)
                if replace:
                    mutated[key] = None
                else:
                    del mutated[key]
                yield f"{'.'.join(map(str, where))} {label}", (where, mutated)
            for label, (inner_at, inner) in _mutations(value, where):
                yield label, (inner_at, {**body, key: inner})
    elif isinstance(body, list):
        for index, value in enumerate(body):
            for label, (inner_at, inner) in _mutations(value, (*at, index)):
                yield label, (inner_at, [*body[:index], inner, *body[index + 1 :]])


@pytest.mark.slow
async def test_schema_and_validation_agree_on_every_field(
    service: tuple[httpx.AsyncClient, dict[str, Any]],
) -> None:
    """A request the schema accepts is accepted; one it refuses gets a 422 (`/v1`: a 400)."""
    client, spec = service
    disagreements = []
    for method, path, operation in _operations(spec):
        if "requestBody" not in operation:
            continue
        media = operation["requestBody"]["content"]["application/json"]
        validator = _validator(spec, media["schema"])
        for name, example in media["examples"].items():
            if (path, name) in EXAMPLE_PATHS or example["value"].get("stream"):
                continue
            auth = await _tenant(client)
            if step := FIRST_STEPS.get((path, name)):
                await _send(client, *step, auth)
            for label, (_, body) in _mutations(example["value"]):
                body = _with_fresh_ids(path, body)
                schema_valid = await _schema_accepts(validator, body)
                values = None
                if (path, name) == OPERATOR_DECISIONS:  # each decision on a stop of its own
                    auth = await _tenant(client)
                    values, body = await _operator_call_waiting(client, auth, body)
                response = await _send(client, method, path, body, auth, values)
                accepted = response.status_code < 300
                if accepted and path == "/tools/create":  # its function name is free again
                    created = response.json()["tool_id"]
                    await _send(client, "DELETE", f"/tools/{created}", None, auth)
                if not accepted and any(rule in response.text for rule in CROSS_FIELD_RULES):
                    continue
                refused = 400 if path.startswith("/v1/") else 422  # OpenAI's API says 400
                if schema_valid != accepted or (not accepted and response.status_code != refused):
                    disagreements.append(
                        f"{method} {path} [{name}] {label}: schema "
                        f"{'accepts' if schema_valid else 'refuses'}, service answered "
                        f"{response.status_code} {response.text[:200]}"
                    )
    assert disagreements == [], "\n".join(disagreements)


@pytest.mark.slow
def test_one_authorize_box_serves_every_tenant_route() -> None:
    """Swagger UI asks once per security scheme: a tenant pastes its key once, and /chat (which
    also takes a client token) is in the same box as every other tenant route."""
    spec = create_app(make_settings(), registry=builtin_registry).openapi()
    schemes = {
        path: [name for requirement in operation.get("security", []) for name in requirement]
        for _, path, operation in _operations(spec)
    }
    assert set(spec["components"]["securitySchemes"]) == {"TenantKey", "AdminKey"}
    tenant_routes = {p for p, names in schemes.items() if names and not p.startswith("/tenants")}
    assert {"/chat", "/tools/create", "/runs"} <= tenant_routes
    assert {p: schemes[p] for p in tenant_routes if schemes[p] != ["TenantKey"]} == {}
    assert "client token" in spec["components"]["securitySchemes"]["TenantKey"]["description"]
