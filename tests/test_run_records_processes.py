"""Run records on real service processes and a real MongoDB-wire server (SecantusDB): a chat
answered 200 always gets its record, through a database outage longer than the old 30 s
give-up, and through `kill -9` of the replica that answered it (the journal is replayed when
the replica starts again, or, when it never does, by another replica sharing the journal's
volume)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient

from tests.support import fake_model as script
from tests.support.apps import ADMIN, ADMIN_KEY, KEY_SECRET
from tests.support.fake_model import FakeModel
from tests.support.replicas import Replica, kill_9, start_replica, stop_replicas, wait_ready
from tests.support.secantus import SecantusServer, free_port
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

pytestmark = [pytest.mark.slow, pytest.mark.processes]

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
CLIENTS = 2  # closed-loop clients, round-robin over the replicas and tenants
# Longer than the old give-up (about 30 s of retries, then the batch was dropped); the issue's
# 3-minute outage: TOOLGATE_OUTAGE_S=180 (measured so, docs/operating.md; too long for CI).
OUTAGE_S = float(os.environ.get("TOOLGATE_OUTAGE_S", "35"))
LANDED_BOUND_S = 120.0
# Each client's pause between chats: about 40 chats/s in all, so the records held through the
# outage (more than a thousand) land within the bound on a MongoDB-wire server that takes a few ms
# a record. Unpaced, the replicas answered ~350 chats/s and the catch-up alone outlasted it.
PACE_S = 0.04


@dataclass
class Answered:
    """Chats answered 200, by the replica that answered: (tenant_id, run_id)."""

    by_replica: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    other: dict[str, int] = field(default_factory=dict)  # other outcomes, counted

    def all(self) -> set[tuple[str, str]]:
        return {answer for answers in self.by_replica.values() for answer in answers}


@dataclass
class Stack:
    database: SecantusServer
    env: dict[str, str]
    logs: Path
    replicas: list[Replica]
    tenants: dict[str, dict[str, str]]

    def start(self, index: int) -> Replica:
        replica = start_replica(free_port(), self.env, self.logs / f"replica-{index}.log")
        wait_ready(replica)
        return replica


@pytest.fixture
def database(tmp_path: Path) -> Iterator[SecantusServer]:
    server = SecantusServer(tmp_path / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def quick_model() -> Iterator[ThreadedServer]:
    fake = FakeModel()
    fake.reset(repeat=script.text("hello"))
    server = ThreadedServer(fake).start()
    yield server
    server.stop()


@pytest.fixture
async def stack(
    database: SecantusServer, quick_model: ThreadedServer, tmp_path: Path
) -> AsyncIterator[Stack]:
    env = {
        "APP_ENV": "development",
        "MONGODB_URL": database.url,
        "MONGODB_DATABASE": f"records_{uuid.uuid4().hex[:10]}",
        "MONGODB_TIMEOUT_MS": "500",
        "ADMIN_API_KEY": ADMIN_KEY,
        "API_KEY_SECRET": KEY_SECRET,
        "OPENAI_BASE_URL": f"{quick_model.url}/v1",
        "OPENAI_API_KEY": "test",
        "LIMITS": "local",  # the limits have their own suite; here only records matter
        "RATE_LIMIT_CHAT_PER_MINUTE": "0",
        "MAX_CONCURRENT_CHATS_PER_TENANT": "0",
        "CACHE_STALE_IF_ERROR_S": "600",  # chats are answered from cache through the outage
        "RUN_QUEUE_MAX_RECORDS": "100",  # a small memory bound: the outage spills to disk
        "RUN_JOURNAL_DIR": str(tmp_path / "run-journal"),  # one volume, every replica
        "RUN_JOURNAL_ADOPT_S": "2",
        "ACCESS_LOG": "false",
    }
    made = Stack(database, env, tmp_path, [], {})
    try:
        made.replicas = [made.start(index) for index in range(2)]
        async with httpx.AsyncClient(timeout=30) as http:
            for tenant_id in ("acme", "globex"):
                created = await http.post(
                    made.replicas[0].url + "/tenants", json={"tenant_id": tenant_id}, headers=ADMIN
                )
                assert created.status_code == 201, created.text
                made.tenants[tenant_id] = {"Authorization": f"Bearer {created.json()['api_key']}"}
        yield made
    finally:
        stop_replicas(made.replicas)


async def drive(stack: Stack, stop: asyncio.Event, answered: Answered) -> None:
    """CLIENTS closed-loop clients until `stop`, each chat to the next replica and tenant."""
    turns = itertools.count()
    tenants = list(stack.tenants.items())

    async def client(http: httpx.AsyncClient) -> None:
        while not stop.is_set():
            turn = next(turns)
            index = turn % len(stack.replicas)
            tenant_id, headers = tenants[turn // len(stack.replicas) % len(tenants)]
            try:
                answer = await http.post(
                    stack.replicas[index].url + "/chat", json=CHAT, headers=headers
                )
            except httpx.TransportError as exc:
                answered.other[type(exc).__name__] = answered.other.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            if answer.status_code == 200:
                run_id = answer.json()["run_id"]
                answered.by_replica.setdefault(index, []).append((tenant_id, run_id))
                await asyncio.sleep(PACE_S)
            else:
                key = str(answer.status_code)
                answered.other[key] = answered.other.get(key, 0) + 1
                await asyncio.sleep(0.05)

    async with httpx.AsyncClient(timeout=10) as http:
        await asyncio.gather(*(client(http) for _ in range(CLIENTS)))


async def stored(stack: Stack) -> set[tuple[str, str]]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        stack.database.url, serverSelectionTimeoutMS=2000
    )
    try:
        database = client[stack.env["MONGODB_DATABASE"]]
        found = set()
        async for doc in database["runs"].find({}, {"run_id": 1, "tenant_id": 1}):
            found.add((doc["tenant_id"], doc["run_id"]))
        return found
    finally:
        await client.close()


async def missing_after_landing(stack: Stack, wanted: set[tuple[str, str]]) -> set[Any]:
    """What of `wanted` is still not stored once the records had LANDED_BOUND_S to land."""
    missing = set(wanted)

    async def landed() -> bool:
        nonlocal missing
        missing = wanted - await stored(stack)
        return not missing

    try:
        took = await within(landed, LANDED_BOUND_S)
        print(f"all {len(wanted)} records stored {took:.1f} s after the load stopped")
    except AssertionError:
        pass
    return missing


async def test_a_database_outage_loses_no_record_of_a_chat_answered(stack: Stack) -> None:
    stop, answered = asyncio.Event(), Answered()
    load = asyncio.create_task(drive(stack, stop, answered))
    await asyncio.sleep(2.0)
    before = len(answered.all())
    stack.database.kill()
    killed_at = time.monotonic()
    await asyncio.sleep(OUTAGE_S)
    during = len(answered.all()) - before
    stack.database.start()
    print(f"database back after {time.monotonic() - killed_at:.1f} s")
    await asyncio.sleep(2.0)
    stop.set()
    await load
    wanted = answered.all()
    print(f"answered 200: {len(wanted)} ({during} during the outage); other: {answered.other}")
    assert during > 50  # the outage was under load, answered from cache
    missing = await missing_after_landing(stack, wanted)
    assert not missing, f"{len(missing)} of {len(wanted)} records lost"
    logs = "".join(replica.log.read_text() for replica in stack.replicas)
    assert "run record(s) lost" not in logs


async def test_kill_9_of_a_replica_loses_no_record_of_a_chat_it_answered(stack: Stack) -> None:
    stop, answered = asyncio.Event(), Answered()
    load = asyncio.create_task(drive(stack, stop, answered))
    await asyncio.sleep(3.0)
    doomed = stack.replicas[0]
    kill_9(doomed)  # mid-load: records of the last chats are queued, not yet written
    await asyncio.sleep(0.5)
    stop.set()
    await load
    by_doomed = set(answered.by_replica.get(0, []))
    print(f"the killed replica answered {len(by_doomed)} chats; other: {answered.other}")
    assert len(by_doomed) > 20
    stack.replicas[0] = stack.start(0)  # same journal directory: it replays the dead one's
    # ... unless the other replica, sharing the directory, adopted them first (every 2 s here).
    replayed = "replaying" in stack.replicas[0].log.read_text()
    assert replayed or "adopting" in stack.replicas[1].log.read_text()
    missing = await missing_after_landing(stack, answered.all())
    assert not missing, f"{len(missing)} records of answered chats lost: {sorted(missing)[:5]}"


async def test_a_replica_killed_in_an_outage_and_never_back_loses_no_record(stack: Stack) -> None:
    """The pod is gone for good (evicted, its node lost): the records it answered during an
    outage are in its segments on the volume the replicas share; the other replica adopts them
    (RUN_JOURNAL_ADOPT_S) and stores them once the database is back."""
    stop, answered = asyncio.Event(), Answered()
    load = asyncio.create_task(drive(stack, stop, answered))
    await within(lambda: len(answered.all()) > 20, 30)
    stack.database.kill()
    await within(lambda: len(answered.by_replica.get(0, [])) > 60, 60)  # answered from cache
    kill_9(stack.replicas[0])
    stop.set()
    await load
    stack.database.start()
    by_dead = set(answered.by_replica.get(0, []))
    missing = await missing_after_landing(stack, answered.all())
    assert not missing, f"{len(missing)} of {len(by_dead)} records of the dead replica lost"
    assert "adopting" in stack.replicas[1].log.read_text()
