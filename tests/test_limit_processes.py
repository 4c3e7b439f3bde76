"""Shared limits on three service processes (`python -m app`, LIMITS=shared) and one SecantusDB
server, clients sent round-robin, chats counted in flight at the model (issue 26, items 3 and 4):
with other clients keeping the database busy (scripts/load.py --db-writers), so that limit
checks pass their timeout and replicas count alone, a cap and a rate still hold; and exactly
cap-many closed-loop clients are never refused."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import fake_model as script
from tests.support.apps import ADMIN, ADMIN_KEY, KEY_SECRET
from tests.support.fake_model import FakeModel
from tests.support.in_flight import InFlight
from tests.support.processes import ROOT
from tests.support.replicas import Replica, start_replica, stop_replicas, wait_ready
from tests.support.secantus import SecantusServer, free_port
from tests.support.servers import ThreadedServer

pytestmark = [pytest.mark.processes, pytest.mark.slow]

REPLICAS = 3
CAP = 4
RATE = 30  # a minute
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecantusServer]:
    """A server of this module's own: the writers below keep it busy."""
    server = SecantusServer(tmp_path_factory.mktemp("limits") / "data")
    server.start()
    yield server
    server.stop()


@dataclass
class Model:
    fake: FakeModel
    counted: InFlight  # the chats in flight, as the model sees them
    url: str


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    fake = FakeModel()
    counted = InFlight(fake)
    server = ThreadedServer(counted).start()
    yield Model(fake, counted, server.url)
    server.stop()


@contextmanager
def replicas(
    database: SecantusServer, model: Model, logs: Path, **settings: str
) -> Iterator[list[Replica]]:
    env = {
        "APP_ENV": "development",
        "MONGODB_URL": database.url,
        "MONGODB_DATABASE": f"limits_{uuid.uuid4().hex[:10]}",
        "ADMIN_API_KEY": ADMIN_KEY,
        "API_KEY_SECRET": KEY_SECRET,
        "OPENAI_BASE_URL": f"{model.url}/v1",
        "OPENAI_API_KEY": "test",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
        "RATE_LIMIT_CHAT_PER_MINUTE": "0",
        "ACCESS_LOG": "false",
        "LIMITS": "shared",
        **settings,
    }
    started = [start_replica(free_port(), env, logs / f"replica-{n}.log") for n in range(REPLICAS)]
    try:
        for replica in started:
            wait_ready(replica)
        yield started
    finally:
        stop_replicas(started)


