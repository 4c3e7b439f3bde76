"""GET /usage: what the run records say, per tool and per model, for the calling tenant only,
and a clear 422 for a window past its bounds or a parameter of the wrong type."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.support.apps import ADMIN, TenantCredentials
from tests.support.waiting import runs_recorded


async def invoke(client: httpx.AsyncClient, tenant: TenantCredentials, d: int) -> None:
    response = await client.post(
        "/tools/rolldice/invoke", json={"arguments": {"d": d}}, headers=tenant.headers
    )
    assert response.status_code == 200, response.text


def nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))  # ceil
    return ordered[int(rank) - 1]


@pytest.mark.all_stores
async def test_usage_per_tool_matches_the_run_records(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    for d in [6] * 9 + [1] * 3:  # d=1 is refused by the function: an error
        await invoke(client, acme, d)
    runs = await runs_recorded(client, acme.headers, 12)
    durations = [run["tool_calls"][0]["duration_ms"] for run in runs]
    answer = await client.get("/usage?bucket=1m&since=" + _ago(minutes=30), headers=acme.headers)
    assert answer.status_code == 200, answer.text
    usage = answer.json()
    assert usage["by"] == "tool" and usage["bucket_s"] == 60 and len(usage["buckets"]) in (30, 31)
    [dice] = usage["keys"]
    assert dice == {
        "key": "rolldice",
        "calls": 12,
        "errors": 3,
        "error_rate": 0.25,
        "p50_ms": nearest_rank(durations, 0.5),
        "p95_ms": nearest_rank(durations, 0.95),
    }
    [series] = usage["series"]
    assert (sum(series["calls"]), sum(series["errors"])) == (12, 3)
    assert usage["totals"] == {"calls": 12, "errors": 3, "error_rate": 0.25, "keys": 1}
    assert usage["failing"] == [dice] and usage["slowest"] == [dice]

    other = (await client.get("/usage", headers=globex.headers)).json()
    assert other["keys"] == [] and other["totals"]["calls"] == 0
    assert len(other["buckets"]) in (24, 25)  # a day of hours, the first one cut


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("by=workflow", "by"),
        ("by=1", "by"),
        ("bucket=2h", "bucket"),
        ("bucket=", "bucket"),
        ("limit=0", "limit"),
        ("limit=51", "limit"),
        ("limit=ten", "limit"),
        ("since=0.5", "since"),
        ("since=yesterday", "since"),
        ("since=" + "9" * 5000, "since"),
        ("until=2026-13-40T00:00:00Z", "until"),
        ("since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "query.since"),
        ("since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z&bucket=1d", "query.since"),
        ("since=2026-01-01T00:00:00Z&until=2026-01-08T00:00:00Z&bucket=1m", "query.bucket"),
        ("since=0001-01-01T00:00:00%2B01:00", "since"),
    ],
)
async def test_a_bad_window_or_parameter_is_a_422_naming_it(
    client: httpx.AsyncClient, acme: TenantCredentials, query: str, path: str
) -> None:
    answer = await client.get(f"/usage?{query}", headers=acme.headers)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert any(path in error["path"] for error in answer.json()["errors"]), answer.json()


async def test_usage_needs_a_tenant_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/usage")).status_code == 401
    assert (await client.get("/usage", headers=ADMIN)).status_code == 403


async def test_the_route_is_documented(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    operation = schema["paths"]["/usage"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert {"by", "since", "until", "bucket", "limit"} <= names
    assert "UsageReport" in schema["components"]["schemas"]


def _ago(**delta: Any) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat().replace("+00:00", "Z")
