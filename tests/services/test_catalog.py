"""The tool catalog cache: fresh after writes, bounded staleness, no stale fill after a race."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from app.services.catalog import ToolCatalog, always
from tests.support.clock import FakeClock
from tests.support.waiting import within


def _tool(tool_id: str) -> dict[str, Any]:
    return {
        "tool_id": tool_id,
        "type": "function",
        "enabled": True,
        "tags": [],
        "context_parameters": [],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "function": {"name": tool_id, "parameters": {"properties": {}, "required": []}},
    }


class SlowRepository:
    """The repository seam: returns the current documents after an optional pause."""

    def __init__(self) -> None:
        self.docs = [_tool("a")]
        self.reads = 0
        self.pause: asyncio.Event | None = None

    async def all(self, *, tenant_id: str) -> list[dict[str, Any]]:
        self.reads += 1
        snapshot = list(self.docs)
        if self.pause is not None:
            await self.pause.wait()
        return snapshot


async def test_cached_until_ttl_then_reloaded() -> None:
    repo, clock = SlowRepository(), FakeClock()
    catalog = ToolCatalog(tools=repo, ttl_s=0.2, clock=clock)  # type: ignore[arg-type]
    first = await catalog.enabled(tenant_id="t")
    assert [t.name for t in first] == ["a"] and first[0].schema["function"]["name"] == "a"
    repo.docs.append(_tool("b"))  # as if another replica wrote it
    assert [t.name for t in await catalog.enabled(tenant_id="t")] == ["a"]
    assert repo.reads == 1
    clock.advance(0.25)
    assert [t.name for t in await catalog.enabled(tenant_id="t")] == ["a", "b"]


async def test_invalidate_applies_at_once_and_per_tenant() -> None:
    repo = SlowRepository()
    catalog = ToolCatalog(tools=repo, ttl_s=60)  # type: ignore[arg-type]
    await catalog.enabled(tenant_id="t")
    await catalog.enabled(tenant_id="u")
    repo.docs.append(_tool("b"))
    catalog.invalidate("t")
    assert [t.name for t in await catalog.enabled(tenant_id="t")] == ["a", "b"]
    assert [t.name for t in await catalog.enabled(tenant_id="u")] == ["a"]


async def test_a_load_racing_a_write_is_not_cached() -> None:
    repo = SlowRepository()
    catalog = ToolCatalog(tools=repo, ttl_s=60)  # type: ignore[arg-type]
    repo.pause = asyncio.Event()
    loading = asyncio.create_task(catalog.enabled(tenant_id="t"))  # reads ["a"], then waits
    await within(lambda: repo.reads == 1, 1)
    repo.docs.append(_tool("b"))
    catalog.invalidate("t")  # the write lands while the read is in flight
    repo.pause.set()
    assert [t.name for t in await loading] == ["a"]
    repo.pause = None
    assert [t.name for t in await catalog.enabled(tenant_id="t")] == ["a", "b"]


async def test_ttl_zero_disables_the_cache() -> None:
    repo = SlowRepository()
    catalog = ToolCatalog(tools=repo, ttl_s=0)  # type: ignore[arg-type]
    await catalog.enabled(tenant_id="t")
    await catalog.enabled(tenant_id="t")
    assert repo.reads == 2


async def test_a_burst_of_requests_on_a_cold_or_expired_tenant_reads_once() -> None:
    repo = SlowRepository()
    catalog = ToolCatalog(tools=repo, ttl_s=60)  # type: ignore[arg-type]
    repo.pause = asyncio.Event()
    burst = [asyncio.create_task(catalog.enabled(tenant_id="t")) for _ in range(30)]
    await within(lambda: repo.reads == 1, 1)
    repo.pause.set()
    assert all([t.name for t in tools] == ["a"] for tools in await asyncio.gather(*burst))
    assert repo.reads == 1  # before: 30 identical reads, each waiting on the database


def _stored(tool_id: str, description: str = "A tool.", day: int = 1) -> dict[str, Any]:
    when = datetime(2026, 1, day, tzinfo=UTC)
    doc = {**_tool(tool_id), "created_at": when, "updated_at": when}
    doc["function"] = {**doc["function"], "description": description}
    return doc


class Documents:
    """The repository seam, per tenant, with real datetimes (as the database returns them)."""

    def __init__(self) -> None:
        self.docs: dict[str, list[dict[str, Any]]] = {}

    async def all(self, *, tenant_id: str) -> list[dict[str, Any]]:
        return sorted(self.docs.get(tenant_id, []), key=lambda d: d["tool_id"])


async def test_a_refresh_parses_only_the_documents_that_changed() -> None:
    repo = Documents()
    repo.docs["t"] = [_stored(f"tool-{n:03d}") for n in range(200)]
    catalog = ToolCatalog(tools=repo, ttl_s=60, coherent=always)  # type: ignore[arg-type]
    first = await catalog.snapshot(tenant_id="t")
    assert catalog.parsed.parses == 200
    changed = _stored("tool-007", description="Another.", day=2)
    repo.docs["t"][7] = changed
    repo.docs["t"].append(_stored("tool-new"))
    catalog.mark_stale("t")
    second = await catalog.snapshot(tenant_id="t")
    assert catalog.parsed.parses == 202  # the edited one and the new one
    assert second.by_id["tool-007"].tool.description == "Another."  # type: ignore[union-attr]
    assert second.by_id["tool-001"] is first.by_id["tool-001"]  # reused as it was
    assert len(second.entries) == 201


async def test_tenants_storing_the_same_definition_share_one_typed_tool() -> None:
    repo = Documents()
    for tenant, day in (("a", 1), ("b", 2)):  # created on different days: different JSON
        repo.docs[tenant] = [_stored("dice", day=day)]
    catalog = ToolCatalog(tools=repo, ttl_s=60, coherent=always)  # type: ignore[arg-type]
    a = (await catalog.snapshot(tenant_id="a")).by_id["dice"]
    b = (await catalog.snapshot(tenant_id="b")).by_id["dice"]
    assert a.tool is b.tool and catalog.parsed.parses == 1
    assert b"2026-01-01" in a.json and b"2026-01-02" in b.json  # each its own timestamps


async def test_a_snapshot_is_read_again_only_when_its_tools_change() -> None:
    repo, clock = Documents(), FakeClock()
    repo.docs["t"] = [_stored("a")]
    catalog = ToolCatalog(  # type: ignore[arg-type]
        tools=repo, ttl_s=2, clock=clock, coherent=always
    )
    await catalog.snapshot(tenant_id="t")
    for _ in range(100):  # used ten times a second for ten seconds
        clock.advance(0.1)
        await catalog.snapshot(tenant_id="t")
    assert catalog.reads == 1  # before: a rebuild every second of use
    catalog.mark_stale("t")
    await catalog.snapshot(tenant_id="t")
    assert catalog.reads == 2


async def test_snapshots_are_bounded_by_their_last_use() -> None:
    repo, clock = Documents(), FakeClock()
    catalog = ToolCatalog(  # type: ignore[arg-type]
        tools=repo, ttl_s=2, clock=clock, coherent=always, idle_s=600, max_tenants=50
    )
    for n in range(120):
        repo.docs[f"t{n}"] = [_stored("dice")]
        await catalog.snapshot(tenant_id=f"t{n}")
    assert catalog.cached_tenants == 50 and catalog.evicted == 70
    clock.advance(601)
    await catalog.snapshot(tenant_id="t0")
    assert catalog.cached_tenants == 1  # every other one unused for the idle bound
