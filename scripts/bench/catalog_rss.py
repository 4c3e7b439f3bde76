"""RSS with many tenants touched once (issue 49): what the tool catalog, the largest of the
per-tenant caches, holds per tenant, and that it stays bounded.

    python scripts/bench/catalog_rss.py [--tenants 10000] [--max-tenants 10000]

The catalog (`ToolCatalog`, as the service builds it: the seeded function tools of
app/tools/builtin.py, the deployment's idle and size bounds) reads each tenant's tools once
through the repository seam (the seeded documents, as a new tenant has them), in this process;
RSS is read after a warm-up, after `--tenants` tenants were touched once, and after as many
more (past TOOL_CACHE_MAX_TENANTS the least recently used snapshots go: it must not grow). The
store's own data is not in the figures (the service's embedded store keeps every tenant's
documents in its process; a MongoDB deployment keeps them in the database).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.services.catalog import ToolCatalog, always
from app.tools.builtin import registry

STORED_AT = datetime(2026, 1, 1, tzinfo=UTC)


class SeededTools:
    """The repository seam: every tenant holds the seeded function tools."""

    async def all(self, *, tenant_id: str) -> list[dict[str, Any]]:
        stamps = {"created_at": STORED_AT, "updated_at": STORED_AT}
        return [{**entry.seed_document(), **stamps} for entry in registry]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def measure(tenants: int, max_tenants: int) -> dict[str, float]:
    catalog = ToolCatalog(
        tools=SeededTools(),  # type: ignore[arg-type]
        ttl_s=2,
        coherent=always,
        registry=registry,
        max_tenants=max_tenants,
        idle_s=900,
    )
    await catalog.snapshot(tenant_id="warm-up")
    gc.collect()
    base = rss_mb()
    for n in range(tenants):
        await catalog.snapshot(tenant_id=f"t{n}")
    gc.collect()
    once = rss_mb()
    for n in range(tenants):
        await catalog.snapshot(tenant_id=f"u{n}")
    gc.collect()
    return {
        "tenants": tenants,
        "rss_mb_before": base,
        "rss_mb_touched_once": once,
        "rss_mb_twice_as_many_touched": rss_mb(),
        "kb_per_tenant": 1024 * (once - base) / tenants,
        "cached": catalog.cached_tenants,
        "evicted": catalog.evicted,
        "documents_parsed": catalog.parsed.parses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--max-tenants", type=int, default=10_000)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.tenants, args.max_tenants))
    print(
        f"{figures['tenants']} tenants touched once: RSS {figures['rss_mb_before']:.1f} -> "
        f"{figures['rss_mb_touched_once']:.1f} MB ({figures['kb_per_tenant']:.2f} KB each); "
        f"twice as many: {figures['rss_mb_twice_as_many_touched']:.1f} MB; "
        f"{figures['cached']} kept, {figures['evicted']} evicted, "
        f"{figures['documents_parsed']} documents parsed"
    )


if __name__ == "__main__":
    main()
