"""Both run stores keep one contract: the MongoDB collection and the embedded store's ring."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from app.repositories.database import Database
from app.repositories.runs import MemoryRunRepository, RunRepository, RunStore
from app.schemas.runs import RunQuery
from tests.support.apps import make_settings
from tests.support.secantus import SecantusServer

NOW = datetime.now(UTC).replace(microsecond=0)


def run(
    index: int, *, tool: str = "dice", status: str = "ok", ms: float = 1.0, stop: str = "completed"
) -> dict[str, Any]:
    return {
        "run_id": f"{index:032x}",
        "started_at": NOW - timedelta(seconds=100 - index),
        "ended_at": NOW,
        "model": "m",
        "stop_reason": stop,
        "iterations": 1,
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "tool_calls": [
            {
                "id": "c",
                "name": f"fn_{tool}",
                "tool_id": tool,
                "status": status,
                "duration_ms": ms,
                "arguments": {},
            }
        ],
    }


@pytest.fixture(
    params=[
        "memory-ring",
        pytest.param("secantus", marks=[pytest.mark.processes, pytest.mark.slow]),
    ]
)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RunStore]:
    if request.param == "memory-ring":
        yield MemoryRunRepository(limit=1000)
        return
    server: SecantusServer = request.getfixturevalue("secantus_server")
    settings = make_settings(server.url)
    database = Database.from_settings(settings)
    repo = RunRepository(database, retention_days=7)
    assert await database.ensure_indexes() == []
    yield repo
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(server.url)
    await client.drop_database(settings.mongodb_database)
    await client.close()
    await database.close()


async def page(store: RunStore, **filters: Any) -> list[str]:
    query = RunQuery(**{"limit": 100, **filters})
    return [r["run_id"][-2:] for r in await store.page(query, tenant_id="acme")]


async def test_paging_filters_and_lookup(store: RunStore) -> None:
    await store.insert_many(
        [
            run(i, tool="dice" if i % 2 else "calc", stop="error" if i == 7 else "completed")
            for i in range(1, 11)
        ],
        tenant_id="acme",
    )
    assert await page(store) == [f"{i:02x}" for i in range(10, 0, -1)]
    first = await store.page(RunQuery(limit=3), tenant_id="acme")
    last = first[-1]
    rest = await page(store, after=(last["started_at"], last["run_id"]), limit=3)
    assert rest == ["07", "06", "05"]
    assert await page(store, tool_id="calc") == ["0a", "08", "06", "04", "02"]
    assert await page(store, tool_name="fn_dice", status="error") == ["07"]
    window = await page(store, since=NOW - timedelta(seconds=95), until=NOW - timedelta(seconds=92))
    assert window == ["07", "06", "05"]
    found = await store.get(f"{3:032x}", tenant_id="acme")
    assert found is not None and found["tool_calls"][0]["tool_id"] == "dice"
    assert await store.get(f"{3:032x}", tenant_id="globex") is None
    await store.drop_all(tenant_id="acme")
    assert await page(store) == []


async def test_stats_use_nearest_rank_percentiles(store: RunStore) -> None:
    await store.insert_many(
        [run(i, ms=float(i), status="error" if i % 4 == 0 else "ok") for i in range(1, 21)],
        tenant_id="acme",
    )
    stats = await store.tool_stats(
        "dice", tenant_id="acme", since=NOW - timedelta(hours=1), until=NOW + timedelta(hours=1)
    )
    assert stats == {"calls": 20, "errors": 5, "p50_ms": 10.0, "p95_ms": 19.0}
    empty = await store.tool_stats(
        "dice", tenant_id="acme", since=NOW + timedelta(hours=1), until=NOW + timedelta(hours=2)
    )
    assert int(empty.get("calls", 0)) == 0


async def test_mongodb_runs_expire_by_ttl_index(secantus_server: SecantusServer) -> None:
    settings = make_settings(secantus_server.url)
    database = Database.from_settings(settings)
    try:
        RunRepository(database, retention_days=7)
        assert await database.ensure_indexes() == []
        indexes = await database.collection("runs").index_information()
        assert indexes["ended_at_1"]["expireAfterSeconds"] == 7 * 86_400
        # Every index that serves a query leads with the tenant (the TTL index serves none).
        queried = [
            spec["key"] for name, spec in indexes.items() if name not in ("_id_", "ended_at_1")
        ]
        assert queried and all(key[0][0] == "tenant_id" for key in queried)
    finally:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus_server.url)
        await client.drop_database(settings.mongodb_database)
        await client.close()
        await database.close()


async def test_mongodb_stores_a_record_written_twice_once(secantus_server: SecantusServer) -> None:
    """A batch retried after a timeout, or a journal replayed after a crash, may send records
    the database already holds: each is stored once, and the others of the batch are written."""
    settings = make_settings(secantus_server.url)
    database = Database.from_settings(settings)
    repo = RunRepository(database, retention_days=7)
    try:
        await database.ensure_indexes()
        await repo.insert_many([run(1), run(2)], tenant_id="acme")
        await repo.insert_many([run(2), run(1), run(3)], tenant_id="acme")  # fresh dicts
        stored = await database.collection("runs").count_documents({"tenant_id": "acme"})
        assert stored == 3
    finally:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus_server.url)
        await client.drop_database(settings.mongodb_database)
        await client.close()
        await database.close()


async def test_the_ring_keeps_the_newest_runs() -> None:
    store = MemoryRunRepository(limit=5)
    await store.insert_many([run(i) for i in range(1, 21)], tenant_id="acme")
    assert await page(store) == ["14", "13", "12", "11", "10"]


async def test_a_record_the_encoder_cannot_take_leaves_its_batch_whole(store: RunStore) -> None:
    """A record nested past the BSON encoder's recursion limit (it raises RecursionError, as
    `/mcp` arguments 980 levels deep once did) is kept reduced; the records batched with it
    are stored whole."""
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    bad = run(2)
    bad["tool_calls"][0]["arguments"] = deep
    await store.insert_many([run(1), bad, run(3)], tenant_id="acme")
    assert await page(store) == ["03", "02", "01"]
    innocent = await store.get(run(1)["run_id"], tenant_id="acme")
    assert innocent is not None and innocent["tool_calls"] == run(1)["tool_calls"]
    kept = await store.get(bad["run_id"], tenant_id="acme")
    assert kept is not None and kept["stop_reason"] == "completed"
    if isinstance(store, RunRepository):  # the ring keeps objects, the database BSON
        assert "[unstorable" in repr(kept["tool_calls"])
