"""Chat run records in the shared `runs` collection, expired by a TTL index, and the usage
aggregations over them (`GET /usage`), computed by the database.

Every query index leads with `tenant_id`; a record's `_id` is its `run_id` (random 128 bits:
a record written twice is stored once). The TTL index on `ended_at` is a single field, as
MongoDB requires of TTL indexes: it serves no query.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from bson.errors import InvalidDocument
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import BulkWriteError, DocumentTooLarge, WriteError

from app.repositories.database import Database, Document, aggregate, repository
from app.repositories.storable import storable_record
from app.schemas.runs import RunQuery
from app.schemas.usage import UsageWindow

logger = logging.getLogger(__name__)
# What the driver refuses before anything is sent: integers beyond 64 bits, NUL in a key, size.
# What encoding a record can raise: handled record by record, never for the whole batch.
_REFUSED = (OverflowError, InvalidDocument, DocumentTooLarge, RecursionError, ValueError, TypeError)

_NO_ID = {"_id": 0, "tenant_id": 0}
_DUPLICATE_KEY = 11000
PURGE_BATCH = 5000  # records deleted per round trip when a tenant goes
# Newest first (the runs page) and a time range (the usage aggregations' first stage): one index.
RUNS_BY_TIME = [("tenant_id", ASCENDING), ("started_at", DESCENDING), ("run_id", DESCENDING)]
# A tool call's key in the usage aggregation: its tool id (a call of an unknown tool: its name).
_TOOL_KEY = {"$ifNull": ["$tool_calls.tool_id", "$tool_calls.name"]}
_FAILED_CALL = {"$cond": [{"$eq": ["$tool_calls.status", "error"]}, 1, 0]}
# A chat's model calls: those it recorded (a failed one too), else (older records) its turns.
_MODEL_CALLS = {"$cond": [{"$isArray": "$model_calls"}, {"$size": "$model_calls"}, "$iterations"]}


def run_indexes(retention_days: int) -> list[IndexModel]:
    return [
        IndexModel(RUNS_BY_TIME),
        IndexModel(
            [
                ("tenant_id", ASCENDING),
                ("tool_calls.tool_id", ASCENDING),
                ("started_at", DESCENDING),
            ]
        ),
        IndexModel(
            [("tenant_id", ASCENDING), ("tool_calls.name", ASCENDING), ("started_at", DESCENDING)]
        ),
        IndexModel([("ended_at", ASCENDING)], expireAfterSeconds=retention_days * 86_400),
    ]


@repository
class RunRepository:
    def __init__(self, database: Database, *, retention_days: int) -> None:
        self._database = database
        database.declare("runs", run_indexes(retention_days))

    def _runs(self, tenant_id: str) -> Any:
        return self._database.scoped("runs", tenant_id)

    async def insert_many(self, runs: list[Document], *, tenant_id: str) -> None:
        """Write the batch; a record the database refuses never takes the others with it, and
        is kept in a reduced form (`app/repositories/storable.py`) rather than lost.

        Idempotent: a record's `_id` is its `run_id`, so a record written again (a retry after
        a timeout, a journal replayed after a crash) is stored once; the duplicate is ignored."""
        for run in runs:
            run.setdefault("_id", run["run_id"])
        stored = [{**run, "tenant_id": tenant_id} for run in runs]
        try:
            await self._runs(tenant_id).insert_many(stored, ordered=False)
        except BulkWriteError as exc:  # the others were written
            errors = exc.details.get("writeErrors", [])
            failed = sorted({e["index"] for e in errors if e.get("code") != _DUPLICATE_KEY})
            await self._store_reduced([stored[index] for index in failed], tenant_id)
        except _REFUSED:  # refused while encoding the batch: write record by record
            await self._store_reduced(stored, tenant_id)

    async def _store_reduced(self, runs: list[Document], tenant_id: str) -> None:
        for run in runs:
            query = {"_id": run["_id"]}  # an upsert: safe if part was written already
            try:
                await self._runs(tenant_id).replace_one(query, dict(run), upsert=True)
                continue
            except (*_REFUSED, WriteError):
                logger.warning(
                    "run %s of tenant %s is stored reduced: the database refused part of it",
                    run["run_id"],
                    tenant_id,
                )
            kept = {key: value for key, value in run.items() if key not in ("_id", "tenant_id")}
            reduced = {
                "_id": run["_id"],
                "tenant_id": tenant_id,
                **storable_record(kept, bulky=("messages", "tool_calls")),
            }
            await self._runs(tenant_id).replace_one(query, reduced, upsert=True)

    async def get(self, run_id: str, *, tenant_id: str) -> Document | None:
        found: Document | None = await self._runs(tenant_id).find_one(
            {"_id": run_id, "tenant_id": tenant_id}, _NO_ID
        )
        return found

    async def page(self, query: RunQuery, *, tenant_id: str) -> list[Document]:
        """Newest first, from `query.after` on."""
        found: Document = {"tenant_id": tenant_id}
        if query.tool_id is not None:
            found["tool_calls.tool_id"] = query.tool_id
        if query.tool_name is not None:
            found["tool_calls.name"] = query.tool_name
        if query.status is not None:
            found["stop_reason"] = query.status
        started: Document = {}
        if query.since is not None:
            started["$gt"] = at_or_after(query.since)
        if query.until is not None:
            started["$lt"] = query.until
        if started:
            found["started_at"] = started
        if query.after is not None:
            at, run_id = query.after
            found["$or"] = [
                {"started_at": {"$lt": at}},
                {"started_at": at, "run_id": {"$lt": run_id}},
            ]
        cursor = (
            self._runs(tenant_id)
            .find(found, _NO_ID)
            .sort([("started_at", DESCENDING), ("run_id", DESCENDING)])
            .limit(query.limit)
        )
        return list(await cursor.to_list(None))

    async def tool_stats(
        self, tool_id: str, *, tenant_id: str, since: datetime, until: datetime
    ) -> Document:
        """Calls, errors and duration percentiles of one tool, computed by the database."""
        pipeline: list[Document] = [
            {
                "$match": {
                    "tenant_id": tenant_id,
                    "tool_calls.tool_id": tool_id,
                    "started_at": {"$gte": since, "$lt": until},
                }
            },
            {"$unwind": "$tool_calls"},
            {"$match": {"tool_calls.tool_id": tool_id}},
            {"$sort": {"tool_calls.duration_ms": ASCENDING}},
            {
                "$group": {
                    "_id": None,
                    "calls": {"$sum": 1},
                    "errors": {"$sum": {"$cond": [{"$eq": ["$tool_calls.status", "error"]}, 1, 0]}},
                    "durations": {"$push": "$tool_calls.duration_ms"},
                }
            },
            {
                "$project": {
                    "_id": 0,
                    "calls": 1,
                    "errors": 1,
                    "p50_ms": _nearest_rank("$durations", "$calls", 0.5),
                    "p95_ms": _nearest_rank("$durations", "$calls", 0.95),
                }
            },
        ]
        found = await aggregate(self._runs(tenant_id), pipeline)
        return (
            dict(found[0]) if found else {"calls": 0, "errors": 0, "p50_ms": None, "p95_ms": None}
        )

    async def tool_usage(self, window: UsageWindow, *, tenant_id: str) -> list[Document]:
        """Per tool over the window: calls, errors and the nearest-rank p50/p95 duration."""
        pipeline: list[Document] = [
            *_tool_calls_in(window, tenant_id),
            {"$sort": {"tool_calls.duration_ms": ASCENDING}},
            {
                "$group": {
                    "_id": _TOOL_KEY,
                    "calls": {"$sum": 1},
                    "errors": {"$sum": _FAILED_CALL},
                    "durations": {"$push": "$tool_calls.duration_ms"},
                }
            },
            {
                "$project": {
                    "_id": 0,
                    "key": "$_id",
                    "calls": 1,
                    "errors": 1,
                    "p50_ms": _nearest_rank("$durations", "$calls", 0.5),
                    "p95_ms": _nearest_rank("$durations", "$calls", 0.95),
                }
            },
        ]
        return await aggregate(self._runs(tenant_id), pipeline)

    async def tool_usage_series(
        self, window: UsageWindow, keys: Sequence[str], *, tenant_id: str
    ) -> list[Document]:
        """Per bucket: the calls and errors of each tool of `keys`, and of all the others
        together (key None)."""
        key = {"$cond": [{"$in": [_TOOL_KEY, list(keys)]}, _TOOL_KEY, None]}
        pipeline: list[Document] = [
            *_tool_calls_in(window, tenant_id),
            {
                "$group": {
                    "_id": {"key": key, "bucket": _bucket_of(window)},
                    "calls": {"$sum": 1},
                    "errors": {"$sum": _FAILED_CALL},
                }
            },
            {
                "$project": {
                    "_id": 0,
                    "key": "$_id.key",
                    "bucket": "$_id.bucket",
                    "calls": 1,
                    "errors": 1,
                }
            },
        ]
        return await aggregate(self._runs(tenant_id), pipeline)

    async def model_usage_series(self, window: UsageWindow, *, tenant_id: str) -> list[Document]:
        """Per provider, model and bucket: chats, model calls, chats ended `error`, tokens."""
        pipeline: list[Document] = [
            _window_match(window, tenant_id),
            {"$match": {"kind": "chat"}},
            {
                "$group": {
                    "_id": {
                        "provider": {"$ifNull": ["$provider", None]},
                        "model": {"$ifNull": ["$model", None]},
                        "bucket": _bucket_of(window),
                    },
                    "runs": {"$sum": 1},
                    "calls": {"$sum": _MODEL_CALLS},
                    "errors": {"$sum": {"$cond": [{"$eq": ["$stop_reason", "error"]}, 1, 0]}},
                    "prompt_tokens": {"$sum": "$usage.prompt_tokens"},
                    "completion_tokens": {"$sum": "$usage.completion_tokens"},
                    "total_tokens": {"$sum": "$usage.total_tokens"},
                }
            },
            {
                "$project": {
                    "_id": 0,
                    "provider": "$_id.provider",
                    "model": "$_id.model",
                    "bucket": "$_id.bucket",
                    "runs": 1,
                    "calls": 1,
                    "errors": 1,
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "total_tokens": 1,
                }
            },
        ]
        return await aggregate(self._runs(tenant_id), pipeline)

    async def drop_all(self, *, tenant_id: str) -> None:
        """Delete the tenant's records, in batches (a busy tenant may hold millions)."""
        runs = self._runs(tenant_id)
        while True:
            cursor = runs.find({"tenant_id": tenant_id}, {"_id": 1}).limit(PURGE_BATCH)
            ids = [doc["_id"] for doc in await cursor.to_list(None)]
            if not ids:
                return
            await runs.delete_many({"tenant_id": tenant_id, "_id": {"$in": ids}})


