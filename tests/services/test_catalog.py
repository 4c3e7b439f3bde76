"""The tool catalog cache: fresh after writes, bounded staleness, no stale fill after a race."""

from __future__ import annotations

import asyncio
from typing import Any

from app.services.catalog import ToolCatalog
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