@contextmanager
def database_writers(database: SecantusServer, writers: int = 2) -> Iterator[None]:
    """Other clients writing batches of 500 documents back to back (scripts/load.py)."""
    spec = importlib.util.spec_from_file_location("scripts_load", ROOT / "scripts" / "load.py")
    assert spec is not None and spec.loader is not None
    load = sys.modules.setdefault("scripts_load", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(load)
    process = subprocess.Popen(
        [sys.executable, "-c", load.DB_WRITER, database.url, str(writers)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(1.0)  # under way before the load starts
        yield
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


async def new_tenant(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    created = await http.post(
        f"{url}/tenants", json={"tenant_id": f"t-{uuid.uuid4().hex[:8]}"}, headers=ADMIN
    )
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['api_key']}"}


async def warm_tenant(started: list[Replica]) -> dict[str, str]:
    """A new tenant that has chatted once on every replica, so each replica holds its key, tools
    and model settings in its caches (stale-if-error) before the database gets busy: a replica
    that must read them first from a busy database answers 503, rightly, and the tests below
    count limits, not first reads."""
    async with httpx.AsyncClient(timeout=30) as http:
        tenant = await new_tenant(http, started[0].url)
        for replica in started:
            answer = await http.post(f"{replica.url}/chat", json=CHAT, headers=tenant)
            assert answer.status_code == 200, answer.text
    return tenant


async def closed_loop(
    started: list[Replica],
    tenant: dict[str, str],
    *,
    clients: int,
    seconds: float,
    pause_after_429_s: float = 0.0,
) -> Counter[int]:
    """`clients` clients each sending chats back to back for `seconds`, each request to the
    next replica in turn; the status codes."""
    codes: Counter[int] = Counter()
    refusals: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=30) as http:
        deadline = time.monotonic() + seconds

        async def client(number: int) -> None:
            turn = number
            while time.monotonic() < deadline:
                url = started[turn % len(started)].url
                answer = await http.post(f"{url}/chat", json=CHAT, headers=tenant)
                assert answer.status_code in (200, 429), answer.text
                codes[answer.status_code] += 1
                if answer.status_code == 429:
                    refusals[answer.json()["detail"][:60]] += 1
                turn += 1
                if answer.status_code == 429:
                    await asyncio.sleep(pause_after_429_s)

        await asyncio.gather(*(client(n) for n in range(clients)))
    print(f"refusals: {dict(refusals)}")
    return codes


def alone_log_lines(started: list[Replica]) -> list[str]:
    return [
        line
        for replica in started
        for line in replica.log.read_text().splitlines()
        if "counts on its own" in line or "counted on its own" in line
    ]


async def test_a_cap_holds_while_the_database_is_busy(
    database: SecantusServer,
    model: Model,
    tmp_path: Path,
) -> None:
    """Before: 16 chats in flight against a cap of 4 (each replica alone with a full local
    cap, the shared count granting its 4 on top)."""
    counted = model.counted
    model.fake.reset(repeat=script.text_after(0.2, "hello"))
    with replicas(database, model, tmp_path, MAX_CONCURRENT_CHATS_PER_TENANT=str(CAP)) as started:
        tenant = await warm_tenant(started)
        with database_writers(database):
            counted.reset()
            codes = await closed_loop(
                started, tenant, clients=12, seconds=8, pause_after_429_s=0.05
            )
        lines = alone_log_lines(started)
    print(f"cap {CAP}: at most {counted.most} in flight; {dict(codes)}; {len(lines)} alone lines")
    assert counted.most <= CAP
    assert codes[200] > 0


async def test_a_rate_holds_while_the_database_is_busy(
    database: SecantusServer,
    model: Model,
    tmp_path: Path,
) -> None:
    """Before: 143 chats admitted against a bound of 45 (30 a minute, over 30 s)."""
    model.fake.reset(repeat=script.text_after(0.01, "hello"))
    seconds = 20
    bound = RATE + RATE * seconds // 60  # a full bucket, then its refill
    with replicas(
        database,
        model,
        tmp_path,
        RATE_LIMIT_CHAT_PER_MINUTE=str(RATE),
        MAX_CONCURRENT_CHATS_PER_TENANT="0",
    ) as started:
        tenant = await warm_tenant(started)  # 3 of the rate's tokens: the bound stays as it is
        with database_writers(database):
            codes = await closed_loop(
                started, tenant, clients=6, seconds=seconds, pause_after_429_s=0.1
            )
            lines = alone_log_lines(started)
    print(f"rate {RATE}/min over {seconds} s: {dict(codes)} (bound {bound}); {len(lines)} alone")
    assert 0 < codes[200] <= bound


async def test_exactly_cap_many_closed_loop_clients_are_never_refused(
    database: SecantusServer,
    model: Model,
    tmp_path: Path,
) -> None:
    """Before: 290 of 4,042 refused (7.2%): a whole chat's release was written after the answer,
    so the client's next chat, on another replica, found the slot still taken."""
    model.fake.reset(repeat=script.text_after(0.01, "hello"))
    with replicas(database, model, tmp_path, MAX_CONCURRENT_CHATS_PER_TENANT=str(CAP)) as started:
        codes = await closed_loop(started, await warm_tenant(started), clients=CAP, seconds=6)
    print(f"{CAP} clients, cap {CAP}: {dict(codes)}")
    assert codes[429] == 0
    assert codes[200] > 100
