"""The database dies mid-run and comes back: fast 503s, then recovery without a restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import fake_model as script
from tests.support.apps import ADMIN, create_tenant, http_client, make_settings, running_app
from tests.support.documents import external_tool
from tests.support.fake_model import FakeModel
from tests.support.secantus import SecantusServer
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

pytestmark = [pytest.mark.processes, pytest.mark.slow]

# How long /healthz may take to notice the outage (a check every second, a 2 s timeout): a
# bound on waiting, not a figure checked.
FAIL_FAST_BOUND_S = 8.0
# The figure for an idle tenant's first chat during an outage (docs/replicas.md).
FIRST_CHAT_BOUND_S = 1.0


@pytest.fixture
def dying_server(tmp_path: Path) -> Iterator[SecantusServer]:
    server = SecantusServer(tmp_path / "data")
    server.start()
    yield server
    server.stop()


async def test_kill_then_restart(dying_server: SecantusServer) -> None:
    settings = make_settings(dying_server.url)
    async with running_app(settings, _builtin()) as app, http_client(app) as client:
        acme = await create_tenant(client, "acme")
        assert (
            await client.post("/tools/create", json=external_tool(), headers=acme.headers)
        ).status_code == 201

        await asyncio.to_thread(dying_server.kill)
        # Ready means "can serve" (cached keys and tools serve through an outage): the probe
        # reads the last check's outcome and never asks the database; /healthz says it is away
        # within a check and a timeout.
        assert (await client.get("/readyz")).status_code == 200
        await within(database_is("unreachable", client), FAIL_FAST_BOUND_S)
        for method, path, body in [
            ("GET", "/tools/weather-api", None),
            ("POST", "/tools/create", external_tool("during-outage")),
            ("GET", "/tools/", None),
        ]:
            # Failing fast is the driver's timeouts at MONGODB_TIMEOUT_MS, not its 30 s default
            # (tests/repositories/test_database.py): what is checked here is the answer.
            response = await client.request(method, path, json=body, headers=acme.headers)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"]
            assert response.headers["content-type"] == "application/problem+json"
        assert (await client.get("/healthz")).status_code == 200  # the process itself is fine

        await asyncio.to_thread(dying_server.start)
        await within(database_is("reachable", client), 30)

        tool = await client.get("/tools/weather-api", headers=acme.headers)
        assert tool.status_code == 200 and tool.json()["tool_id"] == "weather-api"
        # The write attempted during the outage was not half-done: it simply did not happen.
        assert (await client.get("/tools/during-outage", headers=acme.headers)).status_code == 404
        created = await client.post(
            "/tools/create", json=external_tool("after"), headers=acme.headers
        )
        assert created.status_code == 201


@pytest.mark.parametrize("grace_s", [30.0, 0.0])
async def test_chats_of_a_known_tenant_outlive_an_outage_within_the_grace(
    dying_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    grace_s: float,
) -> None:
    """Keys and tools are cached; past their TTL, while the database cannot be read, the last
    values serve for CACHE_STALE_IF_ERROR_S (before: every request past the TTL was a 503)."""
    fake.reset(repeat=script.text("hi"))
    settings = make_settings(
        dying_server.url,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        auth_cache_ttl_s=0.3,
        tool_cache_ttl_s=0.3,
        cache_stale_if_error_s=grace_s,
        mongodb_timeout_ms=500,
    )
    hello = {"messages": [{"role": "user", "content": "hi"}]}
    async with running_app(settings, _builtin()) as app, http_client(app) as client:
        acme = await create_tenant(client, "acme")
        assert (await client.post("/chat", json=hello, headers=acme.headers)).status_code == 200
        await asyncio.to_thread(dying_server.kill)
        await asyncio.sleep(0.4)  # past both TTLs
        during = await client.post("/chat", json=hello, headers=acme.headers)
        assert during.status_code == (200 if grace_s else 503), during.text
        # A key never seen before is never guessed: it needs the database.
        stranger = {"Authorization": "Bearer tg_" + "x" * 43}
        assert (await client.post("/chat", json=hello, headers=stranger)).status_code == 503
        await asyncio.to_thread(dying_server.start)  # for the clean-up


async def test_a_tenant_edited_just_before_an_outage_is_served_from_cache_like_any_other(
    dying_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> None:
    """Two replicas on one database. A tool edit marks the tools stale (stale-if-error may
    serve them); it used to drop them, and, on the other replica, the tenant's keys too: every
    chat of that tenant was a 503 for the whole outage. A rotated key is still dropped."""
    fake.reset(repeat=script.text("hi"))
    settings = make_settings(
        dying_server.url,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        auth_cache_ttl_s=0.3,
        tool_cache_ttl_s=0.3,
        cache_sync_interval_s=0.2,
        cache_stale_if_error_s=30,
        mongodb_timeout_ms=500,
    )
    hello = {"messages": [{"role": "user", "content": "hi"}]}
    async with (
        running_app(settings, _builtin()) as one,
        running_app(settings, _builtin()) as two,
        http_client(one) as first,
        http_client(two) as second,
    ):
        edited, other, rotated = [
            await create_tenant(first, name) for name in ("edited", "other", "rotated")
        ]
        tool = external_tool()
        assert (await first.post("/tools/create", json=tool, headers=edited.headers)).is_success
        # The creations' change stamps reach both replicas (sync every 0.2 s) before the caches
        # are filled: a stamp seen later would empty them again.
        await asyncio.sleep(1.0)
        for client in (first, second):  # both replicas cache every tenant's key and tools
            for tenant in (edited, other, rotated):
                assert (await client.post("/chat", json=hello, headers=tenant.headers)).is_success
        tool["function"]["description"] = "Edited."
        put = await first.put("/tools/weather-api", json=tool, headers=edited.headers)
        assert put.status_code == 200, put.text
        assert (await first.post("/tenants/rotated/keys", headers=ADMIN)).status_code == 200
        await asyncio.sleep(1.5)  # both replicas have seen both changes (sync every 0.2 s)

        await asyncio.to_thread(dying_server.kill)
        codes: dict[tuple[str, int], list[int]] = {}
        outage_ends = time.monotonic() + 4.0  # past every TTL many times over
        while time.monotonic() < outage_ends:
            for index, client in enumerate((first, second)):
                for tenant in (edited, other, rotated):
                    answer = await client.post("/chat", json=hello, headers=tenant.headers)
                    codes.setdefault((tenant.tenant_id, index), []).append(answer.status_code)
            await asyncio.sleep(0.2)
        await asyncio.to_thread(dying_server.start)  # for the clean-up
    for replica in (0, 1):
        assert set(codes["edited", replica]) == {200}, codes
        assert set(codes["other", replica]) == {200}, codes
        assert 200 not in codes["rotated", replica], codes  # the old key: never served stale


async def test_an_idle_tenants_first_chat_during_an_outage_answers_at_once(
    dying_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> None:
    """One outage, known once (the circuit): the first chat of a tenant whose keys and tools
    this replica loaded before is served from what it knew, its limit check taking this
    replica's share, without waiting on the database even once (before: each of four caches
    waited a driver timeout in turn, then the limit check, 8.6 s at the defaults). A tenant
    this replica never loaded gets a clear 503 as fast. The driver timeout here is the default
    (2 s): a single wait on it would break the bound."""
    fake.reset(repeat=script.text("hi"))
    settings = make_settings(
        dying_server.url,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        auth_cache_ttl_s=0.05,
        tool_cache_ttl_s=0.05,
        cache_sync_interval_s=0,  # one replica: its own stamps would only empty its cache
        mongodb_timeout_ms=2000,
        limits_check_timeout_s=0.5,
        rate_limit_chat_per_minute=60,
        max_concurrent_chats_per_tenant=8,
    )
    hello = {"messages": [{"role": "user", "content": "hi"}]}
    async with running_app(settings, _builtin()) as app, http_client(app) as client:
        idle, stranger = await create_tenant(client, "idle"), await create_tenant(client, "new")
        assert (await client.post("/chat", json=hello, headers=idle.headers)).status_code == 200
        await asyncio.to_thread(dying_server.kill)
        await within(database_is("unreachable", client), FAIL_FAST_BOUND_S)
        assert app.state.services.database.circuit.is_open

        started = time.perf_counter()
        first = await client.post("/chat", json=hello, headers=idle.headers)
        took = time.perf_counter() - started
        assert first.status_code == 200, first.text
        assert took < FIRST_CHAT_BOUND_S, took

        started = time.perf_counter()
        unknown = await client.post("/chat", json=hello, headers=stranger.headers)
        assert unknown.status_code == 503 and unknown.headers["retry-after"]
        assert "database" in unknown.json()["detail"]
        assert time.perf_counter() - started < FIRST_CHAT_BOUND_S
        await asyncio.to_thread(dying_server.start)  # for the clean-up


async def test_liveness_fails_while_the_drivers_topology_is_held(
    dying_server: SecantusServer,
) -> None:
    """The wedge as it happened, simulated: PyMongo's topology lock held for good (a driver
    call cancelled half-way left it so). Every call hangs, heartbeats stop, the database is
    up: /healthz turns 503 (the orchestrator restarts the process); released, 200 again."""
    settings = make_settings(dying_server.url, database_wedged_s=1.0)
    async with running_app(settings, _builtin()) as app, http_client(app) as client:
        assert (await client.get("/healthz")).status_code == 200
        topology = app.state.services.database._client._topology  # the private lock: the wedge
        await topology._lock.acquire()
        try:
            await within(lambda: alive_is(503, client), 30)
            body = (await client.get("/healthz")).json()
            assert body["database"] == "wedged" and body["status"] == "unavailable"
            assert (await client.get("/readyz")).status_code == 503
        finally:
            topology._lock.release()
        await within(lambda: alive_is(200, client), 30)


async def alive_is(status: int, client: httpx.AsyncClient) -> bool:
    return (await client.get("/healthz")).status_code == status


def database_is(state: str, client: httpx.AsyncClient) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool((await client.get("/healthz")).json()["database"] == state)

    return check


def _builtin():  # type: ignore[no-untyped-def]
    from app.tools.builtin import registry

    return registry
