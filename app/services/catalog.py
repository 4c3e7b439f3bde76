"""Each tenant's enabled tools, ready for a model, cached briefly.

Loading a tenant's tools and building their schemas on every chat was the largest cost after
the model call itself. Writes through this process invalidate the tenant at once; another
replica's writes are seen within `ttl_s` (TOOL_CACHE_TTL_S; 0 turns the cache off).
"""

from __future__ import annotations

import time

from app.repositories.tools import ToolRepository
from app.tools.schema import PreparedTool


class ToolCatalog:
    def __init__(self, *, tools: ToolRepository, ttl_s: float) -> None:
        self._tools = tools
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, list[PreparedTool]]] = {}
        self._generations: dict[str, int] = {}

    async def enabled(self, *, tenant_id: str) -> list[PreparedTool]:
        """The tenant's enabled tools, ordered by tool_id."""
        cached = self._entries.get(tenant_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        generation = self._generations.get(tenant_id, 0)
        docs = await self._tools.enabled(tenant_id=tenant_id)
        prepared = [PreparedTool.from_doc(doc) for doc in docs]
        # Store only if no write invalidated the tenant while we were reading.
        if self._ttl_s > 0 and self._generations.get(tenant_id, 0) == generation:
            self._entries[tenant_id] = (time.monotonic() + self._ttl_s, prepared)
        return prepared

    def invalidate(self, tenant_id: str) -> None:
        self._generations[tenant_id] = self._generations.get(tenant_id, 0) + 1
        self._entries.pop(tenant_id, None)