def at_or_after(moment: datetime) -> datetime:
    """For `{"$gt": ...}`: a millisecond before `moment`, at BSON's millisecond precision, so
    `$gt` of it is `$gte` of `moment`. The same query on MongoDB; SecantusDB (the test server)
    drops the documents exactly at an inclusive bound on a middle field of a compound index
    (here `started_at` between `tenant_id` and `run_id`)."""
    whole_ms = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    return whole_ms - timedelta(milliseconds=1)


def _window_match(window: UsageWindow, tenant_id: str) -> Document:
    """The usage aggregations' first stage, served by RUNS_BY_TIME: the tenant's records in the
    window (`at_or_after`: the window's start included on every store)."""
    started = {"$gt": at_or_after(window.since), "$lt": window.until}
    return {"$match": {"tenant_id": tenant_id, "started_at": started}}


def _tool_calls_in(window: UsageWindow, tenant_id: str) -> list[Document]:
    """One document per tool call of the window's records (a record stored reduced, its calls
    replaced by a marker, has none)."""
    return [
        _window_match(window, tenant_id),
        {"$project": {"_id": 0, "started_at": 1, "tool_calls": 1}},
        {"$unwind": "$tool_calls"},
        {"$match": {"tool_calls.status": {"$in": ["ok", "error"]}}},
    ]


