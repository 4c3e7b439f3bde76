"""GET /usage's aggregation over run records, computed by each store the same way: the MongoDB
pipeline on the embedded store (mongomock) and on a real wire server (SecantusDB), and the
in-process ring."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mongomock_motor import AsyncMongoMockClient

from app.errors import UnprocessableError
from app.repositories.database import Database
from app.repositories.runs import (
    RUNS_BY_TIME,
    MemoryRunRepository,
    RunRepository,
    RunStore,
    at_or_after,
)
from app.services.usage import usage_report, usage_window
from tests.support.run_stores import mongodb_runs
from tests.support.secantus import SecantusServer

# A whole hour, three hours ago: records of the past, well within the TTL index's retention
# (SecantusDB's TTL monitor, like MongoDB's, deletes records that ended before it).
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)


def call(tool: str | None, status: str, ms: float, name: str = "fn") -> dict[str, Any]:
    return {
        "id": "c",
        "name": name,
        "tool_id": tool,
        "status": status,
        "duration_ms": ms,
        "arguments": {},
    }


def record(
    index: int,
    minutes: float,
    calls: list[dict[str, Any]],
    *,
    kind: str = "invoke",
    **fields: Any,
) -> dict[str, Any]:
    return {
        "run_id": f"{index:032x}",
        "kind": kind,
        "started_at": T0 + timedelta(minutes=minutes),
        "ended_at": T0 + timedelta(minutes=minutes, seconds=1),
        "model": None,
        "stop_reason": "completed",
        "iterations": 0,
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "tool_calls": calls,
        **fields,
    }


def known_records() -> list[dict[str, Any]]:
    """dice: 20 calls over 2 hours (1..20 ms, every 4th failing); calc: 5 calls, 2 failing
    (100..500 ms); an unknown tool by name; a chat run per model; a record out of the window
    and one stored reduced (its calls a marker)."""
    runs = [
        record(i, 6 * i, [call("dice", "error" if i % 4 == 0 else "ok", float(i))])
        for i in range(1, 21)
    ]
    runs += [
        record(100 + i, 10 * i, [call("calc", "error" if i <= 2 else "ok", 100.0 * i)])
        for i in range(1, 6)
    ]
    usage = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    runs += [
        record(
            200,
            5,
            [call(None, "error", 1.0, name="nope"), call("dice", "ok", 3.0)],
            kind="chat",
            model="gpt-x",
            iterations=2,
            usage=usage,
            model_calls=[{"status": "ok"}, {"status": "ok"}, {"status": "error"}],  # 3 calls
        ),
        record(
            201, 65, [], kind="chat", model="claude", provider="anthro", iterations=1, usage=usage
        ),
        record(
            202,
            70,
            [],
            kind="chat",
            model="claude",
            provider="anthro",
            stop_reason="error",
            iterations=1,
            usage=usage,
        ),
        record(300, -30, [call("dice", "ok", 999.0)]),  # before the window
        record(301, 30, [{"unstorable": "the record would pass MongoDB's 16 MiB"}]),
    ]
    return runs


@pytest.fixture(
    params=[
        "memory-ring",
        "mongomock",
        pytest.param("secantus", marks=[pytest.mark.processes, pytest.mark.slow]),
    ]
)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RunStore]:
    if request.param == "memory-ring":
        yield MemoryRunRepository(limit=1000)
        return
    if request.param == "mongomock":
        database = Database(AsyncMongoMockClient(tz_aware=True), "usage", in_memory=True)
        yield RunRepository(database, retention_days=7)
        return
    server: SecantusServer = request.getfixturevalue("secantus_server")
    async with mongodb_runs(server.url) as repo:
        yield repo


WINDOW = usage_window(since=T0, until=T0 + timedelta(hours=2), bucket="1h", now=T0)


def by_key(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {row["key"]: {k: v for k, v in row.items() if k != "key"} for row in rows}


async def test_per_tool_calls_errors_and_nearest_rank_percentiles(store: RunStore) -> None:
    await store.insert_many(known_records(), tenant_id="acme")
    rows = by_key(await store.tool_usage(WINDOW, tenant_id="acme"))
    assert rows == {
        "dice": {"calls": 20, "errors": 4, "p50_ms": 9.0, "p95_ms": 18.0},  # 1..19 and a 3
        "calc": {"calls": 5, "errors": 2, "p50_ms": 300.0, "p95_ms": 500.0},
        "nope": {"calls": 1, "errors": 1, "p50_ms": 1.0, "p95_ms": 1.0},
    }
    assert await store.tool_usage(WINDOW, tenant_id="globex") == []


async def test_series_per_bucket_with_the_others_summed(store: RunStore) -> None:
    await store.insert_many(known_records(), tenant_id="acme")
    rows = await store.tool_usage_series(WINDOW, ["dice"], tenant_id="acme")
    found = {(row["key"], int(row["bucket"])): (row["calls"], row["errors"]) for row in rows}
    # dice at 6..54 min (9 calls, 2 failing) and the chat's call; at 60..114 min 10 calls, 2
    # failing (the one at 120 min starts at `until`: out).
    assert found == {
        ("dice", 0): (10, 2),
        ("dice", 1): (10, 2),
        (None, 0): (6, 3),  # calc 10..50 min (2 failing) and the unknown tool
    }


async def test_models_per_provider_and_bucket(store: RunStore) -> None:
    await store.insert_many(known_records(), tenant_id="acme")
    rows = await store.model_usage_series(WINDOW, tenant_id="acme")
    found = {
        (row.get("provider"), row["model"], int(row["bucket"])): {
            k: row[k] for k in ("runs", "calls", "errors", "total_tokens", "prompt_tokens")
        }
        for row in rows
    }
    assert found == {
        (None, "gpt-x", 0): {
            "runs": 1,
            "calls": 3,
            "errors": 0,
            "total_tokens": 42,
            "prompt_tokens": 30,
        },
        ("anthro", "claude", 1): {
            "runs": 2,
            "calls": 2,
            "errors": 1,
            "total_tokens": 84,
            "prompt_tokens": 60,
        },
    }


async def test_the_report_ranks_series_and_tops(store: RunStore) -> None:
    await store.insert_many(known_records(), tenant_id="acme")
    report = await usage_report(store, WINDOW, tenant_id="acme", by="tool", bucket="1h", limit=1)
    assert report["buckets"] == [T0, T0 + timedelta(hours=1)]
    assert report["totals"] == {"calls": 26, "errors": 7, "error_rate": 7 / 26, "keys": 3}
    assert [k["key"] for k in report["keys"]] == ["dice", "(other)"]
    assert report["keys"][1] == {"key": "(other)", "calls": 6, "errors": 3, "error_rate": 0.5}
    assert report["series"] == [
        {"key": "dice", "calls": [10, 10], "errors": [2, 2]},
        {"key": "(other)", "calls": [6, 0], "errors": [3, 0]},
    ]
    assert [k["key"] for k in report["slowest"]] == ["calc", "dice", "nope"]
    assert [(k["key"], k["errors"]) for k in report["failing"]] == [
        ("dice", 4),
        ("calc", 2),
        ("nope", 1),
    ]
    models = await usage_report(store, WINDOW, tenant_id="acme", by="model", bucket="1h", limit=5)
    assert models["totals"] == {
        "calls": 5,
        "errors": 1,
        "error_rate": 1 / 3,
        "keys": 2,
        "runs": 3,
        "total_tokens": 126,
    }
    assert [(k["key"], k["calls"], k["runs"]) for k in models["keys"]] == [
        ("gpt-x", 3, 1),
        ("anthro / claude", 2, 2),
    ]
    assert models["series"][1]["total_tokens"] == [0, 84]


async def test_buckets_start_on_whole_units_of_utc() -> None:
    window = usage_window(
        since=T0 + timedelta(minutes=7, seconds=5),
        until=T0 + timedelta(minutes=31),
        bucket="15m",
        now=T0,
    )
    store = MemoryRunRepository(limit=10)
    await store.insert_many([record(1, 8, [call("dice", "ok", 1.0)])], tenant_id="acme")
    report = await usage_report(store, window, tenant_id="acme", by="tool", bucket="15m", limit=5)
    assert report["buckets"] == [T0, T0 + timedelta(minutes=15), T0 + timedelta(minutes=30)]
    assert report["series"] == [{"key": "dice", "calls": [1, 0, 0], "errors": [0, 0, 0]}]


@pytest.mark.parametrize(
    ("since", "until", "bucket", "path", "words"),
    [
        (T0, T0, "1h", "query.since", "must be before until"),
        (T0 + timedelta(hours=1), T0, "1h", "query.since", "must be before until"),
        (T0 - timedelta(days=32), T0, "1d", "query.since", "at most 31 days"),
        (T0 - timedelta(days=1), T0, "1m", "query.bucket", "1440 buckets of 1m; at most 1000"),
    ],
)
def test_a_window_past_its_bounds_is_a_422(
    since: datetime, until: datetime, bucket: Any, path: str, words: str
) -> None:
    with pytest.raises(UnprocessableError) as refused:
        usage_window(since=since, until=until, bucket=bucket, now=T0)
    [error] = refused.value.errors
    assert error["path"] == path and words in error["message"]


def test_defaults_are_the_day_before_now() -> None:
    window = usage_window(since=None, until=None, bucket="1h", now=T0)
    assert (window.since, window.until, window.origin) == (T0 - timedelta(days=1), T0, window.since)


class _PipelinesSeen(Database):
    """The embedded store, noting each pipeline sent to a collection."""

    sent: list[list[dict[str, Any]]]

    def scoped(self, name: str, tenant_id: str) -> Any:
        collection = super().scoped(name, tenant_id)
        sent = self.sent

        class Seen:
            def __getattr__(self, name: str) -> Any:
                return getattr(collection, name)

            def aggregate(self, pipeline: list[dict[str, Any]]) -> Any:
                sent.append(pipeline)
                return collection.aggregate(pipeline)

        return Seen()


async def test_every_pipeline_opens_with_the_tenant_and_time_range_an_index_serves() -> None:
    """Each usage pipeline's first stage is a `$match` on `tenant_id` and `started_at` (the
    shared collection's records of one tenant in the window), the leading fields of an index
    the run collection is given."""
    database = _PipelinesSeen(AsyncMongoMockClient(tz_aware=True), "usage", in_memory=True)
    database.sent = []
    repo = RunRepository(database, retention_days=7)
    await database.ensure_indexes()
    indexes = await database.scoped("runs", "acme").index_information()
    assert RUNS_BY_TIME in [list(info["key"]) for info in indexes.values()]
    await repo.tool_usage(WINDOW, tenant_id="acme")
    await repo.tool_usage_series(WINDOW, ["dice"], tenant_id="acme")
    await repo.model_usage_series(WINDOW, tenant_id="acme")
    started = {"$gt": at_or_after(WINDOW.since), "$lt": WINDOW.until}
    window = {"tenant_id": "acme", "started_at": started}
    assert [pipeline[0] for pipeline in database.sent] == [{"$match": window}] * 3
    assert [field for field, _ in RUNS_BY_TIME[:2]] == ["tenant_id", "started_at"]


class _CalledMeanwhile(MemoryRunRepository):
    """A store to which a new tool's call arrives between the report's two reads."""

    async def tool_usage(self, window: Any, *, tenant_id: str) -> list[dict[str, Any]]:
        found = await super().tool_usage(window, tenant_id=tenant_id)
        late = record(999, 30, [call("newcomer", "error", 5.0)])
        await self.insert_many([late], tenant_id=tenant_id)
        return found


async def test_a_tool_first_called_between_the_two_reads_is_counted_as_other() -> None:
    store = _CalledMeanwhile(limit=100)
    await store.insert_many([record(1, 5, [call("dice", "ok", 1.0)])], tenant_id="acme")
    report = await usage_report(store, WINDOW, tenant_id="acme", by="tool", bucket="1h", limit=5)
    assert report["keys"] == [
        {"key": "dice", "calls": 1, "errors": 0, "error_rate": 0.0, "p50_ms": 1.0, "p95_ms": 1.0},
        {"key": "(other)", "calls": 1, "errors": 1, "error_rate": 1.0},
    ]
    assert report["series"][1] == {"key": "(other)", "calls": [1, 0], "errors": [1, 0]}
