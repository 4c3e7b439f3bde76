"""POST /tools/import does work bounded by the document's size, off the event loop, under
deadlines; no value of any type anywhere in a document makes it answer 500 (the property test
is tests/api/test_import_fuzz.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml

from app.tools.openapi_text import MAX_FLOW_NESTING
from tests.support import functions
from tests.support.apps import (
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.large_openapi import HUGE_COPIES, SOURCE, large_yaml
from tests.support.loop_watchdog import BOUND_S, LagProbe
from tests.support.secantus import SecantusServer
from tests.support.servers import ThreadedServer

PING_EVERY_S = 0.01  # the pace of the pings beside an import

SERVER = "https://api.example.com"


async def _client(**overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(
        None, outbound_allow=["127.0.0.1"], rate_limit_writes_per_minute=0, **overrides
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        yield client


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client():
        yield client


@pytest.fixture
async def acme(client: httpx.AsyncClient) -> TenantCredentials:
    return await create_tenant(client, "acme")


def fan_out(levels: int) -> dict[str, Any]:
    """Each schema refers to the next level twice: 2^levels paths to the bottom, no cycle."""
    schemas: dict[str, Any] = {f"L{levels}": {"type": "string"}}
    for level in range(levels):
        nxt = {"$ref": f"#/components/schemas/L{level + 1}"}
        schemas[f"L{level}"] = {"type": "object", "properties": {"a": nxt, "b": nxt}}
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}}}
    operations = {
        f"/things{i}": {"post": {"operationId": f"make{i}", "requestBody": body}} for i in range(4)
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "fan-out", "version": "1"},
        "servers": [{"url": SERVER}],
        "paths": operations,
        "components": {"schemas": schemas},
    }


async def _import_while_pinging(
    client: httpx.AsyncClient, tenant: TenantCredentials, body: dict[str, Any]
) -> tuple[httpx.Response, float]:
    """The import's answer and the worst loop lag while it ran, /ping answering throughout."""
    done = asyncio.Event()

    async def run_import() -> httpx.Response:
        try:
            return await client.post("/tools/import", json=body, headers=tenant.headers)
        finally:
            done.set()

    async with LagProbe() as probe:
        answer, pings = await asyncio.gather(run_import(), _ping_until(client, done))
    assert pings >= 1
    return answer, probe.worst


async def _ping_until(client: httpx.AsyncClient, done: asyncio.Event) -> int:
    """`/ping`, every 10 ms or so, answering 200 each time, until `done`: how many answered.
    Paced by waiting on `done` (it ends the moment the work does), not by sleeping."""
    count = 0
    while not done.is_set():
        assert (await client.get("/ping")).status_code == 200
        count += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), PING_EVERY_S)
    return count


async def test_a_ref_fan_out_costs_its_size_not_its_paths(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    document = fan_out(18)
    assert len(json.dumps(document)) < 5000  # 5 KB that expanded in place means 2^18 copies
    body = {"document": document, "dry_run": True}
    answer, lag = await _import_while_pinging(client, acme, body)
    assert answer.status_code == 200, answer.text
    # Each target converted once and shared; the tool's size counted without copying: its
    # schemas are cut shallower until they fit, with a note.
    assert answer.json()["skipped"] == []
    notes = {n["note"] for n in answer.json()["notes"]}
    cut = "to fit what a tool holds, cut: descriptions, examples, optional members' detail"
    assert cut in notes
    assert len(json.dumps(answer.json())) < 100_000
    assert lag < BOUND_S


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 50_000 + "]" * 50_000, f"its brackets nest deeper than {MAX_FLOW_NESTING} levels"),
        ("{a: " * 30_000 + "}" * 30_000, f"its brackets nest deeper than {MAX_FLOW_NESTING}"),
        ("- " * 50_000 + "x\n", "exceeded maximum nesting depth"),  # libyaml's own bound
    ],
    ids=["brackets", "braces", "block-sequences"],
)
async def test_pathological_nesting_is_refused_without_holding_the_loop(
    client: httpx.AsyncClient, acme: TenantCredentials, text: str, expected: str
) -> None:
    answer, lag = await _import_while_pinging(client, acme, {"document_text": text})
    assert answer.status_code == 422, answer.text
    assert expected in answer.text
    assert answer.json()["errors"][0]["path"] == "$.document_text"
    assert lag < BOUND_S


async def test_a_document_that_outspends_the_cpu_budget_is_422_naming_it() -> None:
    """The budget is the worker's CPU (`IMPORT_CPU_S`), not the wall clock: a busy host does
    not refuse a document that needs little CPU, and one that needs more is refused however
    idle the host is."""
    # 400 operations, each with a 60-member body: far more than 1 ms of conversion however the
    # loop is scheduled (the small Petstore could finish before the loop saw the deadline pass).
    members = {f"field{n}": {"type": "string", "description": "x" * 40} for n in range(60)}
    body_schema = {"type": "object", "properties": members}
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Body"}}}
    paths = {
        f"/items{n}": {
            "post": {
                "operationId": f"post{n}",
                "requestBody": {"content": content},
                "responses": {"200": {"description": "ok"}},
            }
        }
        for n in range(400)
    }
    document = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": paths,
        "components": {"schemas": {"Body": body_schema}},
    }
    async for client in _client(import_cpu_s=0.001):
        acme = await create_tenant(client, "acme")
        body = {"document_text": json.dumps(document), "server_url": SERVER, "dry_run": True}
        answer = await client.post("/tools/import", json=body, headers=acme.headers)
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"] == [
            {
                "path": "$.document",
                "message": "reading and converting it took more than 0.001 s of CPU (IMPORT_CPU_S)",
            }
        ]