def _bucket_of(window: UsageWindow) -> Document:
    """The record's bucket index: whole buckets from the window's origin. (`$dateTrunc` would
    say it in one word; the embedded store lacks it, and both have these.)"""
    elapsed = {"$subtract": ["$started_at", window.origin]}
    return {"$floor": {"$divide": [elapsed, window.bucket_ms]}}


def _nearest_rank(values: str, count: str, fraction: float) -> Document:
    """The nearest-rank percentile of a sorted array: element ceil(fraction * n) - 1."""
    rank = {"$subtract": [{"$ceil": {"$multiply": [fraction, count]}}, 1]}
    return {"$arrayElemAt": [values, {"$max": [0, rank]}]}


class RunStore(Protocol):
    """What the services need of run storage (MongoDB collection or the in-process ring)."""

    async def insert_many(self, runs: list[Document], *, tenant_id: str) -> None: ...

    async def get(self, run_id: str, *, tenant_id: str) -> Document | None: ...

    async def page(self, query: RunQuery, *, tenant_id: str) -> list[Document]: ...

    async def tool_stats(
        self, tool_id: str, *, tenant_id: str, since: datetime, until: datetime
    ) -> Document: ...

    async def tool_usage(self, window: UsageWindow, *, tenant_id: str) -> list[Document]: ...

    async def tool_usage_series(
        self, window: UsageWindow, keys: Sequence[str], *, tenant_id: str
    ) -> list[Document]: ...

    async def model_usage_series(
        self, window: UsageWindow, *, tenant_id: str
    ) -> list[Document]: ...

    async def drop_all(self, *, tenant_id: str) -> None: ...


