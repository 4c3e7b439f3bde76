"""Usage over time (GET /usage): the window checked and bucketed, the database's aggregation over
run records shaped into series, totals and the slowest and most failing tools."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from app.errors import UnprocessableError, field_error
from app.repositories.database import Document
from app.repositories.runs import RunStore
from app.schemas.usage import (
    BUCKET_SECONDS,
    MAX_BUCKETS,
    MAX_RANGE,
    TOP,
    BucketSize,
    UsageBy,
    UsageWindow,
)

OTHER = "(other)"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MODEL_SUMS = ("runs", "calls", "errors", "prompt_tokens", "completion_tokens", "total_tokens")


def usage_window(
    *, since: datetime | None, until: datetime | None, bucket: BucketSize, now: datetime
) -> UsageWindow:
    """The window a request asks for (default: the day before `until`, itself default now),
    or a 422 when it is empty, longer than MAX_RANGE or cut into more than MAX_BUCKETS."""
    until = until or now
    since = since or until - timedelta(days=1)
    if since >= until:
        raise UnprocessableError(
            "The usage window is empty.",
            errors=[field_error("query.since", "must be before until")],
        )
    if until - since > MAX_RANGE:
        raise UnprocessableError(
            "The usage window is too long.",
            errors=[field_error("query.since", f"at most {MAX_RANGE.days} days before until")],
        )
    bucket_s = BUCKET_SECONDS[bucket]
    origin_s = math.floor((since - _EPOCH).total_seconds() / bucket_s) * bucket_s
    origin = _EPOCH + timedelta(seconds=origin_s)
    count = math.ceil((until - origin).total_seconds() / bucket_s)
    if count > MAX_BUCKETS:
        raise UnprocessableError(
            "The usage window holds too many buckets.",
            errors=[
                field_error(
                    "query.bucket",
                    f"{count} buckets of {bucket}; at most {MAX_BUCKETS}: choose a larger bucket",
                )
            ],
        )
    return UsageWindow(since=since, until=until, origin=origin, bucket_s=bucket_s)


async def usage_report(
    runs: RunStore,
    window: UsageWindow,
    *,
    tenant_id: str,
    by: UsageBy,
    bucket: BucketSize,
    limit: int,
) -> dict[str, Any]:
    """The report (a UsageReport): per tool or per provider and model."""
    count = math.ceil((window.until - window.origin).total_seconds() / window.bucket_s)
    head = {
        "by": by,
        "since": window.since,
        "until": window.until,
        "bucket": bucket,
        "bucket_s": window.bucket_s,
        "buckets": [window.origin + timedelta(seconds=i * window.bucket_s) for i in range(count)],
    }
    if by == "tool":
        return {**head, **await _by_tool(runs, window, count, tenant_id=tenant_id, limit=limit)}
    return {**head, **await _by_model(runs, window, count, tenant_id=tenant_id, limit=limit)}


async def _by_tool(
    runs: RunStore, window: UsageWindow, count: int, *, tenant_id: str, limit: int
) -> dict[str, Any]:
    keys = [_tool_key(row) for row in await runs.tool_usage(window, tenant_id=tenant_id)]
    keys.sort(key=lambda k: (-k["calls"], k["key"]))
    shown = keys[:limit]
    rows = await runs.tool_usage_series(window, [k["key"] for k in shown], tenant_id=tenant_id)
    series: dict[str | None, dict[str, Any]] = {
        k["key"]: _empty_series(k["key"], count, ()) for k in shown
    }
    for row in rows:
        # None: the other tools; or a tool first called between the two reads, counted there.
        key = row["key"] if row["key"] in series else None
        if key is None and None not in series:
            series[None] = _empty_series(OTHER, count, ())
        _add(series[key], row, int(row["bucket"]), ("calls", "errors"))
    if None in series:  # the keys past `limit` as one, as its series counts them
        other = series[None]
        summed = {"calls": sum(other["calls"]), "errors": sum(other["errors"])}
        shown.append(_summed(OTHER, [summed], ("calls", "errors")))
    calls, errors = sum(k["calls"] for k in keys), sum(k["errors"] for k in keys)
    failing = [k for k in keys if k["errors"]]
    failing.sort(key=lambda k: (-k["errors"], -k["error_rate"], k["key"]))
    slowest = sorted(keys, key=lambda k: (-(k["p95_ms"] or 0), -(k["p50_ms"] or 0), k["key"]))
    return {
        "totals": {
            "calls": calls,
            "errors": errors,
            "error_rate": _rate(errors, calls),
            "keys": len(keys),
        },
        "keys": shown,
        "series": list(series.values()),
        "slowest": slowest[:TOP],
        "failing": failing[:TOP],
    }


async def _by_model(
    runs: RunStore, window: UsageWindow, count: int, *, tenant_id: str, limit: int
) -> dict[str, Any]:
    rows = await runs.model_usage_series(window, tenant_id=tenant_id)
    series: dict[tuple[Any, Any], dict[str, Any]] = {}
    for row in rows:
        pair = (row.get("provider"), row.get("model"))
        if pair not in series:
            key = (pair[1] or "(no model)") if pair[0] is None else f"{pair[0]} / {pair[1]}"
            line = _empty_series(key, count, _MODEL_SUMS)
            series[pair] = {**line, "provider": pair[0], "model": pair[1]}
        _add(series[pair], row, int(row["bucket"]), _MODEL_SUMS)
    lines = sorted(series.values(), key=lambda line: (-sum(line["calls"]), line["key"]))
    shown_lines = lines[:limit]
    if lines[limit:]:
        shown_lines.append(_summed_series(OTHER, lines[limit:], count))
    shown = [_model_key(line) for line in shown_lines]
    sums = {name: sum(sum(line[name]) for line in lines) for name in _MODEL_SUMS}
    return {
        "totals": {
            "calls": sums["calls"],
            "errors": sums["errors"],
            "error_rate": _rate(sums["errors"], sums["runs"]),
            "keys": len(lines),
            "runs": sums["runs"],
            "total_tokens": sums["total_tokens"],
        },
        "keys": shown,
        "series": shown_lines,
        "slowest": [],
        "failing": [],
    }


def _tool_key(row: Document) -> dict[str, Any]:
    calls, errors = int(row["calls"]), int(row["errors"])
    return {
        "key": str(row["key"]),
        "calls": calls,
        "errors": errors,
        "error_rate": _rate(errors, calls),
        "p50_ms": row.get("p50_ms"),
        "p95_ms": row.get("p95_ms"),
    }


def _model_key(line: dict[str, Any]) -> dict[str, Any]:
    sums = {name: sum(line[name]) for name in _MODEL_SUMS}
    return {
        "key": line["key"],
        "provider": line.get("provider"),
        "model": line.get("model"),
        **sums,
        "error_rate": _rate(sums["errors"], sums["runs"]),
    }


def _empty_series(key: str, count: int, names: Iterable[str]) -> dict[str, Any]:
    return {"key": key, "calls": [0] * count, "errors": [0] * count} | {
        name: [0] * count for name in names
    }


def _add(line: dict[str, Any], row: Document, at: int, names: Iterable[str]) -> None:
    if 0 <= at < len(line["calls"]):
        for name in names:
            line[name][at] += int(row.get(name) or 0)


def _summed(key: str, keys: list[dict[str, Any]], names: Iterable[str]) -> dict[str, Any]:
    """The keys past `limit` as one (percentiles do not add up: none)."""
    sums = {name: sum(k[name] for k in keys) for name in names}
    return {"key": key, **sums, "error_rate": _rate(sums["errors"], sums["calls"])}


def _summed_series(key: str, lines: list[dict[str, Any]], count: int) -> dict[str, Any]:
    summed = _empty_series(key, count, _MODEL_SUMS)
    for line in lines:
        for name in _MODEL_SUMS:
            summed[name] = [a + b for a, b in zip(summed[name], line[name], strict=True)]
    return summed


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
