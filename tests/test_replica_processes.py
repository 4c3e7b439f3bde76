"""Three service processes (`python -m app`) on one real MongoDB-wire server (SecantusDB), with
requests spread round-robin: the limits hold across them, changes reach all of them within the
sync interval, and a killed process's chat slots come back within the lease."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support import fake_model as script
from tests.support.apps import ADMIN, ADMIN_KEY, KEY_SECRET
from tests.support.documents import external_tool
from tests.support.fake_model import FakeModel
from tests.support.replicas import Replica, start_replica, stop_replicas, wait_ready
from tests.support.secantus import SecantusServer, free_port
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

pytestmark = [pytest.mark.processes, pytest.mark.slow]

REPLICAS = 3
CHATS_PER_MINUTE = 10
CONCURRENT_CHATS = 2
LEASE_S = 3.0
SYNC_S = 0.5
TOOLS_ABOVE_SEEDED = 4  # the tool cap is the seeded tools plus this
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Cluster:
    replicas: list[Replica]
    http: httpx.AsyncClient
    max_tools: int

    def url(self, index: int, path: str) -> str:
        return self.replicas[index % len(self.replicas)].url + path

    async def status(self, index: int, path: str, headers: dict[str, str]) -> int:
        return (await self.http.get(self.url(index, path), headers=headers)).status_code

    async def new_tenant(self, tenant_id: str) -> dict[str, str]:
        created = await self.http.post(
            self.url(0, "/tenants"), json={"tenant_id": tenant_id}, headers=ADMIN
        )
        assert created.status_code == 201, created.text
        return {"Authorization": f"Bearer {created.json()['api_key']}"}


def seeded_tools() -> int:
    from app.tools.builtin import registry

    return len(registry)


@pytest.fixture(scope="module")
def slow_model() -> Iterator[tuple[FakeModel, ThreadedServer]]:
    fake = FakeModel()
    server = ThreadedServer(fake).start()
    yield fake, server
    server.stop()


@pytest.fixture(scope="module")
def replicas(
    secantus_server: SecantusServer,
    slow_model: tuple[FakeModel, ThreadedServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[Replica]]:
    logs = tmp_path_factory.mktemp("replicas")
    settings = {
        "APP_ENV": "development",
        "MONGODB_URL": secantus_server.url,
        "MONGODB_DATABASE": f"replicas_{uuid.uuid4().hex[:10]}",
        "ADMIN_API_KEY": ADMIN_KEY,
        "API_KEY_SECRET": KEY_SECRET,
        "OPENAI_BASE_URL": f"{slow_model[1].url}/v1",
        "OPENAI_API_KEY": "test",
        "RATE_LIMIT_CHAT_PER_MINUTE": str(CHATS_PER_MINUTE),
        "MAX_CONCURRENT_CHATS_PER_TENANT": str(CONCURRENT_CHATS),
        "MAX_TOOLS_PER_TENANT": str(seeded_tools() + TOOLS_ABOVE_SEEDED),
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
        "CHAT_LEASE_S": str(LEASE_S),
        "CACHE_SYNC_INTERVAL_S": str(SYNC_S),
        # Caches that would keep a change out of sight for a minute: only the sync can be fast.
        "AUTH_CACHE_TTL_S": "60",
        "TOOL_CACHE_TTL_S": "60",
        "ACCESS_LOG": "false",
        "LIMITS": "shared",
        "RUN_JOURNAL_DIR": str(logs / "run-journal"),
    }
    started = [
        start_replica(free_port(), settings, logs / f"replica-{n}.log") for n in range(REPLICAS)
    ]
    try:
        for replica in started:
            wait_ready(replica)
        yield started
    finally:
        stop_replicas(started)


@pytest.fixture
async def cluster(replicas: list[Replica], slow_model: tuple[FakeModel, ThreadedServer]) -> Any:
    alive = [replica for replica in replicas if replica.process.poll() is None]
    slow_model[0].reset(repeat=script.text("hello"))
    async with httpx.AsyncClient(timeout=30) as http:
        yield Cluster(alive, http, seeded_tools() + TOOLS_ABOVE_SEEDED)


async def test_a_chat_rate_gives_exactly_its_count_across_the_replicas(cluster: Cluster) -> None:
    acme = await cluster.new_tenant(f"rate-{uuid.uuid4().hex[:6]}")
    codes = []
    for n in range(3 * CHATS_PER_MINUTE):  # round-robin, one at a time
        answer = await cluster.http.post(cluster.url(n, "/chat"), json=CHAT, headers=acme)
        codes.append(answer.status_code)
    assert codes.count(200) == CHATS_PER_MINUTE
    assert codes.count(429) == 2 * CHATS_PER_MINUTE
    assert codes[:CHATS_PER_MINUTE] == [200] * CHATS_PER_MINUTE  # the first ten, on all three


async def test_a_cap_on_concurrent_chats_holds_across_the_replicas(
    cluster: Cluster, slow_model: tuple[FakeModel, ThreadedServer]
) -> None:
    slow_model[0].reset(repeat=script.text_after(2.0, "slowly"))
    acme = await cluster.new_tenant(f"cap-{uuid.uuid4().hex[:6]}")
    answers = await asyncio.gather(
        *(cluster.http.post(cluster.url(n, "/chat"), json=CHAT, headers=acme) for n in range(6))
    )
    codes = sorted(answer.status_code for answer in answers)
    assert codes == [200] * CONCURRENT_CHATS + [429] * (6 - CONCURRENT_CHATS)
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert "chats running" in refused.json()["detail"]
    # Finished chats give their slots back on every replica.
    slow_model[0].reset(repeat=script.text("again"))
    later = [
        (await cluster.http.post(cluster.url(n, "/chat"), json=CHAT, headers=acme)).status_code
        for n in range(2)
    ]
    assert later == [200, 200]


async def test_a_tool_cap_holds_under_concurrent_creates_on_different_replicas(
    cluster: Cluster,
) -> None:
    acme = await cluster.new_tenant(f"tools-{uuid.uuid4().hex[:6]}")
    attempts = 10 * REPLICAS
    answers = await asyncio.gather(
        *(
            cluster.http.post(
                cluster.url(n, "/tools/create"), json=external_tool(f"api-{n}"), headers=acme
            )
            for n in range(attempts)
        )
    )
    codes = [answer.status_code for answer in answers]
    assert codes.count(201) == TOOLS_ABOVE_SEEDED, codes
    assert codes.count(409) == attempts - TOOLS_ABOVE_SEEDED, codes
    listed = (await cluster.http.get(cluster.url(1, "/tools/ids"), headers=acme)).json()
    assert len(listed) == cluster.max_tools


async def test_a_rotated_key_stops_working_on_every_replica_within_the_sync_bound(
    cluster: Cluster,
) -> None:
    tenant_id = f"rotate-{uuid.uuid4().hex[:6]}"
    old = await cluster.new_tenant(tenant_id)
    for n in range(len(cluster.replicas)):  # every replica caches the key (for a minute)
        assert (
            await cluster.http.get(cluster.url(n, "/tools/ids"), headers=old)
        ).status_code == 200
    rotated = await cluster.http.post(cluster.url(0, f"/tenants/{tenant_id}/keys"), headers=ADMIN)
    new = {"Authorization": f"Bearer {rotated.json()['api_key']}"}

    async def refused_everywhere() -> bool:
        codes = [await cluster.status(n, "/tools/ids", old) for n in range(len(cluster.replicas))]
        return codes == [401] * len(cluster.replicas)

    took = await within(refused_everywhere, SYNC_S + 1.5)
    print(f"rotated key refused everywhere after {took:.2f} s (sync interval {SYNC_S} s)")
    for n in range(len(cluster.replicas)):
        assert (
            await cluster.http.get(cluster.url(n, "/tools/ids"), headers=new)
        ).status_code == 200


async def test_a_killed_replicas_chat_slots_come_back_within_the_lease(
    cluster: Cluster, slow_model: tuple[FakeModel, ThreadedServer]
) -> None:
    """Runs last in this module: it kills replica 0."""
    slow_model[0].reset(repeat=script.text_after(30.0, "slowly"))
    acme = await cluster.new_tenant(f"kill-{uuid.uuid4().hex[:6]}")
    doomed = cluster.replicas[0]
    held = [
        asyncio.create_task(cluster.http.post(doomed.url + "/chat", json=CHAT, headers=acme))
        for _ in range(CONCURRENT_CHATS)
    ]

    async def both_at_the_model() -> bool:
        return len(slow_model[0].requests) >= CONCURRENT_CHATS

    await within(both_at_the_model, 10)  # both slots are held on replica 0
    survivor = cluster.replicas[1].url + "/chat"
    assert await refused(cluster.http, survivor, acme)

    os.killpg(doomed.process.pid, signal.SIGKILL)  # mid-chat
    doomed.process.wait(10)
    await asyncio.gather(*held, return_exceptions=True)
    slow_model[0].reset(repeat=script.text("back"))

    async def admitted() -> bool:
        return not await refused(cluster.http, survivor, acme)

    # Back once the dead replica's lease runs out (LEASE_S); the bound only ends a wait for
    # slots that never come back.
    waited = await within(admitted, LEASE_S + 10.0)
    print(f"slots back {waited:.2f} s after the held chats ended (lease {LEASE_S} s)")


async def refused(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> bool:
    answer = await http.post(url, json=CHAT, headers=headers)
    assert answer.status_code in (200, 429), answer.text
    return answer.status_code == 429