async def test_the_fetch_has_a_total_deadline(upstream: ThreadedServer) -> None:
    async for client in _client(import_fetch_deadline_s=0.5):
        acme = await create_tenant(client, "acme")
        slowly = f"{upstream.url}/drip?every=0.1&count=100"  # 10 s, each byte within 0.1 s
        answer = await client.post("/tools/import", json={"url": slowly}, headers=acme.headers)
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"] == [
            {"path": "$.url", "message": "it did not arrive within 0.5 s (IMPORT_FETCH_DEADLINE_S)"}
        ]


async def test_a_path_without_a_leading_slash_cannot_change_the_host(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    document = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": SERVER}],
        "paths": {
            ".evil.example/x": {"get": {"operationId": "steal"}},
            "/fine": {"get": {"operationId": "fine"}},
        },
    }
    body = {"document": document, "dry_run": True}
    answer = await client.post("/tools/import", json=body, headers=acme.headers)
    assert answer.status_code == 200, answer.text
    assert [t["function"]["url"] for t in answer.json()["tools"]] == [f"{SERVER}/fine"]
    [skipped] = answer.json()["skipped"]
    assert skipped["operation"] == "GET .evil.example/x"
    assert skipped["reason"] == "its path '.evil.example/x' does not start with '/'"


@pytest.mark.slow  # 2 s or more in the inner loop
async def test_a_3_mb_yaml_import_never_stalls_another_request(
    client: httpx.AsyncClient, acme: TenantCredentials, upstream: ThreadedServer
) -> None:
    """Fetched by `url` (a request body holds 1 MB: MAX_BODY_BYTES), read and converted."""
    text = await asyncio.to_thread(large_yaml)  # built once, before the app is watched
    assert 3_000_000 < len(text.encode()) < 4_000_000
    body = {**_large_import(upstream), "dry_run": True}
    answer, lag = await _import_while_pinging(client, acme, body)
    assert answer.status_code == 200, answer.text[:2000]
    assert len(answer.json()["tools"]) == 7 * 54, answer.json()["skipped"][:3]
    assert lag < BOUND_S


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "secantus"])
async def test_storing_a_3_mb_import_never_stalls_another_request(
    store: str, request: pytest.FixtureRequest, upstream: ThreadedServer
) -> None:
    """The 364 tools stored, then read back: in a real database, and in the zero-setup
    in-memory store (which answers without yielding and checks unique keys by scanning: before
    the loop turned between inserts, 0.86 s on the loop)."""
    await asyncio.to_thread(large_yaml)
    overrides: dict[str, Any] = {}
    if store == "secantus":
        server: SecantusServer = request.getfixturevalue("secantus_server")
        overrides["mongodb_url"] = server.url
    async for client in _client(**overrides):
        acme = await create_tenant(client, "acme")
        answer, lag = await _import_while_pinging(client, acme, _large_import(upstream))
        assert answer.status_code == 200, answer.text[:2000]
        assert len(answer.json()["tools"]) == 7 * 54
        assert lag < BOUND_S
        async with LagProbe() as probe:  # the catalog the import changed, read back
            listed = await client.get("/tools?limit=500", headers=acme.headers)
            assert listed.status_code == 200, listed.text[:500]
        assert probe.worst < BOUND_S


@pytest.fixture
def huge_yaml() -> str:
    """Built before the test's call (seconds of the test process's GIL: not the app's stall;
    cached for the process)."""
    return large_yaml(HUGE_COPIES)


@pytest.mark.slow
async def test_two_15_mb_yaml_imports_at_once_never_stall_another_request(
    client: httpx.AsyncClient, acme: TenantCredentials, upstream: ThreadedServer, huge_yaml: str
) -> None:
    """Issue 43 H1: libyaml holds the GIL for a whole parse, so from a thread of the serving
    process 15 MB stalled every other request 0.9-4.1 s. In the import's worker processes, two
    at once leave `/ping` answering throughout, and the loop watchdog (which judges every test
    of the suite: tests/support/loop_watchdog.py) sees no stall over its bound; the probe below
    says the same where the machine is not starved of CPU (it does not subtract CPU waits)."""
    assert 14_000_000 < len(huge_yaml.encode()) < 16 * 1024 * 1024
    source = await asyncio.to_thread(yaml.load, SOURCE.read_text(), yaml.CSafeLoader)
    first_copy = [
        f"{operation['operationId']}V1"
        for item in source["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    ]
    body = {
        "url": f"{upstream.url}/openapi/huge.yaml",
        "server_url": SERVER,
        "security": {"bearer": "readme_token"},
        "operation_ids": first_copy,  # 1,728 operations: past the 500 an import selects
        "dry_run": True,
    }
    done = asyncio.Event()

    async def run_import() -> httpx.Response:
        return await client.post("/tools/import", json=body, headers=acme.headers)

    pinging = asyncio.create_task(_ping_until(client, done))
    try:
        answers = await asyncio.gather(run_import(), run_import())
    finally:
        done.set()
        pings = await pinging
    for answer in answers:
        assert answer.status_code == 200, answer.text[:2000]
        assert answer.json()["summary"]["converted"] == len(first_copy)
        assert answer.json()["summary"]["cpu_s"] > 1  # the parse ran, in the worker
    assert pings > 10


def _large_import(upstream: ThreadedServer) -> dict[str, Any]:
    return {
        "url": f"{upstream.url}/openapi/large.yaml",
        "server_url": SERVER,
        "security": {"bearer": "readme_token"},
    }