class MemoryRunRepository:
    """Run records of the embedded store: the newest `limit` runs per tenant, in process memory.

    The embedded store (mongomock) has no TTL monitor, and its inserts cost ~0.4 ms each once a
    collection holds a few thousand documents: a bounded ring keeps the zero-setup mode fast and
    its memory flat. Same contract as RunRepository (tests/services/test_run_stores.py).
    """

    def __init__(self, *, limit: int) -> None:
        self._limit = limit
        self._runs: dict[str, deque[Document]] = {}

    async def insert_many(self, runs: list[Document], *, tenant_id: str) -> None:
        ring = self._runs.setdefault(tenant_id, deque(maxlen=self._limit))
        ring.extend(dict(run) for run in runs)

    async def get(self, run_id: str, *, tenant_id: str) -> Document | None:
        return next((dict(r) for r in self._runs.get(tenant_id, ()) if r["run_id"] == run_id), None)

    async def page(self, query: RunQuery, *, tenant_id: str) -> list[Document]:
        q = query

        def wanted(run: Document) -> bool:
            calls = run.get("tool_calls", [])
            return (
                (q.tool_id is None or any(c.get("tool_id") == q.tool_id for c in calls))
                and (q.tool_name is None or any(c.get("name") == q.tool_name for c in calls))
                and (q.status is None or run["stop_reason"] == q.status)
                and (q.since is None or run["started_at"] >= q.since)
                and (q.until is None or run["started_at"] < q.until)
                and (q.after is None or (run["started_at"], run["run_id"]) < q.after)
            )

        found = [run for run in self._runs.get(tenant_id, ()) if wanted(run)]
        found.sort(key=lambda run: (run["started_at"], run["run_id"]), reverse=True)
        return [dict(run) for run in found[: q.limit]]

    async def tool_stats(
        self, tool_id: str, *, tenant_id: str, since: datetime, until: datetime
    ) -> Document:
        calls = [
            call
            for run in self._runs.get(tenant_id, ())
            if since <= run["started_at"] < until
            for call in run.get("tool_calls", [])
            if call.get("tool_id") == tool_id
        ]
        durations = sorted(call["duration_ms"] for call in calls)
        errors = sum(1 for call in calls if call["status"] == "error")
        return {
            "calls": len(calls),
            "errors": errors,
            "p50_ms": _rank(durations, 0.5),
            "p95_ms": _rank(durations, 0.95),
        }

    def _in_window(self, window: UsageWindow, tenant_id: str) -> list[Document]:
        return [
            run
            for run in self._runs.get(tenant_id, ())
            if window.since <= run["started_at"] < window.until
        ]

    def _calls_in(self, window: UsageWindow, tenant_id: str) -> list[tuple[Document, Document]]:
        return [
            (run, call)
            for run in self._in_window(window, tenant_id)
            if isinstance(run.get("tool_calls"), list)
            for call in run["tool_calls"]
            if isinstance(call, dict) and call.get("status") in ("ok", "error")
        ]

    async def tool_usage(self, window: UsageWindow, *, tenant_id: str) -> list[Document]:
        durations: dict[str, list[float]] = {}
        errors: dict[str, int] = {}
        for _, call in self._calls_in(window, tenant_id):
            key = str(call.get("tool_id") or call.get("name"))
            durations.setdefault(key, []).append(call["duration_ms"])
            errors[key] = errors.get(key, 0) + (call["status"] == "error")
        found = []
        for key, spent in durations.items():
            spent.sort()
            found.append(
                {
                    "key": key,
                    "calls": len(spent),
                    "errors": errors[key],
                    "p50_ms": _rank(spent, 0.5),
                    "p95_ms": _rank(spent, 0.95),
                }
            )
        return found

    async def tool_usage_series(
        self, window: UsageWindow, keys: Sequence[str], *, tenant_id: str
    ) -> list[Document]:
        wanted = set(keys)
        rows: dict[tuple[str | None, int], Document] = {}
        for run, call in self._calls_in(window, tenant_id):
            key = str(call.get("tool_id") or call.get("name"))
            at = (key if key in wanted else None, _bucket(run, window))
            row = rows.setdefault(at, {"key": at[0], "bucket": at[1], "calls": 0, "errors": 0})
            row["calls"] += 1
            row["errors"] += call["status"] == "error"
        return list(rows.values())

    async def model_usage_series(self, window: UsageWindow, *, tenant_id: str) -> list[Document]:
        rows: dict[tuple[str | None, str | None, int], Document] = {}
        for run in self._in_window(window, tenant_id):
            if run.get("kind") != "chat":
                continue
            at = (run.get("provider"), run.get("model"), _bucket(run, window))
            row = rows.setdefault(at, dict(zip(("provider", "model", "bucket"), at, strict=True)))
            usage = run.get("usage") or {}
            for name, value in (
                ("runs", 1),
                ("calls", _model_calls(run)),
                ("errors", run.get("stop_reason") == "error"),
                ("prompt_tokens", usage.get("prompt_tokens", 0)),
                ("completion_tokens", usage.get("completion_tokens", 0)),
                ("total_tokens", usage.get("total_tokens", 0)),
            ):
                row[name] = row.get(name, 0) + int(value)
        return list(rows.values())

    async def drop_all(self, *, tenant_id: str) -> None:
        self._runs.pop(tenant_id, None)


def _model_calls(run: Document) -> int:
    calls = run.get("model_calls")
    return len(calls) if isinstance(calls, list) else int(run.get("iterations", 0))


def _bucket(run: Document, window: UsageWindow) -> int:
    return int((run["started_at"] - window.origin) // timedelta(seconds=window.bucket_s))


def _rank(ordered: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile, as the MongoDB pipeline computes it."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]
